"""Write a Triton model repository for an ONNX model: ``<name>/config.pbtxt`` + ``<name>/<version>/model.onnx``.

The config is derived from the ONNX graph alone (platform ``onnxruntime_onnx``, input and
output names, data types and dims), so the deployment starts out consistent with the
export; ``gapcheck triton-audit`` later checks that it stayed that way.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
from google.protobuf import text_encoding

from gapcheck.atomic import check_folder, write_atomic
from gapcheck.errors import InputError, UsageError
from gapcheck.model.onnx_file import ONNX_PROTOBUF_LIMIT
from gapcheck.model.onnx_file import load_onnx as load_onnx_file
from gapcheck.triton.url import check_model_name

logger = logging.getLogger(__name__)

# Used when the batch axis is dynamic and the caller names no limit: large enough for
# validation batches, small enough that a CPU instance does not allocate absurd buffers.
DEFAULT_MAX_BATCH_SIZE = 64

ONNX_TO_TRITON = {
    onnx.TensorProto.FLOAT: "TYPE_FP32",
    onnx.TensorProto.FLOAT16: "TYPE_FP16",
    onnx.TensorProto.BFLOAT16: "TYPE_BF16",
    onnx.TensorProto.DOUBLE: "TYPE_FP64",
    onnx.TensorProto.INT8: "TYPE_INT8",
    onnx.TensorProto.INT16: "TYPE_INT16",
    onnx.TensorProto.INT32: "TYPE_INT32",
    onnx.TensorProto.INT64: "TYPE_INT64",
    onnx.TensorProto.UINT8: "TYPE_UINT8",
    onnx.TensorProto.UINT16: "TYPE_UINT16",
    onnx.TensorProto.UINT32: "TYPE_UINT32",
    onnx.TensorProto.UINT64: "TYPE_UINT64",
    onnx.TensorProto.BOOL: "TYPE_BOOL",
    onnx.TensorProto.STRING: "TYPE_STRING",
}
INSTANCE_KINDS = ("KIND_CPU", "KIND_GPU", "KIND_AUTO")


@dataclass(frozen=True)
class OnnxIo:
    """One graph input or output as Triton sees it: ``None`` in ``shape`` is a dynamic axis."""

    name: str
    triton_type: str  # TYPE_FP32, ...
    shape: tuple[int | None, ...]


def load_onnx(onnx_model: onnx.ModelProto | str | Path) -> onnx.ModelProto:
    """The model itself, or the file read the hostile-input way (size-bounded, checked)."""
    if isinstance(onnx_model, onnx.ModelProto):
        return onnx_model
    return load_onnx_file(onnx_model)


def _io(value: onnx.ValueInfoProto) -> OnnxIo:
    tensor_type = value.type.tensor_type
    triton_type = ONNX_TO_TRITON.get(tensor_type.elem_type)  # type: ignore[call-overload]
    if triton_type is None:
        raise InputError(f"ONNX value {value.name!r} has element type "
                         f"{onnx.TensorProto.DataType.Name(tensor_type.elem_type)}, which Triton cannot serve")
    if not tensor_type.HasField("shape"):
        raise InputError(f"ONNX value {value.name!r} has no shape (not even its rank); Triton needs dims")
    shape = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tensor_type.shape.dim)
    return OnnxIo(name=value.name, triton_type=triton_type, shape=shape)


def onnx_inputs(model: onnx.ModelProto) -> list[OnnxIo]:
    # Older exporters list initializers among the graph inputs; those are weights, not request tensors.
    weights = {init.name for init in model.graph.initializer}
    return [_io(v) for v in model.graph.input if v.name not in weights]


def onnx_outputs(model: onnx.ModelProto) -> list[OnnxIo]:
    return [_io(v) for v in model.graph.output]


def has_dynamic_batch(model: onnx.ModelProto) -> bool:
    """True when every input and output has rank >= 1 and a dynamic first axis."""
    tensors = onnx_inputs(model) + onnx_outputs(model)
    return bool(tensors) and all(t.shape and t.shape[0] is None for t in tensors)


def resolve_max_batch_size(model: onnx.ModelProto, max_batch_size: int | None) -> int:
    dynamic = has_dynamic_batch(model)
    if max_batch_size is None:
        return DEFAULT_MAX_BATCH_SIZE if dynamic else 0
    if max_batch_size < 0:
        raise UsageError("max_batch_size must be >= 0")
    if max_batch_size > 0 and not dynamic:
        raise UsageError(
            f"max_batch_size={max_batch_size} needs a dynamic first (batch) axis on every input and output, "
            "but the ONNX graph has a fixed one",
            hint="export with a dynamic batch axis, or use max_batch_size=0",
        )
    return max_batch_size


def _dims(io: OnnxIo, batched: bool) -> str:
    shape = io.shape[1:] if batched else io.shape
    return ", ".join("-1" if d is None else str(d) for d in shape)


def _tensor_block(kind: str, tensors: list[OnnxIo], batched: bool) -> list[str]:
    lines = [f"{kind} ["]
    for i, io in enumerate(tensors):
        lines += ["  {", f'    name: "{_escape(io.name)}"', f"    data_type: {io.triton_type}"]
        if batched and len(io.shape) == 1:
            # A rank-1 tensor under batching is a batch of scalars: Triton's idiom is dims [1] reshaped to [].
            lines += ["    dims: [ 1 ]", "    reshape: { shape: [ ] }"]
        else:
            lines.append(f"    dims: [ {_dims(io, batched)} ]")
        lines.append("  }" + ("," if i < len(tensors) - 1 else ""))
    return lines + ["]"]


def _escape(text: str) -> str:
    # protobuf's own text-format escaping: quotes, backslashes, newlines and other control characters.
    return text_encoding.CEscape(text, as_utf8=True)


def model_config_text(
    model: onnx.ModelProto, name: str, *, max_batch_size: int | None = None, instance_kind: str = "KIND_CPU"
) -> str:
    """The ``config.pbtxt`` text for serving ``model`` with Triton's onnxruntime backend."""
    if instance_kind not in INSTANCE_KINDS:
        raise UsageError(f"instance_kind must be one of {', '.join(INSTANCE_KINDS)}, not {instance_kind!r}")
    batch = resolve_max_batch_size(model, max_batch_size)
    batched = batch > 0
    inputs, outputs = onnx_inputs(model), onnx_outputs(model)
    lines = [
        f'name: "{_escape(name)}"',
        'platform: "onnxruntime_onnx"',
        f"max_batch_size: {batch}",
        *_tensor_block("input", inputs, batched),
        *_tensor_block("output", outputs, batched),
        "instance_group [",
        "  {",
        f"    kind: {instance_kind}",
        "    count: 1",
        "  }",
        "]",
    ]
    return "\n".join(lines) + "\n"


def write_model_repository(
    onnx_model: onnx.ModelProto | str | Path,
    repo_dir: str | Path,
    name: str,
    *,
    version: int = 1,
    max_batch_size: int | None = None,
    instance_kind: str = "KIND_CPU",
) -> Path:
    """Write ``repo_dir/name/config.pbtxt`` and ``repo_dir/name/version/model.onnx``; return the model directory.

    The name is checked first (:func:`gapcheck.triton.url.check_model_name`) and the config text is parsed
    with Triton's own ``ModelConfig`` protobuf before anything is written.
    """
    check_model_name(name)
    if int(version) < 1:
        raise UsageError("Triton model versions start at 1")
    check_repository_dir(repo_dir)
    model = load_onnx(onnx_model)
    config = model_config_text(model, name, max_batch_size=max_batch_size, instance_kind=instance_kind)
    parse_model_config(config, name)
    model_dir = Path(repo_dir) / name
    version_dir = model_dir / str(int(version))
    target = version_dir / "model.onnx"
    check_model_target(repo_dir, name, version)
    version_dir.mkdir(parents=True, exist_ok=True)
    large = model.ByteSize() > ONNX_PROTOBUF_LIMIT
    onnx.save_model(model, str(target), save_as_external_data=large,
                    location="model.onnx.data" if large else None)
    # replaces what was there, never writes through it
    write_atomic(model_dir / "config.pbtxt", config, what="Triton model config")
    logger.info("wrote Triton model %s (version %d) to %s", name, version, model_dir)
    return model_dir


def check_model_target(repo_dir: str | Path, name: str, version: int, *, overwrite: bool = True) -> None:
    """UsageError when writing ``repo_dir/name`` would go through a link or onto something not a file, or (without
    ``overwrite``) would replace a model already deployed there (a non-empty ``repo_dir/name``).

    An existing repository is not ours: a link planted where gapcheck writes (``config.pbtxt`` pointing
    at a user's file, a version directory pointing elsewhere) would send the write out of the repository.
    """
    model_dir = Path(repo_dir) / name
    version_dir = model_dir / str(int(version))
    if not overwrite and not model_dir.is_symlink() and model_dir.is_dir() and any(model_dir.iterdir()):
        raise UsageError(f"model repository: {model_dir} already holds a model; refusing to replace its "
                         f"config.pbtxt and version {int(version)}", hint="choose another --name, or pass --overwrite")
    if model_dir.exists() and not model_dir.is_dir():
        raise UsageError(f"model repository: {model_dir} exists and is not a directory")
    for path in (model_dir, version_dir, version_dir / "model.onnx", version_dir / "model.onnx.data",
                 model_dir / "config.pbtxt"):
        if path.is_symlink():
            raise UsageError(f"model repository: {path} is a symbolic link; refusing to write through it")
        if path.exists() and path.suffix in (".pbtxt", ".onnx", ".data") and not path.is_file():
            raise UsageError(f"model repository: {path} exists and is not a regular file")


def check_repository_dir(repo_dir: str | Path) -> Path:
    """A repository path that is (or can become) a writable directory, not a symbolic link (the write would land
    wherever the link points); UsageError before any work otherwise."""
    path = Path(repo_dir)
    if path.is_symlink():
        raise UsageError(f"model repository {path} is a symbolic link; give the folder's real path")
    check_folder(path, f"model repository {path}")
    return path


def parse_model_config(text: str, name: str | None = None) -> Any:
    """``text`` parsed by Triton's ``ModelConfig`` protobuf (tritonclient ships it); UsageError with the parser's words."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    try:
        config = text_format.Parse(text, model_config_pb2.ModelConfig())
    except text_format.ParseError as exc:
        raise UsageError(f"the model config does not parse as Triton's ModelConfig: {exc}") from None
    if name is not None and config.name != name:
        raise UsageError(f"the model config names the model {config.name!r}, not {name!r}")
    return config

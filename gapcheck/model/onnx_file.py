"""Read and write ONNX files without torch: the hostile-input loader every command shares.

Kept apart from :mod:`gapcheck.model.export` (which imports torch) so that commands that only read an ONNX
file — ``triton-audit``, ``nightly``'s audit, ``export --triton-repo`` with ``--onnx`` — start in a fraction
of the time.
"""
from __future__ import annotations

from pathlib import Path

import onnx

from gapcheck.atomic import write_atomic
from gapcheck.errors import InputError, condense_error

# condense_error is re-exported for its older importers (it lives in gapcheck.errors)
__all__ = ["MAX_ONNX_BYTES", "ONNX_PROTOBUF_LIMIT", "computes_in_fp16", "condense_error", "load_onnx", "save_onnx",
           "with_fp32_inputs"]

# Refuse ONNX files larger than this before parsing them (protobuf parsing holds the whole file in memory).
MAX_ONNX_BYTES = 4 * 1024**3
#: protobuf refuses messages of 2 GiB; stay clear of it: larger models keep their weights in external data
ONNX_PROTOBUF_LIMIT = 2**31 - 2**24


def load_onnx(path: str | Path) -> onnx.ModelProto:
    """Load and check an ONNX file, treating it as hostile: size-bounded, parse and checker errors condensed."""
    target = Path(path)
    if not target.is_file():
        raise InputError(f"ONNX file not found: {target}")
    size = target.stat().st_size
    if size == 0:
        raise InputError(f"ONNX file is empty: {target}")
    if size > MAX_ONNX_BYTES:
        raise InputError(f"ONNX file is {size / 1024**3:.1f} GiB, over the {MAX_ONNX_BYTES / 1024**3:.0f} GiB limit: {target}")
    try:
        model = onnx.load(str(target))
        _check(model)
    except Exception as exc:  # noqa: BLE001 - protobuf DecodeError, checker ValidationError, external data errors
        raise InputError(f"not a valid ONNX model: {target} ({condense_error(exc, 200)})") from exc
    if not model.graph.node:
        raise InputError(f"ONNX model has no nodes: {target}")
    return model


def _check(model: onnx.ModelProto) -> None:
    """ONNX's checker, except that ops ONNX Runtime registers in the ONNX domain itself pass.

    ONNX Runtime's transformer optimizer writes ``SimplifiedLayerNormalization`` (T5, LLaMA RMSNorm) in the default
    domain, where ONNX has no such op: the checker refuses a file ONNX Runtime runs. Those nodes are moved to a
    private domain for one more checker pass (custom domains are not checked), so the rest of the graph is still
    checked in full; a failure with no such node, or one left after the move, is the checker's verdict.
    """
    try:
        onnx.checker.check_model(model)
    except Exception:
        nodes = _onnxruntime_only_nodes(model)
        if not nodes:
            raise
        _check_with_private_domain(model, nodes)


#: where the ONNX-domain ops ONNX Runtime adds are moved for the checker's second pass (never written to a file)
_PRIVATE_DOMAIN = "gapcheck.onnxruntime_onnx_domain"


def _onnxruntime_only_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Main-graph nodes of the ONNX domain whose op ONNX has not at the model's opset, but ONNX Runtime has."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    unknown = [n for n in model.graph.node if n.domain in ("", "ai.onnx")
               and not onnx.defs.has(n.op_type, opset, n.domain or "")]
    if not unknown:
        return []
    known = _onnxruntime_onnx_domain_ops(opset)
    return [n for n in unknown if n.op_type in known]


def _onnxruntime_onnx_domain_ops(opset: int) -> frozenset[str]:
    """The ops ONNX Runtime registers in the ONNX domain at ``opset`` (its own, e.g. SimplifiedLayerNormalization)."""
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as ort_state  # only on a checker failure

        schemas = ort_state.get_all_operator_schema()
    except Exception:  # noqa: BLE001 - no ONNX Runtime, or a build without its schemas: the checker's verdict stands
        return frozenset()
    return frozenset(s.name for s in schemas if s.domain in ("", "ai.onnx") and s.since_version <= opset)


def _check_with_private_domain(model: onnx.ModelProto, nodes: list[onnx.NodeProto]) -> None:
    """Run the checker with ``nodes`` in a private domain, then put the model back as it was (no copy of the weights)."""
    domains = [n.domain for n in nodes]
    model.opset_import.append(onnx.helper.make_opsetid(_PRIVATE_DOMAIN, 1))
    try:
        for node in nodes:
            node.domain = _PRIVATE_DOMAIN
        onnx.checker.check_model(model)
    finally:
        for node, domain in zip(nodes, domains, strict=True):
            node.domain = domain
        del model.opset_import[-1]


def computes_in_fp16(model: onnx.ModelProto) -> bool:
    """Whether the graph computes in FP16: most of its floating-point weight elements (initializers and Constant
    nodes) are FP16, or it has no floating-point weights and casts to FP16. What
    ``onnxconverter_common.float16.convert_float_to_float16(model, keep_io_types=True)`` writes: FP32 inputs and
    outputs around an FP16 body, which the graph's input types alone do not show."""
    fp16 = fp32 = 0
    tensors = list(model.graph.initializer) + [a.t for n in model.graph.node if n.op_type == "Constant"
                                               for a in n.attribute if a.name == "value"]
    for tensor in tensors:
        elements = 1
        for dim in tensor.dims:
            elements *= dim
        if tensor.data_type == onnx.TensorProto.FLOAT16:
            fp16 += elements
        elif tensor.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16):
            fp32 += elements
    if fp16 or fp32:
        return fp16 > fp32
    return any(n.op_type == "Cast" and a.name == "to" and a.i == onnx.TensorProto.FLOAT16
               for n in model.graph.node for a in n.attribute)


def with_fp32_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each FP16 graph input taking FP32 and cast to FP16 inside: the torch model's samples are FP32,
    and an FP16 deployment's client casts its FP32 data the same way. A copy when there is any (``model`` itself,
    unchanged, otherwise): the file as written stays what a deployment audit compares with."""
    initializers = {t.name for t in model.graph.initializer}
    fp16 = [v.name for v in model.graph.input
            if v.name not in initializers and v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16]
    if not fp16:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    model, casts = copy, []
    for value in model.graph.input:
        if value.name not in fp16:
            continue
        inner = f"{value.name}__gapcheck_fp16"
        for node in model.graph.node:
            node.input[:] = [inner if name == value.name else name for name in node.input]
        casts.append(onnx.helper.make_node("Cast", [value.name], [inner], to=onnx.TensorProto.FLOAT16,
                                           name=f"{value.name}__gapcheck_cast"))
        value.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    for cast in reversed(casts):
        model.graph.node.insert(0, cast)
    return model


def save_onnx(model: onnx.ModelProto, path: str | Path) -> Path:
    """Write ``model`` to ``path`` atomically (:func:`gapcheck.atomic.write_atomic`); a model over protobuf's
    2 GiB cap is written by ONNX itself with its weights in ``<name>.data`` beside it."""
    target = Path(path)
    if model.ByteSize() <= ONNX_PROTOBUF_LIMIT:
        return write_atomic(target, model.SerializeToString(), what="ONNX output")
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(target), save_as_external_data=True, location=f"{target.name}.data")
    return target

"""Export a torch module to ONNX (dynamo exporter first, TorchScript on request or as a fallback), or load one.

The exporter that actually ran is always reported, because the two differ in
what they bake in: the TorchScript tracer freezes Python control flow and
integer shapes, the dynamo exporter refuses them.
"""
from __future__ import annotations

import dataclasses
import io
import logging
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass

import numpy as np
import onnx
import torch

from gapcheck.errors import ExportError, UsageError, condense_error

# Re-exported: callers have imported these from here; they live in the torch-free module now.
from gapcheck.model.onnx_file import MAX_ONNX_BYTES, load_onnx, save_onnx  # noqa: F401
from gapcheck.model.outputs import named_tensor_leaves
from gapcheck.tensors import contiguous

log = logging.getLogger(__name__)

EXPORTERS = ("dynamo", "torchscript")


@dataclass(frozen=True)
class ExportResult:
    model: onnx.ModelProto
    exporter: str  # "dynamo", "torchscript" or "file"
    fallback_reason: str | None  # why dynamo was abandoned for TorchScript, if it was
    seconds: float
    warnings: tuple[str, ...] = ()  # exporter warnings worth showing (e.g. TracerWarning: branch baked in)
    batch_baked: bool = False  # a dynamic batch axis was asked for and the exporter fixed it anyway
    cached: bool = False  # taken from the export cache (seconds is then 0)


def _batched_for_export(sample: dict[str, np.ndarray]) -> tuple[torch.Tensor, ...]:
    # torch.export specializes a dimension of size 1, so a dynamic batch axis needs an example batch >= 2.
    tensors = []
    for array in sample.values():
        tensor = torch.from_numpy(contiguous(array))
        if tensor.dim() > 0 and tensor.shape[0] == 1:
            tensor = torch.cat([tensor, tensor], dim=0)
        tensors.append(tensor)
    return tuple(tensors)


def _export_dynamo(module: torch.nn.Module, sample: dict[str, np.ndarray], opset: int | None, dynamic_batch: bool,
                   sequence: tuple[str, ...] = ()):
    names = list(sample)
    args = _batched_for_export(sample) if dynamic_batch else tuple(torch.from_numpy(a) for a in sample.values())
    dynamic_shapes = None
    if dynamic_batch or sequence:
        batch, length = torch.export.Dim("batch"), torch.export.Dim("sequence")
        dynamic_shapes = tuple(
            {**({0: batch} if dynamic_batch else {}), **({1: length} if name in sequence and a.dim() > 1 else {})}
            if a.dim() > 0 else {} for name, a in zip(names, args, strict=True))  # {} (not None): a scalar input
    quiet = io.StringIO()  # the exporter prints progress and, on failure, whole graphs
    with redirect_stdout(quiet), redirect_stderr(quiet), warnings.catch_warnings(), _quiet_torch_logging():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module, args, dynamo=True, input_names=names, dynamic_shapes=dynamic_shapes, opset_version=opset,
            verbose=False,
        )
    if program is None:  # torch returns None only when writing to a file, which this call does not ask for
        raise ExportError("the dynamo exporter returned no program")
    return program.model_proto, ()


@contextmanager
def _silence_native_output():
    """The TorchScript exporter's C++ side prints whole IR graphs to file descriptors 1/2 on failure."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(fd) for fd in (1, 2)]
    with tempfile.TemporaryFile() as sink:
        for fd in (1, 2):
            os.dup2(sink.fileno(), fd)
        try:
            yield
        finally:
            for fd, copy in zip((1, 2), saved, strict=True):
                os.dup2(copy, fd)
                os.close(copy)


@contextmanager
def _quiet_torch_logging():
    """Silence torch's exporter loggers (and their own formatting failures) for the duration of an export."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._dynamo", "torch.fx", "onnxscript")]
    levels = [lg.level for lg in loggers]
    raise_exceptions = logging.raiseExceptions
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        logging.raiseExceptions = False
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
        logging.raiseExceptions = raise_exceptions


def static_batch_inputs(model: onnx.ModelProto) -> dict[str, int]:
    """Graph inputs whose first axis is a fixed number (a batch size baked into the graph)."""
    initializers = {i.name for i in model.graph.initializer}
    baked = {}
    for value_info in model.graph.input:
        dims = value_info.type.tensor_type.shape.dim
        if value_info.name not in initializers and dims and dims[0].HasField("dim_value"):
            baked[value_info.name] = dims[0].dim_value
    return baked


def _export_torchscript(module: torch.nn.Module, sample: dict[str, np.ndarray], opset: int | None, dynamic_batch: bool,
                        sequence: tuple[str, ...] = ()):
    names = list(sample)
    args = tuple(torch.from_numpy(contiguous(a)) for a in sample.values())
    buffer = io.BytesIO()
    with warnings.catch_warnings(record=True) as caught, redirect_stderr(io.StringIO()), _silence_native_output():
        warnings.simplefilter("always")
        # Output names are unknown before tracing; mark every output's axis 0 dynamic by position.
        with torch.no_grad():
            leaves = [leaf for _, leaf in named_tensor_leaves(module(*args))]
        output_names = [f"output_{i}" for i in range(len(leaves))]
        batched = [n for n, a in zip(names, args, strict=True) if a.dim() > 0] + output_names  # a scalar input has no batch axis
        dynamic_axes: dict[str, dict[int, str]] | None = {n: {0: "batch"} for n in batched} if dynamic_batch else None
        if sequence:
            dynamic_axes = _with_sequence_axes(dynamic_axes or {}, dict(zip(names, args, strict=True)),
                                               dict(zip(output_names, leaves, strict=True)), sequence)
        # f= takes a BytesIO (documented); the stubs say a path
        torch.onnx.export(
            module, args, buffer,  # type: ignore[arg-type]
            dynamo=False, input_names=names, output_names=output_names,
            dynamic_axes=dynamic_axes, opset_version=opset or 17,
        )
    notes = tuple(
        sorted({f"{w.category.__name__}: {str(w.message).splitlines()[0]}" for w in caught if "Tracer" in w.category.__name__})
    )
    return onnx.load_from_string(buffer.getvalue()), notes


def _with_sequence_axes(axes: dict[str, dict[int, str]], inputs: dict[str, torch.Tensor],
                        outputs: dict[str, torch.Tensor], sequence: tuple[str, ...]) -> dict[str, dict[int, str]]:
    """``axes`` plus axis 1 as "sequence" on the sequence inputs and on every output with a position axis of
    their length (the TorchScript exporter declares output shapes from names, not by tracing them)."""
    named = {n: a for n, a in inputs.items() if n in sequence and a.dim() > 1}
    if not named:
        return axes
    length = next(iter(named.values())).shape[1]
    per_position = [*named, *(n for n, leaf in outputs.items() if leaf.dim() > 1 and leaf.shape[1] == length)]
    return {**axes, **{n: {**axes.get(n, {}), 1: "sequence"} for n in per_position}}


def _scripted_if_holding_scripts(module: torch.nn.Module) -> torch.nn.Module:
    """A Python model holding ScriptModules, scripted whole when that works.

    Neither exporter can trace into a ScriptModule held by a Python model (torch.export refuses it,
    the tracer says it "is not part of the active trace"); the TorchScript exporter does read a
    model that is scripted as a whole. The model itself is not changed.
    """
    if isinstance(module, torch.jit.ScriptModule) or not any(
            isinstance(m, torch.jit.ScriptModule) for m in module.modules()):
        return module
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.jit.script(module)
    except Exception as exc:  # noqa: BLE001 - Python code TorchScript cannot compile: trace as it is
        log.info("could not script the model holding ScriptModules: %s", condense_error(exc))
        return module


def export_onnx(
    module: torch.nn.Module,
    sample: dict[str, np.ndarray],
    *,
    exporter: str = "dynamo",
    opset: int | None = None,
    dynamic_batch: bool = True,
    fallback: bool = True,
    output_names: Sequence[str] | None = None,
    sequence_inputs: Sequence[str] = (),
) -> ExportResult:
    """Export ``module`` fed ``sample`` (inputs in forward's positional order) to an in-memory ONNX model.

    With ``exporter="dynamo"`` and ``fallback=True``, a dynamo failure falls back to
    the TorchScript exporter and the reason is kept in ``fallback_reason``. ``output_names``
    (the model's own key paths, see ``named_tensor_leaves``) name the graph outputs when their
    number matches. ``sequence_inputs`` also get a dynamic axis 1 (one shared sequence length), so padded
    variants of other lengths can run (``export-diff --pad-check``); when the exporter refuses it, the export is
    made again with that axis fixed and a note says why.
    """
    if exporter not in EXPORTERS:
        raise UsageError(f"unknown exporter {exporter!r}; choose one of {', '.join(EXPORTERS)}")
    if sequence_inputs:
        try:
            result = _export(module, sample, exporter, opset, dynamic_batch, fallback=False,
                             sequence=tuple(sequence_inputs))
        except ExportError as exc:
            result = _export(module, sample, exporter, opset, dynamic_batch, fallback)
            result = dataclasses.replace(result, warnings=(*result.warnings, "the sequence axis of "
                                         f"{', '.join(sequence_inputs)} stays fixed: {exc.message[:300]}"))
    else:
        result = _export(module, sample, exporter, opset, dynamic_batch, fallback)
    if output_names:
        rename_outputs(result.model, output_names)
    return result


def rename_outputs(model: onnx.ModelProto, names: Sequence[str]) -> bool:
    """Name the graph's outputs as the model names them (``logits``, ``past_key_values.0.key``), in place.

    Only when the counts agree and no output is also a graph input (a pass-through); returns whether it renamed.
    """
    graph = model.graph
    if len(graph.output) != len(names) or len(set(names)) != len(names):
        return False
    taken = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    old = [o.name for o in graph.output]
    if taken & set(old) or taken & set(names):
        return False
    mapping = dict(zip(old, names, strict=True))
    others = {v for node in graph.node for v in list(node.input) + list(node.output)} - set(old)
    if others & set(names):
        return False  # a new name would collide with an internal value
    for node in graph.node:
        node.output[:] = [mapping.get(v, v) for v in node.output]
        node.input[:] = [mapping.get(v, v) for v in node.input]
    for output in graph.output:
        output.name = mapping[output.name]
    for info in graph.value_info:
        if info.name in mapping:
            info.name = mapping[info.name]
    return True


def _export(module, sample, exporter: str, opset: int | None, dynamic_batch: bool, fallback: bool,
            sequence: tuple[str, ...] = ()) -> ExportResult:
    start = time.perf_counter()
    fallback_reason = None
    if exporter == "dynamo":
        try:
            model, notes = _export_dynamo(module, sample, opset, dynamic_batch, sequence)
            baked = static_batch_inputs(model) if dynamic_batch else {}
            if baked:
                # The exporter specialized the batch axis (e.g. a Python loop over the batch): export again at the
                # sample's own batch size so the comparison can run, and say that a batch size is baked in.
                model, _ = _export_dynamo(module, sample, opset, dynamic_batch=False)
                notes += (f"the exporter specialized the batch axis of {', '.join(baked)} instead of keeping it dynamic",)
            return _check_opset(ExportResult(model, "dynamo", None, time.perf_counter() - start, notes, bool(baked)), opset)
        except Exception as exc:  # noqa: BLE001 - any exporter failure is condensed and reported
            fallback_reason = condense_error(exc)
            if not fallback:
                raise ExportError(f"the dynamo exporter failed: {fallback_reason}") from exc
            log.info("dynamo exporter failed, falling back to TorchScript: %s", fallback_reason)
    try:
        model, notes = _export_torchscript(_scripted_if_holding_scripts(module), sample, opset, dynamic_batch, sequence)
    except Exception as exc:  # noqa: BLE001
        prefix = f"the dynamo exporter failed ({fallback_reason}) and " if fallback_reason else ""
        raise ExportError(f"{prefix}the TorchScript exporter failed: {condense_error(exc)}") from exc
    baked_in = bool(static_batch_inputs(model)) if dynamic_batch else False
    return _check_opset(ExportResult(model, "torchscript", fallback_reason, time.perf_counter() - start, notes, baked_in),
                        opset)


def default_opset(model: onnx.ModelProto) -> int | None:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def _check_opset(result: ExportResult, opset: int | None) -> ExportResult:
    """The exporters may fall back to their own opset when conversion fails: an explicit request must hold."""
    produced = default_opset(result.model)
    if opset is not None and produced != opset:
        raise ExportError(
            f"asked for opset {opset}, the {result.exporter} exporter produced opset {produced} "
            "(it could not convert the graph to the requested version)"
        )
    return result

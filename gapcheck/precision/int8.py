"""INT8 with ONNX Runtime: static quantization (QDQ, calibrated MinMax/Entropy/Percentile) or dynamic quantization
(weights only, for Linear-heavy text models); each module's sensitivity; the fewest modules to exclude.

Sensitivity is the *local* measure, from one run of the FP32 and the fully quantized model with every value marked:
a module's own ops (innermost scope) are re-run in FP32 on the values the quantized model fed them, and the relative
L2 error (``||q - f|| / ||f||``, worst over the samples) of the quantized output against that is what quantizing the
module adds, whatever it inherits; every module's FP32 re-run is one copy of its ops in one replay model
(:class:`Replay`), so the pass is two ONNX Runtime sessions whatever the number of modules. (The issue's other
measure, the output error with only that module quantized, costs one quantization per module.) The fix excludes
the most sensitive modules' own nodes (``nodes_to_exclude``): 1, 2, 4, ... until the target holds, then the
smallest count between (a binary search, assuming more exclusions never hurt), each candidate quantized and verified
on the verification samples. The calibration ranges are computed once and reused (ONNX Runtime's calibration cache).
"""
from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from gapcheck.errors import BackendError, UsageError, condense_error
from gapcheck.precision.fp16 import ModuleRow
from gapcheck.precision.graph import Graph, ValueRunner, value_map, value_names
from gapcheck.precision.targets import Scores, Target

log = logging.getLogger(__name__)
METHODS = ("minmax", "entropy", "percentile")
MODES = ("static", "dynamic")
SENSITIVITY = ("local", "alone")  # the measure the ranking (and the fix's order) sorts by


@dataclass(frozen=True)
class Attempt:
    excluded_modules: int
    excluded_nodes: int
    scores: Scores
    met: bool


@dataclass(frozen=True)
class Int8Fix:
    excluded: tuple[ModuleRow, ...]  # the modules whose own nodes stay FP32
    nodes: tuple[str, ...]
    scores: Scores
    met: bool
    attempts: tuple[Attempt, ...]
    model: onnx.ModelProto


def choose_mode(model: onnx.ModelProto) -> str:
    """dynamic for Linear-heavy text models (integer inputs, or no convolution), static otherwise."""
    integer_inputs = any(i.type.tensor_type.elem_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)
                         for i in model.graph.input)
    ops = {n.op_type for n in model.graph.node}
    return "dynamic" if integer_inputs or not ops & {"Conv", "ConvTranspose"} else "static"


class Quantizer:
    """Quantizes one FP32 model again and again with other exclusions; the ranges are calibrated once."""

    def __init__(self, model: onnx.ModelProto, mode: str, calibration: Sequence[dict[str, np.ndarray]],
                 method: str = "minmax") -> None:
        if mode not in MODES:
            raise UsageError(f"INT8 mode must be one of {', '.join(MODES)}, not {mode!r}", parameter="int8_mode")
        if method not in METHODS:
            raise UsageError(f"calibration method must be one of {', '.join(METHODS)}, not {method!r}",
                             parameter="calibration_method")
        self.mode, self.method, self.calibration = mode, method, list(calibration)
        self._dir = tempfile.TemporaryDirectory(prefix="gapcheck-int8-")
        self.source = Path(self._dir.name) / "model.fp32.onnx"
        onnx.save_model(model, str(self.source))
        self.count = 0

    def close(self) -> None:
        self._dir.cleanup()

    def quantize(self, exclude: Sequence[str] = ()) -> onnx.ModelProto:
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, quantize_dynamic, quantize_static

        self.count += 1
        out = Path(self._dir.name) / f"model.int8.{self.count}.onnx"
        root = logging.getLogger()
        root.addFilter(_no_preprocess_advice)
        try:
            if self.mode == "dynamic":
                quantize_dynamic(self.source, out, nodes_to_exclude=list(exclude) or None)
            else:
                method = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
                          "percentile": CalibrationMethod.Percentile}[self.method]
                quantize_static(self.source, out, _Reader(self.calibration), quant_format=QuantFormat.QDQ,
                                nodes_to_exclude=list(exclude) or None, calibrate_method=method,
                                calibration_cache_path=Path(self._dir.name) / f"ranges.{self.method}.json")
        except Exception as exc:  # noqa: BLE001 - the quantizer raises whatever its passes raise
            raise BackendError(f"ONNX Runtime cannot quantize this model ({self.mode}): {condense_error(exc)}") from exc
        finally:
            root.removeFilter(_no_preprocess_advice)
        return onnx.load_model(str(out))


def _no_preprocess_advice(record: logging.LogRecord) -> bool:
    """ORT's quantizer logs 'Please consider (to run) pre-processing before quantization' on the root logger twice
    per call; gapcheck quantizes once per exclusion set tried, so a user saw it 14 times per run, about a step
    (shape inference, fusions) that changes the graph gapcheck maps to modules. Everything else passes."""
    return "pre-processing before quantization" not in record.getMessage()


class _Reader:
    """ONNX Runtime's CalibrationDataReader protocol over a list of feeds."""

    def __init__(self, samples: Sequence[dict[str, np.ndarray]]) -> None:
        self._samples = iter(list(samples))

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._samples, None)

    def __iter__(self):  # noqa: ANN204 - the protocol ORT iterates
        return iter(lambda: self.get_next(), None)


def _relative(q: np.ndarray, f: np.ndarray) -> float:
    if q.shape != f.shape:
        return float("inf")
    f64, q64 = f.astype(np.float64).ravel(), q.astype(np.float64).ravel()
    delta = q64 - f64
    # einsum, not np.linalg.norm: BLAS's dot took 16 ms per activation on a shared machine (60% of the pass)
    norm = float(np.sqrt(np.einsum("i,i->", f64, f64)))
    diff = float(np.sqrt(np.einsum("i,i->", delta, delta)))
    return diff / norm if norm > 0 else (0.0 if diff == 0 else float("inf"))


def after_qdq(quantized: onnx.ModelProto) -> dict[str, str]:
    """Value -> the dequantized copy its consumers read (QuantizeLinear -> DequantizeLinear). The value itself may be
    computed otherwise: the QDQ quantizer folds a ReLU into the quantization range and hands its input on instead."""
    dequantized = {n.input[0]: n.output[0] for n in quantized.graph.node if n.op_type == "DequantizeLinear"}
    return {n.input[0]: dequantized[n.output[0]] for n in quantized.graph.node
            if n.op_type == "QuantizeLinear" and n.output[0] in dequantized}


def value_errors(graph: Graph, quantized: onnx.ModelProto,
                 samples: Sequence[dict[str, np.ndarray]]) -> tuple[dict[str, float], dict[str, float]]:
    """(relative L2 error of every float value the quantized model still has, and of every module's own ops), worst
    over the samples. A module's own error: its quantized output against its FP32 ops fed the same (quantized)
    inputs — what quantizing it adds, whatever it inherits.

    Two sessions in all, whatever the number of modules: the quantized model with every value marked, and the
    :class:`Replay` model (the FP32 model plus a copy of each module's own ops, fed the quantized values), as
    ``qdq_loss_debug`` marks every value of one augmented model. A module whose ops cannot be copied (a subgraph
    attribute) is re-run alone (:func:`_own_error`), and so is every module if the replay model cannot be built."""
    renamed = {**value_map(graph.model, quantized, by_node=False), **after_qdq(quantized)}
    names = [n for n in value_names(graph.model) if n in renamed]
    q = ValueRunner(quantized, [renamed[n] for n in names])
    units = _units(graph, set(names))
    errors: dict[str, float] = {}
    local: dict[str, float] = {}
    replay: Replay | None = None
    sessions: dict[tuple, Any] = {}  # the per-module fallback: one subgraph session per module and input shapes
    not_float = _not_float(graph.model)
    for feeds in samples:
        got = q.run(feeds)
        # a quantized value the FP32 model has as a float (int8 codes under the old name) is not that value
        seen = {name: got[renamed[name]] for name in names if renamed[name] in got
                and (got[renamed[name]].dtype.kind == "f" or name in not_float)}
        if replay is None:
            replay = Replay.build(graph, names, units, seen)
        f, own = replay.run(feeds, seen)
        for name, value in seen.items():
            if name in f and f[name].dtype.kind == "f":
                errors[name] = max(errors.get(name, 0.0), _relative(value, f[name]))
        for owner, (handed, received) in units.items():
            fp32_own = own.get(owner)
            error = (_relative(seen[handed[0]], fp32_own) if fp32_own is not None and handed[0] in seen
                     else _own_error(graph, handed, received, seen, feeds, sessions) if owner in replay.alone else None)
            if error is not None:
                local[owner] = max(local.get(owner, 0.0), error)
    return errors, local


class Replay:
    """One FP32 session for every module's own error: the FP32 model (its values marked) plus, per module, a copy of
    the own ops that make its handed-on value, renamed (``gapcheck.replay<k>/<name>``) and fed from new graph inputs
    that take the values the quantized model computed. Values of other modules' Constant nodes and the graph inputs
    are read from the original graph; initializers are shared."""

    PREFIX = "gapcheck.replay"

    def __init__(self, runner: ValueRunner, outputs: dict[str, str], inputs: dict[str, dict[str, str]],
                 alone: set[str]) -> None:
        self.runner, self.outputs, self.inputs, self.alone = runner, outputs, inputs, alone

    @classmethod
    def build(cls, graph: Graph, names: list[str], units: dict[str, tuple[list[str], list[str]]],
              seen: dict[str, np.ndarray]) -> Replay:
        model = onnx.ModelProto()
        model.CopyFrom(graph.model)
        nodes = {n.name: n for n in graph.model.graph.node}
        constants = {v for n in graph.model.graph.node if n.op_type == "Constant" for v in n.output}
        direct = constants | set(graph.index.graph_inputs)
        outputs: dict[str, str] = {}
        inputs: dict[str, dict[str, str]] = {}
        alone: set[str] = set()
        for k, (owner, (handed, _)) in enumerate(units.items()):
            needed = _ancestors(handed[0], [nodes[n] for n in graph.owners()[owner]])
            if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in needed
                   for a in n.attribute):
                alone.add(owner)  # a subgraph reads outer names the copy would rename: re-run alone
                continue
            made = {v for n in needed for v in n.output if v}
            fed = [v for v in dict.fromkeys(v for n in needed for v in n.input) if v and v not in made
                   and v not in graph.index.initializers and v not in direct]
            if any(v not in seen for v in fed) or handed[0] not in seen:
                continue  # the quantized model has no such value: no own error (as a module re-run alone)
            prefix = f"{cls.PREFIX}{k}/"
            rename = {**{v: prefix + v for v in made}, **{v: prefix + "in/" + v for v in fed}}
            for node in needed:
                copy = model.graph.node.add()
                copy.CopyFrom(node)
                copy.name = prefix + node.name
                copy.input[:] = [rename.get(v, v) for v in node.input]
                copy.output[:] = [rename.get(v, v) if v else v for v in node.output]
            for v in fed:
                model.graph.input.append(onnx.helper.make_tensor_value_info(
                    rename[v], onnx.helper.np_dtype_to_tensor_dtype(seen[v].dtype), None))
            model.graph.output.append(onnx.helper.make_tensor_value_info(
                rename[handed[0]], onnx.helper.np_dtype_to_tensor_dtype(seen[handed[0]].dtype), None))
            outputs[owner], inputs[owner] = rename[handed[0]], {v: rename[v] for v in fed}
        try:
            runner = ValueRunner(model, names)
        except BackendError as exc:  # a copy ORT refuses: every module re-run alone, as before the replay model
            log.info("the replay model cannot be built (%s); modules re-run alone", condense_error(exc))
            return cls(ValueRunner(graph.model, names), {}, {}, set(units))
        return cls(runner, outputs, inputs, alone)

    def run(self, feeds: dict[str, np.ndarray],
            seen: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """(every FP32 value, each module's own FP32 output on the quantized inputs) for one sample."""
        extra = {name: np.ascontiguousarray(seen[value]) for fed in self.inputs.values() for value, name in fed.items()}
        values = self.runner.run({**feeds, **extra})
        return values, {owner: values[name] for owner, name in self.outputs.items() if name in values}


def _not_float(model: onnx.ModelProto) -> set[str]:
    """Values the FP32 model types as something other than a float (shapes, indices, masks), by shape inference."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - inference fails on some custom ops: then only float values are compared
        inferred = model
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}
    return {v.name for v in [*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input]
            if v.type.tensor_type.elem_type and v.type.tensor_type.elem_type not in floats}


def _ancestors(output: str, own: Sequence[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """The own nodes ``output`` depends on, in graph order."""
    wanted, keep = {output}, set()
    for i in range(len(own) - 1, -1, -1):
        if wanted & set(own[i].output):
            keep.add(i)
            wanted |= {v for v in own[i].input if v}
    return [own[i] for i in sorted(keep)]


def _units(graph: Graph, known: set[str]) -> dict[str, tuple[list[str], list[str]]]:
    """Owner module -> (float values its own ops hand on, values they receive), for modules with a marked output."""
    nodes = {n.name: n for n in graph.model.graph.node}
    outputs = set(graph.index.graph_outputs)
    units = {}
    for owner, own in graph.owners().items():
        own_set = set(own)
        produced = {v for n in own for v in nodes[n].output if v}
        handed = [v for v in produced if v in known and (v in outputs or set(graph.consumers_of(v)) - own_set)]
        received = list(dict.fromkeys(v for n in own for v in nodes[n].input
                                      if v and v not in produced and v not in graph.index.initializers))
        if handed:
            units[owner] = (handed[-1:], received)
    return units


def _own_error(graph: Graph, handed: list[str], received: list[str], seen: dict[str, np.ndarray],
               feeds: dict[str, np.ndarray], sessions: dict[tuple, Any]) -> float | None:
    from gapcheck.backends.onnxruntime import OnnxRuntimeBackend
    from gapcheck.export_diff.localize import extract_subgraph

    inputs = {}
    for name in received:
        value = seen.get(name, feeds.get(name))
        if value is None:
            if graph.producer_of(name) is not None and graph.model.graph.node[
                    graph.index.producer[name]].op_type == "Constant":
                continue
            return None
        inputs[name] = np.ascontiguousarray(value)
    output = handed[0]
    if output not in seen:
        return None
    key = (output, *((k, v.shape, str(v.dtype)) for k, v in inputs.items()))
    if key in sessions and sessions[key] is None:
        return None  # this module's subgraph cannot run alone
    try:
        if key not in sessions:
            sub = extract_subgraph(graph.model, graph.index, inputs, output)
            sessions[key] = (OnnxRuntimeBackend(sub, name="fp32-module"), {i.name for i in sub.graph.input})
        backend, used = sessions[key]
        result = backend.infer({k: v for k, v in inputs.items() if k in used})
    except (BackendError, KeyError):
        sessions[key] = None
        return None
    return _relative(seen[output], result[output])


def sensitivity(module, graph: Graph, errors: dict[str, float], local: dict[str, float],
                alone: dict[str, float] | None = None) -> list[ModuleRow]:
    """Each module's own ops (innermost scope), ranked by the error quantizing them adds (see value_errors), or,
    given ``alone`` (:func:`gapcheck.precision.alone.output_errors`), by the outputs' error with only them quantized."""
    classes = {p: type(m).__name__ for p, m in module.named_modules() if p}
    units = _units(graph, set(errors))
    owners = graph.owners()
    rows = []
    for owner, (handed, _) in units.items():
        own = local.get(owner, 0.0)
        by_output = None if alone is None else alone.get(owner)
        rows.append(ModuleRow(module=owner, class_name=classes.get(owner, "(ops)"), nodes=tuple(owners[owner]),
                              ratio=max(errors[v] for v in handed), local=own, alone=by_output,
                              sensitivity=own if alone is None else by_output or 0.0))
    rows.sort(key=lambda r: (-r.sensitivity, -(r.ratio or 0.0), r.module))
    return rows


def fix(rows: Sequence[ModuleRow], quantizer: Quantizer, check: Callable[[onnx.ModelProto], Scores],
        targets: Sequence[Target]) -> Int8Fix:
    """The fewest modules (most sensitive first) whose exclusion reaches the targets (see the module docstring)."""
    ranked = list(rows)  # most sensitive first; the last try excludes every module with a marked output
    attempts: dict[int, tuple[Attempt, onnx.ModelProto]] = {}

    def attempt(k: int) -> bool:
        if k not in attempts:
            nodes = tuple(dict.fromkeys(n for r in ranked[:k] for n in r.nodes))
            model = quantizer.quantize(nodes)
            scores = check(model)
            attempts[k] = (Attempt(k, len(nodes), scores, scores.meets(targets)), model)
        return attempts[k][0].met

    k = 1
    while k < len(ranked) and not attempt(k):
        k *= 2
    k = min(k, len(ranked))
    if not attempt(k):
        return _outcome(ranked, k, attempts)
    low = k // 2 + 1  # every count below k // 2 + 1 that was tried missed the target
    while low < k:
        middle = (low + k) // 2
        if attempt(middle):
            k = middle
        else:
            low = middle + 1
    return _outcome(ranked, k, attempts)


def _outcome(ranked: Sequence[ModuleRow], k: int, attempts: dict[int, tuple[Attempt, onnx.ModelProto]]) -> Int8Fix:
    chosen, model = attempts[k]
    nodes = tuple(dict.fromkeys(n for r in ranked[:k] for n in r.nodes))
    return Int8Fix(tuple(ranked[:k]), nodes, chosen.scores, chosen.met,
                   tuple(a for _, (a, _) in sorted(attempts.items())), model)

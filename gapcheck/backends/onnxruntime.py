"""ONNX Runtime backend: one session, named inputs in, named outputs (graph + marked intermediates) out.

When ORT refuses to create the session, the exit code says whose problem it is. The user's file (exit 2, an
:class:`~gapcheck.errors.InputError` with ORT's reason on one line): ORT's classes for bad models (InvalidGraph,
InvalidArgument, NotImplemented, InvalidProtobuf, NoModel, ModelLoaded), and its generic ``Fail`` when the message
is about the model (a node or attribute, the graph, the opset, an initializer or its external data, shape or type
inference). ORT or the machine (exit 3, a :class:`~gapcheck.errors.BackendError`, retried by a CronJob): any
message naming memory (``Exception during loading: std::bad_alloc``), threads, shared libraries, execution
providers or the disk, whatever its class; a ``Fail`` that says nothing about the model; any other error. ORT words
both kinds as ``Fail`` (status code 1), so the message is all there is to go by: an unknown ``Fail`` is not blamed on
the user's file. While running, the same rule holds for a node that fails to execute (see
:func:`_run_fault_is_models`); an error about the values fed is never the file's. ORT logs at fatal only: its error
log would write a hostile file's value names raw to stderr, and the reason travels in the exception anyway.
"""
from __future__ import annotations

import logging
import re
from typing import Sequence

import numpy as np
import onnx
import onnxruntime as ort

from gapcheck.backends.base import TensorSpec
from gapcheck.errors import BackendError, ExitCode, InputError
from gapcheck.model.mapping import with_extra_outputs
from gapcheck.model.onnx_file import condense_error
from gapcheck.tensors import fingerprint

log = logging.getLogger(__name__)

_ORT_TYPES = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int8)": "int8", "tensor(uint8)": "uint8",
    "tensor(bool)": "bool", "tensor(bfloat16)": "bfloat16",
}


#: ORT's error kinds at session creation that say the model is one it will not run (a custom-domain op, opset 99,
#: an invalid graph), not that ORT failed (pybind classes). ``Fail`` is not among them: ORT raises it for a bad file
#: and for its own troubles alike (see :func:`_rejects_model`).
_MODEL_REJECTED = frozenset({"InvalidGraph", "InvalidArgument", "NotImplemented", "InvalidProtobuf", "NoModel",
                             "ModelLoaded"})
#: words of a ``Fail`` about the user's file, as ORT words them: "Node () Op (Transpose) [TypeInferenceError] Invalid
#: attribute perm", "Opset 99 is under development", "External data path does not exist", "my.domain:Foo(-1) is not
#: a registered function/op", "Deserialize tensor b failed"
_ABOUT_THE_MODEL = re.compile(
    r"\b(models?|graphs?|nodes?|ops?|operators?|opsets?|protobuf|initializers?|attributes?|tensors?|schemas?|"
    r"domains?|external data|\w*InferenceError|shapes?|inputs?|outputs?)\b", re.IGNORECASE)
#: an environment or runtime trouble, whatever the class and the rest of the message say: memory ("Exception during
#: loading: std::bad_alloc"), threads, shared libraries and execution providers, the disk
_ENVIRONMENT = re.compile(
    r"bad_alloc|out of memory|failed to allocate|cannot allocate|allocation failed|system_error|pthread|"
    r"thread ?pool|failed to create thread|resource temporarily unavailable|dlopen|LoadLibrary|shared object|"
    r"\.so\b|\.dll\b|execution provider|provider bridge|\bCUDA|cuDNN|cuBLAS|TensorRT|no space left|"
    r"too many open files", re.IGNORECASE)
#: a C++ source location and signature ORT puts before its reason: `/src/x.h:46 void ns::f(const T&, int) Reason`
_CXX_PREFIX = re.compile(r"^/\S+:\d+ .*?\)(?: const)? (?=\S)")
#: the same inside a run-time message: "Status Message: /src/reshape_helper.h:91 ns::f(const T&, bool) reason"
_CXX_INNER = re.compile(r"(?<=Status Message: )/\S+:\d+ .*?\)(?: const)? (?=\S)")
_ORT_PREFIX = re.compile(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ")


def _rejects_model(exc: BaseException, model: onnx.ModelProto | None = None) -> bool:
    """Whether ORT's error at session creation is about the user's file (exit 2) rather than ORT or the machine
    (exit 3). From what ORT says: a message naming an environment trouble (memory, threads, libraries, providers,
    disk) is never the file's; the classes ORT keeps for bad models (:data:`_MODEL_REJECTED`) are; its generic
    ``Fail`` is the file's only when the message is about the model (node, attribute, graph, opset, initializer,
    external data, shape or type inference); any other ``Fail``, and every other error, is a backend failure.
    The names ``model`` holds are taken out before the environment is looked for: a node ``/backbone/cuda_ops/T``
    with a bad attribute is still the file's."""
    name, message = type(exc).__name__, str(exc)
    if not type(exc).__module__.startswith("onnxruntime") or _ENVIRONMENT.search(_without_names(message, model)):
        return False
    return name in _MODEL_REJECTED or (name == "Fail" and _ABOUT_THE_MODEL.search(_ORT_PREFIX.sub("", message)) is not None)


#: a run-time error about the values fed: ORT checks feeds against the declared inputs before any node runs
_ABOUT_THE_FEEDS = re.compile(r"input data type|invalid dimensions for input|invalid rank for input|"
                              r"invalid feed input name|invalid input name|input with name", re.IGNORECASE)
#: ORT's words for a node that failed while executing ("Non-zero status code returned while running Conv node")
_NODE_FAILED = re.compile(r"while running \S+ node", re.IGNORECASE)


#: a node's failure that names its own attributes or weights, not the values fed ("kernel_shape is not compatible
#: with W shape")
_ABOUT_ATTRIBUTES = re.compile(r"\battributes?\b|kernel_shape|\bW shape|\bweights?\b|\bpads\b|\bstrides\b|"
                               r"dilations|\bperm\b|\bgroup\b", re.IGNORECASE)


def _run_fault_is_models(exc: BaseException, model: onnx.ModelProto | None, all_static: bool) -> bool:
    """Whether ORT's error while RUNNING is about the user's file (exit 2), by the same rule as at creation plus one
    about the feeds: only a node that failed to execute (Fail/InvalidArgument/NotImplemented, "while running Conv
    node"), nothing in the message about memory, threads, libraries or providers, and never an error about the feeds
    themselves (their type, rank, dimensions, names: what gapcheck built, exit 3). As the feeds can choose a
    dynamic dimension, a node failure is the file's only when every input is fully static (the feeds are exactly
    what the file declares) or the message is about the node's attributes or weights (a Conv whose kernel_shape
    contradicts its weights); a Reshape that fails on a dynamic dimension gapcheck chose stays exit 3."""
    message = str(exc)
    if not type(exc).__module__.startswith("onnxruntime") or _ABOUT_THE_FEEDS.search(message):
        return False
    unnamed = _without_names(message, model)  # a node named /weights/cuda is neither an attribute nor CUDA
    if _ENVIRONMENT.search(unnamed):
        return False
    if type(exc).__name__ not in {"Fail", "InvalidArgument", "NotImplemented"} or not _NODE_FAILED.search(message):
        return False
    return all_static or _ABOUT_ATTRIBUTES.search(unnamed) is not None


def _without_names(message: str, model: onnx.ModelProto | None) -> str:
    """``message`` with every name ``model`` gives (nodes, op types, domains, values, external files) and every quoted
    path (``External data path does not exist: "/home/u/cuda-work/w.bin"``) replaced."""
    message = re.sub(r'"[^"]*"', '"<path>"', message)
    if model is None:
        return message
    graph = model.graph
    names = {graph.name, *(op.domain for op in model.opset_import)}
    for node in graph.node:
        names.update((node.name, node.op_type, node.domain, *node.input, *node.output))
    for tensor in graph.initializer:
        names.update((tensor.name, *(entry.value for entry in tensor.external_data)))
    names.update(value.name for value in (*graph.input, *graph.output, *graph.value_info))
    for known in sorted((n for n in names if len(n) >= 3), key=len, reverse=True):
        message = message.replace(known, "<name>")
    return message


def _rejected(model: onnx.ModelProto, options: ort.SessionOptions, providers: Sequence[str]) -> bool:
    """Whether ORT refuses ``model`` itself (only asked when it refused the model with intermediates marked)."""
    try:
        ort.InferenceSession(model.SerializeToString(), options, providers=list(providers))
    except Exception as exc:  # noqa: BLE001
        return _rejects_model(exc, model)
    return False


def _first_line(exc: BaseException, limit: int = 300) -> str:
    """ORT's reason on one line: no error-code prefix, no C++ signature, no further lines."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = _CXX_PREFIX.sub("", _ORT_PREFIX.sub("", lines[0] if lines else type(exc).__name__))
    text = _CXX_INNER.sub("", text)
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_outputs(model: onnx.ModelProto) -> None:
    """A graph with no outputs, or one output listed twice, is not a model to compare (ORT loads both and fails
    later, or returns one value twice): an input error before any session."""
    names = [o.name for o in model.graph.output]
    if not names:
        raise InputError("the ONNX model has no outputs")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InputError(f"the ONNX model lists output {twice[0]!r} more than once")


class ModelRunError(BackendError):
    """A node of the model could not execute (its attributes contradict its weights): the file's fault, exit 2 at
    the CLI. A BackendError still, so that a caller running a graph gapcheck built (a cut, a batch check) keeps the
    fallback it has for any run failure: only where it reaches the boundary is it blamed on the user's file."""

    exit_code = ExitCode.USAGE


class OnnxRuntimeBackend:
    """Runs an ONNX model in ONNX Runtime; ``extra_outputs`` are intermediate values marked as graph outputs."""

    def __init__(
        self,
        model: onnx.ModelProto,
        *,
        extra_outputs: Sequence[str] = (),
        name: str = "onnxruntime",
        providers: Sequence[str] = ("CPUExecutionProvider",),
        threads: int | None = None,
    ) -> None:
        self.name = name
        self.last_input_fingerprints: dict[str, str] = {}  # SHA256 of what the last infer() fed the session
        marked = with_extra_outputs(model, list(extra_outputs)) if extra_outputs else model
        self._model = marked  # its names are taken out of a run-time error before the environment is looked for
        options = ort.SessionOptions()
        # fatal only: ORT's own error log writes a model's value names raw to stderr (ESC/BEL from a hostile file);
        # the reason travels in the exception, which is printed through the safe line
        options.log_severity_level = 4
        if threads:
            options.intra_op_num_threads = threads
        _check_outputs(model)
        try:
            self._session = ort.InferenceSession(marked.SerializeToString(), options, providers=list(providers))
        except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types
            if _rejects_model(exc, marked) and (marked is model or _rejected(model, options, providers)):
                # the model itself (not our marking of values) is one ORT refuses: an input error, exit 2
                raise InputError(f"ONNX Runtime cannot load the model: {_first_line(exc)}") from None
            raise BackendError(f"ONNX Runtime could not load the model: {condense_error(exc)}") from exc

    @staticmethod
    def _specs(args) -> list[TensorSpec]:
        return [TensorSpec(a.name, _ORT_TYPES.get(a.type, a.type), tuple(a.shape)) for a in args]

    def input_specs(self) -> list[TensorSpec]:
        return self._specs(self._session.get_inputs())

    def output_specs(self) -> list[TensorSpec]:
        return self._specs(self._session.get_outputs())

    def infer(self, feeds: dict[str, np.ndarray], output_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        names = list(output_names) if output_names is not None else [o.name for o in self._session.get_outputs()]
        expected = {i.name for i in self._session.get_inputs()}
        missing = expected - set(feeds)
        if missing:
            raise BackendError(f"ONNX Runtime needs inputs {sorted(missing)}; given {sorted(feeds)}")
        fed = {k: v for k, v in feeds.items() if k in expected}
        self.last_input_fingerprints = {k: fingerprint(v) for k, v in fed.items()}
        try:
            values = self._session.run(names, fed)
        except Exception as exc:  # noqa: BLE001
            static = all(all(isinstance(d, int) for d in i.shape) for i in self._session.get_inputs())
            if _run_fault_is_models(exc, self._model, static):
                # the feeds passed ORT's checks against the declared inputs; they are named so that a shape the
                # user chose (--input) is seen beside the node that failed on it
                shown = ", ".join(f"{k} {'x'.join(map(str, v.shape)) or 'scalar'} {v.dtype}" for k, v in fed.items())
                raise ModelRunError(f"ONNX Runtime cannot run the model on the inputs fed ({shown}): "
                                 f"{_first_line(exc)}") from None
            raise BackendError(f"ONNX Runtime failed to run: {condense_error(exc)}") from exc
        return dict(zip(names, values))

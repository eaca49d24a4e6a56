"""Audit a Triton deployment against the ONNX graph it should serve, before any inference.

Reads server metadata, readiness, the repository index, model metadata and model config
through :class:`gapcheck.triton.client.TritonConnection` and reports every difference as a
finding carrying both values: names, data types (FP16 vs FP32), dims, ``max_batch_size`` vs
the batch axis, served versions and readiness, backend/platform.

Production servers restrict APIs (``--http-restricted-api``, ``--grpc-restricted-protocol``;
PyTriton does so by default). The audit then checks what the allowed APIs show and names
what it could not check in one ``triton_api_restricted`` info finding per API; a
restriction alone never fails the audit nor becomes a backend error. Only when neither the
model metadata nor the model config can be read is there nothing to audit: that is a
:class:`~gapcheck.triton.client.RestrictedApiError` (exit 2, the caller needs the token).
"""
from __future__ import annotations

import difflib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import onnx

from gapcheck.codes import Code
from gapcheck.codes import triton as codes
from gapcheck.errors import EndpointError
from gapcheck.findings import Finding, Severity, Subject
from gapcheck.triton.audit_result import ServedModel, ServedTensor, TensorSide, TritonAuditResult, fmt_shape
from gapcheck.triton.client import RestrictedApiError, TritonConnection, TritonEndpoint, connect
from gapcheck.triton.endpoint import ModelNotFoundError, RequestRejectedError
from gapcheck.triton.names import Pairing, pair_tensors, shown_name, shown_names
from gapcheck.triton.repository import OnnxIo, load_onnx, onnx_inputs, onnx_outputs
from gapcheck.triton.url import clean_text

__all__ = ["ModelRead", "ServedModel", "ServedTensor", "TritonAuditResult", "audit_deployment", "served_model"]

logger = logging.getLogger(__name__)
T = TypeVar("T")

# The registered codes as strings, for callers that compare ``finding.code``.
DTYPE_MISMATCH = codes.DTYPE_MISMATCH.code
SHAPE_MISMATCH = codes.SHAPE_MISMATCH.code
NAME_MISMATCH = codes.NAME_MISMATCH.code
BATCH_MISMATCH = codes.BATCH_MISMATCH.code
VERSION_STALE = codes.VERSION_STALE.code
NOT_READY = codes.NOT_READY.code
SERVER_NOT_READY = codes.SERVER_NOT_READY.code
PLATFORM = codes.PLATFORM.code
API_RESTRICTED = codes.API_RESTRICTED.code

ONNX_PLATFORM = "onnxruntime_onnx"
ONNX_BACKEND = "onnxruntime"
# Model metadata names data types without the config's prefix, and calls strings BYTES.
_METADATA_TYPES = {"BYTES": "TYPE_STRING"}


class _Allowed:
    """Runs requests that a restricted server may refuse; remembers what was not checked, per API."""

    def __init__(self) -> None:
        self.skipped: dict[str, list[str]] = {}
        self.server_words: dict[str, str] = {}
        self.headers: dict[str, str] = {}

    def run(self, not_checked: str, fn: Callable[[], T], default: T) -> T:
        try:
            return fn()
        except RestrictedApiError as exc:
            self.skipped.setdefault(exc.api, []).append(not_checked)
            self.server_words.setdefault(exc.api, exc.message)
            if exc.header:
                self.headers[exc.api] = exc.header
            return default

    def findings(self, endpoint: str) -> list[Finding]:
        return [codes.API_RESTRICTED.finding(
            f"{'; '.join(dict.fromkeys(items))}: {api} API restricted",
            subject=Subject(endpoint=endpoint, group=api), where=endpoint,
            evidence={"api": api, "not_checked": list(dict.fromkeys(items)),
                      "expected_header": self.headers.get(api), "server_said": self.server_words[api]},
        ) for api, items in self.skipped.items()]


@dataclass(frozen=True)
class ModelRead:
    """What a caller's readiness step already read of a READY model (``gapcheck nightly``): the audit takes it instead
    of asking again. A ready model's server is live, so liveness, the repository index, the model's readiness, its
    metadata and (when given) its config are not requested again; the server's metadata and readiness still are."""

    metadata: dict[str, Any]
    config: dict[str, Any] | None  # None: the caller could not read it (restricted): the audit asks once itself


def _served_tensors(entries: list[dict[str, Any]], max_batch_size: int) -> tuple[ServedTensor, ...]:
    tensors = []
    for entry in entries:
        dims = tuple(int(d) for d in entry.get("dims", []))
        reshape = entry.get("reshape") or {}
        model_dims = tuple(int(d) for d in reshape["shape"]) if "shape" in reshape else dims
        shape = ((-1,) if max_batch_size > 0 else ()) + model_dims
        tensors.append(ServedTensor(name=str(entry.get("name", "")), data_type=str(entry.get("data_type", "TYPE_INVALID")),
                                    dims=dims, shape=tuple(None if d < 0 else d for d in shape)))
    return tuple(tensors)


def _metadata_tensors(entries: list[dict[str, Any]]) -> tuple[ServedTensor, ...]:
    """Tensors from model metadata: full shapes (batch included when batching), data types without TYPE_."""
    tensors = []
    for entry in entries:
        shape = tuple(int(d) for d in entry.get("shape", []))
        datatype = str(entry.get("datatype", "INVALID"))
        tensors.append(ServedTensor(name=str(entry.get("name", "")),
                                    data_type=_METADATA_TYPES.get(datatype, f"TYPE_{datatype}"),
                                    dims=shape, shape=tuple(None if d < 0 else d for d in shape)))
    return tuple(tensors)


#: Unpaired tensors named one finding each, per kind and side; the rest are counted in one more finding.
MAX_NAMED_TENSORS = 100


class _Auditor:
    """Collects findings for one model; one method per family of checks."""

    def __init__(self, endpoint: str, model: str, where: str, max_batch_size: int | None) -> None:
        self.endpoint, self.model, self.where = endpoint, model, where
        self.max_batch_size = max_batch_size  # None: unknown (model config restricted)
        self.findings: list[Finding] = []
        self.pairings: dict[str, Pairing] = {}  # "input"/"output": how the served tensors were paired
        self.side = "graph"  # what pairing messages call the graph's side (nightly: the golden bundle)

    def add(self, code: Code, message: str, where: str = "", *, severity: Severity | None = None,
            tensor: str | None = None, **evidence: Any) -> None:
        subject = Subject(endpoint=self.endpoint, module=self.model, output=tensor)
        self.findings.append(code.finding(message, subject=subject, evidence=evidence, severity=severity,
                                          where=where or self.where))

    def names(self, kind: str, onnx_side: list[OnnxIo], served: tuple[ServedTensor, ...],
              mapping: Mapping[str, str] | None = None) -> list[tuple[OnnxIo, ServedTensor]]:
        """Pair tensors (:func:`gapcheck.triton.names.pair_tensors`: by map, by name, then the leftovers when only one
        pairing fits); a renaming is said once (info), what cannot be paired stays a name gap."""
        pairing = pair_tensors(kind, onnx_side, served, mapping, side=self.side)
        self.pairings[kind] = pairing
        by_graph, by_served = {o.name: o for o in onnx_side}, {t.name: t for t in served}
        pairs = [(by_graph[g], by_served[s]) for g, s in pairing.pairs.items()]
        if pairing.renamed:
            shown = ", ".join(f"{g}={s}" for g, s in pairing.renamed.items())
            self.add(codes.SERVED_NAMES, f"the deployment names its {kind}s its own way; paired {pairing.how}: "
                     f"{shown_names([shown], 1)} (graph=served); requests use the served names",
                     tensor=f"{kind} names", pairs=pairing.renamed, how=pairing.how)
        if pairing.problem is not None:
            self._unpaired(kind, pairing)
        return pairs

    def _unpaired(self, kind: str, pairing: Pairing) -> None:
        """A served tensor the graph lacks, or an ONNX input the server never sends, breaks every request; an ONNX
        output the server does not expose only narrows what can be compared."""
        problem = pairing.problem or ""
        graph_side, served_side = pairing.unpaired_graph, pairing.unpaired_served
        for name in graph_side[:MAX_NAMED_TENSORS]:
            self.add(codes.NAME_MISMATCH, f"ONNX {kind} {shown_names([name])} is not declared by the server ({problem})",
                     f"{self.where} {kind} {shown_name(name)}", severity=Severity.GAP if kind == "input" else Severity.WARNING,
                     tensor=f"{kind} {name}", onnx=name, served=None,
                     served_names=list(served_side[:MAX_NAMED_TENSORS]))
        for name in served_side[:MAX_NAMED_TENSORS]:
            self.add(codes.NAME_MISMATCH, f"served {kind} {shown_names([name])} does not exist in the ONNX graph "
                     f"({problem})",
                     f"{self.where} {kind} {shown_name(name)}", tensor=f"{kind} {name}", onnx=None, served=name,
                     onnx_names=list(graph_side[:MAX_NAMED_TENSORS]))
        more = max(0, len(graph_side) - MAX_NAMED_TENSORS) + max(0, len(served_side) - MAX_NAMED_TENSORS)
        if more:  # a server listing 200,000 tensors made reports of 100 MB, one finding each (verification review)
            self.add(codes.NAME_MISMATCH, f"{more} more {kind}(s) unpaired like these, not listed one by one "
                     f"({len(graph_side)} of the {self.side}'s, {len(served_side)} of the server's)",
                     f"{self.where} {kind}s", tensor=f"{kind} names", unpaired_graph=len(graph_side),
                     unpaired_served=len(served_side))

    def dtype(self, kind: str, o: OnnxIo, t: ServedTensor, torch_dtype: str | None) -> None:
        if o.triton_type != t.data_type:
            evidence: dict[str, Any] = {"served": t.data_type, "onnx": o.triton_type}
            if torch_dtype:
                evidence["torch"] = torch_dtype
            self.add(codes.DTYPE_MISMATCH,
                     f"{kind} {_named(o, t)} is declared {t.data_type} on the server but the ONNX graph uses {o.triton_type}",
                     f"{self.where} {kind} {shown_name(t.name)}", tensor=f"{kind} {t.name}", **evidence)

    def shape(self, kind: str, o: OnnxIo, t: ServedTensor) -> None:
        where, tensor = f"{self.where} {kind} {shown_name(t.name)}", f"{kind} {t.name}"
        evidence: dict[str, Any] = {"served": fmt_shape(t.shape), "onnx": fmt_shape(o.shape),
                                    "max_batch_size": self.max_batch_size,
                    "served_dims": list(t.dims)}
        if len(t.shape) != len(o.shape):
            self._rank(kind, o, t, where, tensor, evidence)
            return
        batch = self.max_batch_size or 0
        if batch > 0 and o.shape and o.shape[0] is not None:
            self.add(codes.BATCH_MISMATCH, f"the server batches {kind} {_named(o, t)} up to {batch} but the ONNX batch "
                     f"axis is fixed at {o.shape[0]}", where, tensor=tensor, **evidence)
        for axis in range(1 if batch > 0 else 0, len(o.shape)):
            served_dim, onnx_dim = t.shape[axis], o.shape[axis]
            if served_dim is not None and onnx_dim is not None and served_dim != onnx_dim:
                self.add(codes.SHAPE_MISMATCH,
                         f"{kind} {_named(o, t)} axis {axis} is {served_dim} on the server and {onnx_dim} in the ONNX "
                         f"graph (served {fmt_shape(t.shape)}, ONNX {fmt_shape(o.shape)})", where, tensor=tensor,
                         axis=axis, **evidence)
            elif served_dim is None and onnx_dim is not None:
                self.add(codes.SHAPE_MISMATCH,
                         f"{kind} {_named(o, t)} axis {axis} is dynamic on the server but fixed at {onnx_dim} in the ONNX "
                         "graph: requests of another size pass Triton and fail in the model", where,
                         severity=Severity.WARNING, tensor=tensor, axis=axis, **evidence)

    def _rank(self, kind: str, o: OnnxIo, t: ServedTensor, where: str, tensor: str, evidence: dict[str, Any]) -> None:
        served, graph = fmt_shape(t.shape), fmt_shape(o.shape)
        if self.max_batch_size and len(t.shape) == len(o.shape) + 1:
            message = (f"the server batches (max_batch_size {self.max_batch_size}) and so adds a batch axis to "
                       f"{kind} {_named(o, t)}: served {served}, the ONNX graph has no batch axis {graph}")
        elif not self.max_batch_size and len(t.shape) + 1 == len(o.shape):
            known = "max_batch_size is 0" if self.max_batch_size == 0 else "the model metadata shows no batching"
            message = f"{known} but the dims of {kind} {_named(o, t)} {served} lack the batch axis of the ONNX graph {graph}"
        else:
            self.add(codes.SHAPE_MISMATCH, f"{kind} {_named(o, t)} has rank {len(t.shape)} on the server and "
                     f"{len(o.shape)} in the ONNX graph", where, tensor=tensor, **evidence)
            return
        self.add(codes.BATCH_MISMATCH, message, where, tensor=tensor, **evidence)


def _named(o: OnnxIo, t: ServedTensor) -> str:
    """A served tensor as findings name it; a renamed one with the graph's name too (both sides of the pair)."""
    return shown_name(t.name) if o.name == t.name else f"{shown_name(t.name)} (the graph's {shown_name(o.name)})"


def _torch_dtype(torch_module: Any) -> str | None:
    if torch_module is None:
        return None
    for parameter in torch_module.parameters():
        if parameter.is_floating_point():
            return str(parameter.dtype).replace("torch.", "")
    return None


def _version_policy(config: dict[str, Any]) -> list[str] | None:
    specific = (config.get("version_policy") or {}).get("specific")
    return [str(v) for v in specific.get("versions", [])] if isinstance(specific, dict) else None


def _num(version: str) -> tuple[int, str]:
    # ASCII digits only: str.isdigit also takes '²', which int() refuses (a server's version string is outside text)
    return (int(version), "") if version.isascii() and version.isdigit() else (0, version)


def _side(io: OnnxIo) -> TensorSide:
    return TensorSide(name=io.name, data_type=io.triton_type, shape=io.shape)


def audit_deployment(
    endpoint: TritonEndpoint,
    model: str,
    *,
    onnx_model: onnx.ModelProto | str | Path,
    version: str | int | None = None,
    torch_module: Any = None,
    read: ModelRead | None = None,
    input_map: Mapping[str, str] | None = None,
    output_map: Mapping[str, str] | None = None,
    side: str = "graph",
) -> TritonAuditResult:
    """Diff what ``endpoint`` serves as ``model`` against ``onnx_model``.

    ``read``: what the caller already read of the model (version ``version``), ready: those round trips are not made
    again (see :class:`ModelRead`); the findings are the same. EndpointError (exit 3) when the server is unreachable
    or answers nonsense; RestrictedApiError (exit 2)
    only when neither the model metadata nor the model config may be read. ``input_map`` / ``output_map``: graph
    name -> served name (``--triton-input-map`` / ``--triton-output-map``), for tensors the deployment names its own
    way and that cannot be paired otherwise (:mod:`gapcheck.triton.names`); an unknown name is a UsageError.
    ``side``: what pairing messages call the graph's side (nightly: "golden bundle").
    """
    started = time.perf_counter()
    graph = load_onnx(onnx_model)
    requested = None if version in (None, "") else str(version)
    with connect(endpoint) as conn:
        audit = _Audit(conn, model, requested, graph, _torch_dtype(torch_module), read)
        audit.maps = {"input": dict(input_map or {}), "output": dict(output_map or {})}
        audit.auditor.side = side
        result = audit.run()
    pairings = audit.auditor.pairings
    return TritonAuditResult(**result, protocol_detected=conn.detected, duration_s=time.perf_counter() - started,
                             onnx_inputs=tuple(_side(i) for i in onnx_inputs(graph)),
                             onnx_outputs=tuple(_side(o) for o in onnx_outputs(graph)),
                             input_map=pairings["input"].renamed if "input" in pairings else {},
                             output_map=pairings["output"].renamed if "output" in pairings else {})


MODEL_HINT = "check --triton-model (or the URL's /MODEL)"


def missing_model(conn: TritonConnection, model: str, everything: list[dict[str, Any]] | None, *,
                  hint: str = MODEL_HINT) -> ModelNotFoundError | None:
    """Why ``model`` is not on the server (a misspelt name: the caller's mistake, exit 2, naming what the server has,
    the closest names first), or None when it is there or cannot be told. From the server's repository index
    (``everything``); when that is restricted (None), the server's 404 / NOT_FOUND for the model's metadata says it.
    ``hint``: where the caller's model name is set."""
    where = conn.display_url
    if everything is not None:
        if any(e.get("name") == model for e in everything):
            return None
        held = sorted({str(e.get("name", "")) for e in everything})
        by_case = {n.lower(): n for n in held}  # 'CNN' for 'cnn' is a near match too
        close = [by_case[n] for n in difflib.get_close_matches(model.lower(), list(by_case), n=5, cutoff=0.6)]
        names = close + [n for n in held if n not in close]
        return ModelNotFoundError(f"model {shown_names([model])} is not in the repository of {where}; it holds "
                                  f"{shown_names(names)}", hint=hint)
    try:
        conn.model_metadata(model)
    except RequestRejectedError as exc:
        if exc.status in ("404", "StatusCode.NOT_FOUND"):
            return ModelNotFoundError(f"model {shown_names([model])} is not on {where} (the server says: "
                                      f"{clean_text(exc.reason, 200)}; its repository index is restricted)", hint=hint)
    except EndpointError:
        pass
    return None


def missing_version(conn: TritonConnection, model: str, version: str, everything: list[dict[str, Any]] | None, *,
                    hint: str) -> ModelNotFoundError | None:
    """Why ``version`` of ``model`` (which the server has) is not on the server in any state, naming the versions it
    has, or None when it is there (maybe not ready) or cannot be told. From the repository index (every version,
    loading or failed too); where that is restricted (None), the versions the model's metadata lists."""
    if everything is not None:
        known = {str(e.get("version", "")) for e in everything if e.get("name") == model} - {""}
    else:
        try:
            known = {str(v) for v in conn.model_metadata(model).get("versions", [])}
        except EndpointError:
            return None
    if not known or version in known:
        return None
    return ModelNotFoundError(f"version {version} of model {shown_names([model])} is not on {conn.display_url}; it "
                              f"has version(s) {', '.join(sorted(known, key=_num)[-20:])}", hint=hint)


class _Audit:
    """One audit, in named phases: server, model state, served model, comparison."""

    def __init__(self, conn: TritonConnection, model: str, requested: str | None, graph: onnx.ModelProto,
                 torch_dtype: str | None, read: ModelRead | None = None) -> None:
        self.conn, self.model, self.requested, self.graph, self.torch_dtype = conn, model, requested, graph, torch_dtype
        self.read = read
        self.maps: dict[str, dict[str, str]] = {}  # "input"/"output": graph name -> served name, as the user gave
        self.allowed = _Allowed()
        self.config: dict[str, Any] | None = None
        where = f"{model}{' v' + requested if requested else ''} @ {conn.display_url}"
        self.auditor = _Auditor(conn.display_url, model, where, None)

    def run(self) -> dict[str, Any]:
        meta = self._server()
        base = dict(endpoint=self.conn.display_url, protocol=self.conn.protocol, model=self.model,
                    requested_version=self.requested, server_name=str(meta.get("name", "")),
                    server_version=str(meta.get("version", "")), torch_dtype=self.torch_dtype)
        state, audited_version = self._model_state()
        served = None
        if state == "READY":
            served = self._served(audited_version)
            if served is None:
                state = "UNAVAILABLE"
            else:
                self._compare(served)
        findings = tuple(self.allowed.findings(self.conn.display_url)) + tuple(self.auditor.findings)
        return dict(base, model_state=state, served=served, findings=findings,
                    restricted_apis=tuple(self.allowed.skipped))

    def _server(self) -> dict[str, Any]:
        conn = self.conn
        if self.read is None and not self.allowed.run("server liveness not checked", conn.server_live, True):
            raise EndpointError(f"Triton server {conn.display_url} answers but is not live")
        meta: dict[str, Any] = self.allowed.run("server name and version not read", conn.server_metadata, {})
        if not self.allowed.run("server readiness not checked", conn.server_ready, True):
            # Triton's default --strict-readiness makes one failed model (any model) mark the whole server unready.
            self.auditor.add(codes.SERVER_NOT_READY, "the server reports it is not ready (under Triton's "
                             "--strict-readiness any model that failed to load does that); the audited model's own "
                             "readiness is checked separately", conn.display_url,
                             served="not ready", expected="ready")
        return meta

    def _model_state(self) -> tuple[str, str | None]:
        """READY (and the version to audit), or the state after a NOT_READY/VERSION_STALE finding."""
        conn, model, requested = self.conn, self.model, self.requested
        if self.read is not None:  # the caller saw it ready (its server is then live)
            return "READY", requested
        everything = self.allowed.run("served versions not listed", conn.repository_index, None)
        index = None if everything is None else [e for e in everything if e.get("name") == model]
        # Waiting only helps a model that is still loading; a failed or absent one will not become ready.
        loading = any(e.get("state") == "LOADING" for e in index or [])
        ready = self.allowed.run("model readiness not checked",
                                 lambda: conn.model_ready(model, requested, wait=loading), None)
        if ready is not False:
            return "READY", requested
        self._refuse_unknown_model(everything)
        ready_versions = self._ready_versions(index)
        if requested and ready_versions:
            self.auditor.add(codes.VERSION_STALE, f"version {requested} of '{model}' is not served; the server serves "
                             f"version(s) {', '.join(ready_versions)}", requested=requested, served=ready_versions)
            return "READY", ready_versions[-1]
        state = next((e for e in index or [] if not requested or str(e.get("version")) == requested), {})
        self.auditor.add(codes.NOT_READY, f"model '{model}'{' version ' + requested if requested else ''} is not "
                         f"ready (state {state.get('state', 'unknown')})",
                         served=str(state.get("state", "not in repository index" if index is not None else "unknown")),
                         expected="READY", reason=conn.redact(str(state.get("reason", ""))).strip())
        return str(state.get("state", "UNKNOWN")), None

    def _refuse_unknown_model(self, everything: list[dict[str, Any]] | None) -> None:
        missing = missing_model(self.conn, self.model, everything)
        if missing is not None:
            raise missing

    def _ready_versions(self, index: list[dict[str, Any]] | None) -> list[str]:
        if index is not None:
            return sorted((str(e.get("version", "")) for e in index if e.get("state") == "READY"), key=_num)
        try:  # without the repository index, the model's metadata lists the versions it serves
            meta: dict[str, Any] = self.allowed.run("served versions not listed",
                                                    lambda: self.conn.model_metadata(self.model), {})
        except EndpointError:
            return []
        return sorted((str(v) for v in meta.get("versions", [])), key=_num)

    def _served(self, version: str | None) -> ServedModel | None:
        conn, model = self.conn, self.model
        if self.read is not None and self.read.config is not None:
            self.config = self.read.config
            return served_model(model, self.read.metadata, self.read.config, version)
        try:
            metadata = self.read.metadata if self.read is not None else self.allowed.run(
                "served versions and platform not read (model metadata)", lambda: conn.model_metadata(model, version),
                None)
        except EndpointError as exc:
            if "model readiness not checked" not in self.allowed.skipped.get("health", []):
                raise
            # Readiness could not be asked; a model the server cannot describe is not ready.
            self.auditor.add(codes.NOT_READY, f"model '{model}' is not ready: {exc.message}",
                             served="unknown", expected="READY", reason=exc.message)
            return None
        config = self.allowed.run("max_batch_size, version policy and backend not read (model config)",
                                  lambda: conn.model_config(model, version), None)
        if metadata is None and config is None:
            words = "; ".join(self.allowed.server_words.values())
            raise RestrictedApiError(
                f"Triton endpoint {conn.display_url}: model '{model}' cannot be audited: both its metadata and its "
                f"config are restricted ({words})", api="metadata",
                header=self.allowed.headers.get("metadata") or self.allowed.headers.get("model-config"),
                hint="pass the access header the server expects (its name is in the server's words above)")
        self.config = config
        return served_model(model, metadata or {}, config, version)

    def _compare(self, served: ServedModel) -> None:
        auditor = self.auditor
        auditor.max_batch_size = served.max_batch_size
        if served.platform != ONNX_PLATFORM and served.backend != ONNX_BACKEND:
            # Not a gap by itself, but outputs then depend on code (python) or another engine (TensorRT) the
            # ONNX graph does not describe: the parity check is what settles it.
            auditor.add(codes.PLATFORM,
                        f"served by platform '{served.platform or '-'}' / backend '{served.backend or '-'}', not "
                        f"{ONNX_PLATFORM}: server-side code or another engine may change the outputs",
                        served={"platform": served.platform, "backend": served.backend},
                        onnx={"platform": ONNX_PLATFORM, "backend": ONNX_BACKEND})
        pinned = _version_policy(self.config) if self.config else None
        if self.requested is None and pinned is not None:
            auditor.add(codes.VERSION_STALE, f"the version policy pins version(s) {', '.join(pinned)}: a newer version "
                        "placed in the repository would not be served", severity=Severity.WARNING,
                        served=list(served.versions), version_policy=pinned)
        for kind, onnx_side, served_side in (("input", onnx_inputs(self.graph), served.inputs),
                                              ("output", onnx_outputs(self.graph), served.outputs)):
            for onnx_io, tensor in auditor.names(kind, onnx_side, served_side, self.maps.get(kind)):
                auditor.dtype(kind, onnx_io, tensor, self.torch_dtype)
                auditor.shape(kind, onnx_io, tensor)


def served_model(model: str, metadata: dict[str, Any], config: dict[str, Any] | None,
                 version: str | None) -> ServedModel:
    """What ``model`` serves, from its metadata and config (None: restricted, the metadata's full shapes)."""
    versions = tuple(sorted((str(v) for v in metadata.get("versions", [])), key=_num))
    common: dict[str, Any] = dict(name=model, version=version or (versions[-1] if versions else ""), versions=versions)
    if config is None:  # model config restricted: what metadata shows (full shapes, no max_batch_size)
        return ServedModel(**common, platform=str(metadata.get("platform", "")), backend="", max_batch_size=None,
                           inputs=_metadata_tensors(metadata.get("inputs", [])),
                           outputs=_metadata_tensors(metadata.get("outputs", [])), source="model metadata")
    max_batch_size = int(config.get("max_batch_size", 0))
    return ServedModel(**common, platform=str(config.get("platform", "") or metadata.get("platform", "")),
                       backend=str(config.get("backend", "")), max_batch_size=max_batch_size,
                       inputs=_served_tensors(config.get("input", []), max_batch_size),
                       outputs=_served_tensors(config.get("output", []), max_batch_size))

"""Audit a Triton deployment against the ONNX graph it should serve, before any inference.

Reads server metadata, model readiness, model metadata and model config through
``tritonclient`` and reports every difference as a :class:`gapcheck.findings.Finding`
carrying both values: names, data types (FP16 vs FP32), dims, ``max_batch_size`` vs the
batch axis, served versions and readiness, backend/platform.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from gapcheck.errors import EndpointError
from gapcheck.findings import Finding, Severity, verdict_of
from gapcheck.triton.client import TritonEndpoint
from gapcheck.triton.repository import OnnxIo, load_onnx, onnx_inputs, onnx_outputs

logger = logging.getLogger(__name__)

# Stable finding codes (reports and tests key on them).
DTYPE_MISMATCH = "triton_dtype_mismatch"
SHAPE_MISMATCH = "triton_shape_mismatch"
NAME_MISMATCH = "triton_name_mismatch"
BATCH_MISMATCH = "triton_batch_mismatch"
VERSION_STALE = "triton_version_stale"
NOT_READY = "triton_not_ready"
SERVER_NOT_READY = "triton_server_not_ready"
PLATFORM = "triton_platform"
FINDING_CODES = (DTYPE_MISMATCH, SHAPE_MISMATCH, NAME_MISMATCH, BATCH_MISMATCH, VERSION_STALE, NOT_READY,
                 SERVER_NOT_READY, PLATFORM)

ONNX_PLATFORM = "onnxruntime_onnx"
ONNX_BACKEND = "onnxruntime"


@dataclass(frozen=True)
class ServedTensor:
    """An input or output as the model config declares it; ``shape`` is what the model sees, batch included."""

    name: str
    data_type: str  # TYPE_FP32, ...
    dims: tuple[int, ...]  # as declared (without the batch axis when max_batch_size > 0)
    shape: tuple[int | None, ...]


@dataclass(frozen=True)
class ServedModel:
    name: str
    version: str  # the version audited (the one the server routes to when none was asked for)
    versions: tuple[str, ...]  # every ready version
    platform: str
    backend: str
    max_batch_size: int
    inputs: tuple[ServedTensor, ...]
    outputs: tuple[ServedTensor, ...]


@dataclass(frozen=True)
class TritonAuditResult:
    """What the audit saw and found; truthy when the deployment passes."""

    endpoint: str  # redacted, safe to print
    protocol: str
    model: str
    requested_version: str | None
    server_name: str
    server_version: str
    model_state: str
    served: ServedModel | None
    findings: tuple[Finding, ...] = field(default_factory=tuple)
    torch_dtype: str | None = None

    @property
    def verdict(self) -> str:
        return verdict_of(self.findings)

    def __bool__(self) -> bool:
        return self.verdict == "pass"


def _served_tensors(entries: list[dict[str, Any]], max_batch_size: int) -> tuple[ServedTensor, ...]:
    tensors = []
    for entry in entries:
        dims = tuple(int(d) for d in entry.get("dims", []))
        reshape = entry.get("reshape") or {}
        model_dims = tuple(int(d) for d in reshape["shape"]) if "shape" in reshape else dims
        shape = ((-1,) if max_batch_size > 0 else ()) + model_dims
        tensors.append(ServedTensor(
            name=str(entry.get("name", "")),
            data_type=str(entry.get("data_type", "TYPE_INVALID")),
            dims=dims,
            shape=tuple(None if d < 0 else d for d in shape),
        ))
    return tuple(tensors)


def _fmt(shape: tuple[int | None, ...]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


class _Auditor:
    """Collects findings for one model; one method per family of checks."""

    def __init__(self, where: str, max_batch_size: int) -> None:
        self.where = where
        self.max_batch_size = max_batch_size
        self.findings: list[Finding] = []

    def add(self, code: str, severity: Severity, message: str, where: str = "", **evidence: Any) -> None:
        self.findings.append(Finding(code, severity, message, where or self.where, evidence))

    def names(self, kind: str, onnx_side: list[OnnxIo], served: tuple[ServedTensor, ...]) -> list[tuple[OnnxIo, ServedTensor]]:
        """Pair tensors by name; report the ones without partner. A lone pair left over is paired by position."""
        by_name = {t.name: t for t in served}
        pairs = [(o, by_name[o.name]) for o in onnx_side if o.name in by_name]
        missing = [o for o in onnx_side if o.name not in by_name]
        extra = [t for t in served if t.name not in {o.name for o in onnx_side}]
        if len(missing) == 1 and len(extra) == 1:
            self.add(NAME_MISMATCH, Severity.GAP,
                     f"{kind} '{missing[0].name}' of the ONNX graph is served as '{extra[0].name}'",
                     f"{self.where} {kind} '{extra[0].name}'", onnx=missing[0].name, served=extra[0].name)
            return pairs + [(missing[0], extra[0])]
        # A served output the graph lacks, or an ONNX input the server never sends, breaks every request;
        # an ONNX output the server does not expose only narrows what can be compared.
        for o in missing:
            severity = Severity.GAP if kind == "input" else Severity.WARNING
            self.add(NAME_MISMATCH, severity, f"ONNX {kind} '{o.name}' is not declared by the server",
                     f"{self.where} {kind} '{o.name}'", onnx=o.name, served=None)
        for t in extra:
            self.add(NAME_MISMATCH, Severity.GAP, f"served {kind} '{t.name}' does not exist in the ONNX graph",
                     f"{self.where} {kind} '{t.name}'", onnx=None, served=t.name)
        return pairs

    def dtype(self, kind: str, o: OnnxIo, t: ServedTensor, torch_dtype: str | None) -> None:
        if o.triton_type != t.data_type:
            evidence: dict[str, Any] = {"served": t.data_type, "onnx": o.triton_type}
            if torch_dtype:
                evidence["torch"] = torch_dtype
            self.add(DTYPE_MISMATCH, Severity.GAP,
                     f"{kind} '{t.name}' is declared {t.data_type} on the server but the ONNX graph uses {o.triton_type}",
                     f"{self.where} {kind} '{t.name}'", **evidence)

    def shape(self, kind: str, o: OnnxIo, t: ServedTensor) -> None:
        where = f"{self.where} {kind} '{t.name}'"
        evidence = {"served": _fmt(t.shape), "onnx": _fmt(o.shape), "max_batch_size": self.max_batch_size,
                    "served_dims": list(t.dims)}
        if len(t.shape) != len(o.shape):
            if self.max_batch_size > 0 and len(t.shape) == len(o.shape) + 1:
                message = (f"the server batches (max_batch_size {self.max_batch_size}) and so adds a batch axis to "
                           f"{kind} '{t.name}': served {_fmt(t.shape)}, the ONNX graph has no batch axis {_fmt(o.shape)}")
                self.add(BATCH_MISMATCH, Severity.GAP, message, where, **evidence)
            elif self.max_batch_size == 0 and len(t.shape) + 1 == len(o.shape):
                message = (f"max_batch_size is 0 but the dims of {kind} '{t.name}' {_fmt(t.shape)} lack the batch "
                           f"axis of the ONNX graph {_fmt(o.shape)}")
                self.add(BATCH_MISMATCH, Severity.GAP, message, where, **evidence)
            else:
                self.add(SHAPE_MISMATCH, Severity.GAP,
                         f"{kind} '{t.name}' has rank {len(t.shape)} on the server and {len(o.shape)} in the ONNX graph",
                         where, **evidence)
            return
        if self.max_batch_size > 0 and o.shape and o.shape[0] is not None:
            self.add(BATCH_MISMATCH, Severity.GAP,
                     f"the server batches {kind} '{t.name}' up to {self.max_batch_size} but the ONNX batch axis is "
                     f"fixed at {o.shape[0]}", where, **evidence)
        start = 1 if self.max_batch_size > 0 else 0
        for axis in range(start, len(o.shape)):
            served_dim, onnx_dim = t.shape[axis], o.shape[axis]
            if served_dim is not None and onnx_dim is not None and served_dim != onnx_dim:
                self.add(SHAPE_MISMATCH, Severity.GAP,
                         f"{kind} '{t.name}' axis {axis} is {served_dim} on the server and {onnx_dim} in the ONNX "
                         f"graph (served {_fmt(t.shape)}, ONNX {_fmt(o.shape)})", where, axis=axis, **evidence)
            elif served_dim is None and onnx_dim is not None:
                self.add(SHAPE_MISMATCH, Severity.WARNING,
                         f"{kind} '{t.name}' axis {axis} is dynamic on the server but fixed at {onnx_dim} in the ONNX "
                         "graph: requests of another size pass Triton and fail in the model", where, axis=axis,
                         **evidence)


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


def audit_deployment(
    endpoint: TritonEndpoint,
    model: str,
    *,
    onnx_model: onnx.ModelProto | str | Path,
    version: str | int | None = None,
    torch_module: Any = None,
) -> TritonAuditResult:
    """Diff what ``endpoint`` serves as ``model`` against ``onnx_model``; EndpointError when the server is unreachable."""
    graph = load_onnx(onnx_model)
    requested = None if version in (None, "") else str(version)
    torch_dtype = _torch_dtype(torch_module)
    with endpoint.connect() as conn:
        if not conn.server_live():
            raise EndpointError(f"Triton server {conn.display_url} answers but is not live")
        meta = conn.server_metadata()
        base = dict(endpoint=conn.display_url, protocol=endpoint.protocol, model=model, requested_version=requested,
                    server_name=str(meta.get("name", "")), server_version=str(meta.get("version", "")),
                    torch_dtype=torch_dtype)
        where = f"{model}{' v' + requested if requested else ''} @ {conn.display_url}"
        auditor = _Auditor(where, 0)
        if not conn.server_ready():
            auditor.add(SERVER_NOT_READY, Severity.WARNING, "the server reports it is not ready", conn.display_url,
                        served="not ready", expected="ready")
        index = [e for e in conn.repository_index() if e.get("name") == model]
        ready_versions = sorted((str(e.get("version", "")) for e in index if e.get("state") == "READY"), key=_num)
        audited_version = requested
        # Waiting only helps a model that is still loading; a failed or absent one will not become ready.
        loading = any(e.get("state") == "LOADING" for e in index)
        if not conn.model_ready(model, requested, wait=loading):
            if requested and ready_versions:
                auditor.add(VERSION_STALE, Severity.GAP,
                            f"version {requested} of '{model}' is not served; the server serves version(s) "
                            f"{', '.join(ready_versions)}", where, requested=requested, served=ready_versions)
                audited_version = ready_versions[-1]
            else:
                state = next((e for e in index if not requested or str(e.get("version")) == requested), {})
                auditor.add(NOT_READY, Severity.GAP,
                            f"model '{model}'{' version ' + requested if requested else ''} is not ready "
                            f"(state {state.get('state', 'unknown')})", where,
                            served=str(state.get("state", "not in repository index")), expected="READY",
                            reason=conn.redact(str(state.get("reason", ""))).strip())
                return TritonAuditResult(**base, model_state=str(state.get("state", "UNKNOWN")), served=None,
                                         findings=tuple(auditor.findings))
        metadata = conn.model_metadata(model, audited_version)
        config = conn.model_config(model, audited_version)
        served = _served_model(model, metadata, config, audited_version)
        auditor.max_batch_size = served.max_batch_size
        _audit_model(auditor, graph, served, config, requested, torch_dtype)
        return TritonAuditResult(**base, model_state="READY", served=served, findings=tuple(auditor.findings))


def _num(version: str) -> tuple[int, str]:
    return (int(version), "") if version.isdigit() else (0, version)


def _served_model(model: str, metadata: dict[str, Any], config: dict[str, Any], version: str | None) -> ServedModel:
    versions = tuple(sorted((str(v) for v in metadata.get("versions", [])), key=_num))
    max_batch_size = int(config.get("max_batch_size", 0))
    return ServedModel(
        name=model,
        version=version or (versions[-1] if versions else ""),
        versions=versions,
        platform=str(config.get("platform", "") or metadata.get("platform", "")),
        backend=str(config.get("backend", "")),
        max_batch_size=max_batch_size,
        inputs=_served_tensors(config.get("input", []), max_batch_size),
        outputs=_served_tensors(config.get("output", []), max_batch_size),
    )


def _audit_model(auditor: _Auditor, graph: onnx.ModelProto, served: ServedModel, config: dict[str, Any],
                 requested: str | None, torch_dtype: str | None) -> None:
    if served.platform != ONNX_PLATFORM and served.backend != ONNX_BACKEND:
        # Not a gap by itself, but outputs then depend on code (python) or another engine (TensorRT) the
        # ONNX graph does not describe: the parity check is what settles it.
        auditor.add(PLATFORM, Severity.WARNING,
                    f"served by platform '{served.platform or '-'}' / backend '{served.backend or '-'}', not "
                    f"{ONNX_PLATFORM}: server-side code or another engine may change the outputs",
                    served={"platform": served.platform, "backend": served.backend},
                    onnx={"platform": ONNX_PLATFORM, "backend": ONNX_BACKEND})
    pinned = _version_policy(config)
    if requested is None and pinned is not None:
        auditor.add(VERSION_STALE, Severity.WARNING,
                    f"the version policy pins version(s) {', '.join(pinned)}: a newer version placed in the "
                    "repository would not be served", served=list(served.versions), version_policy=pinned)
    for kind, onnx_side, served_side in (("input", onnx_inputs(graph), served.inputs),
                                          ("output", onnx_outputs(graph), served.outputs)):
        for onnx_io, tensor in auditor.names(kind, onnx_side, served_side):
            auditor.dtype(kind, onnx_io, tensor, torch_dtype)
            auditor.shape(kind, onnx_io, tensor)

"""What triton-audit saw and found, as the report contract (:mod:`gapcheck.report.contract`) wants it.

The result computes its own views (the tensor table: served vs ONNX, side by side) and checks
(one JUnit case per compared tensor, plus readiness and version); renderers only format them.
Imports nothing heavy.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from gapcheck.findings import Finding, Severity, Verdict
from gapcheck.report.contract import Chart, Check, Table


@dataclass(frozen=True)
class TensorSide:
    """A tensor as the ONNX graph declares it: Triton data type and shape (None = dynamic axis)."""

    name: str
    data_type: str
    shape: tuple[int | None, ...]


@dataclass(frozen=True)
class ServedTensor:
    """An input or output as the server declares it; ``shape`` is what the model sees, batch included."""

    name: str
    data_type: str  # TYPE_FP32, ...
    dims: tuple[int, ...]  # as declared (without the batch axis when max_batch_size > 0)
    shape: tuple[int | None, ...]


@dataclass(frozen=True)
class ServedModel:
    name: str
    version: str  # the version audited (the one the server routes to when none was asked for)
    versions: tuple[str, ...]  # every ready version (empty when the server would not say)
    platform: str
    backend: str
    max_batch_size: int | None  # None: the model config could not be read (restricted)
    inputs: tuple[ServedTensor, ...]
    outputs: tuple[ServedTensor, ...]
    source: str = "model config"  # where the tensors were read: "model config" or "model metadata"


def fmt_shape(shape: Sequence[int | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


@dataclass(frozen=True)
class TritonAuditResult:
    """What the audit saw and found; truthy when the deployment passes."""

    command: ClassVar[str] = "triton-audit"

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
    protocol_detected: bool = False  # True when a probe chose the protocol (bare host:port)
    restricted_apis: tuple[str, ...] = ()  # Triton API groups the server refused without an access header
    onnx_inputs: tuple[TensorSide, ...] = ()
    onnx_outputs: tuple[TensorSide, ...] = ()
    duration_s: float = 0.0
    # graph name -> served name of the tensors the deployment names its own way (gapcheck.triton.names): requests
    # send inputs under the served names, and served outputs are read back under the graph's
    input_map: Mapping[str, str] = field(default_factory=dict)
    output_map: Mapping[str, str] = field(default_factory=dict)

    @property
    def verdict(self) -> Verdict:
        return Verdict.of(self.findings)

    def __bool__(self) -> bool:
        return self.verdict is Verdict.PASS

    @property
    def headline(self) -> str:
        gaps = sum(1 for f in self.findings if f.severity is Severity.GAP)
        warnings = sum(1 for f in self.findings if f.severity is Severity.WARNING)
        restricted = f", {len(self.restricted_apis)} API(s) restricted" if self.restricted_apis else ""
        if gaps:
            codes = ", ".join(dict.fromkeys(f.code for f in self.findings if f.is_gap))
            return f"{self.model}: {gaps} deployment gap(s) ({codes}), {warnings} warning(s){restricted}"
        return f"{self.model}: deployment matches the ONNX graph ({warnings} warning(s){restricted})"

    @property
    def timings(self) -> Mapping[str, float]:
        return {"audit_s": round(self.duration_s, 4)}

    def sections(self) -> dict[str, Any]:
        served = self.served
        return {
            "endpoint": {"url": self.endpoint, "protocol": self.protocol, "protocol_detected": self.protocol_detected,
                         "server_name": self.server_name, "server_version": self.server_version,
                         "restricted_apis": list(self.restricted_apis)},
            "model": {"name": self.model, "requested_version": self.requested_version, "state": self.model_state,
                      "torch_dtype": self.torch_dtype},
            "served": None if served is None else {
                "version": served.version, "versions": list(served.versions), "platform": served.platform,
                "backend": served.backend, "max_batch_size": served.max_batch_size, "source": served.source,
                "inputs": [_tensor_json(t) for t in served.inputs],
                "outputs": [_tensor_json(t) for t in served.outputs]},
            "onnx": {"inputs": [_side_json(t) for t in self.onnx_inputs],
                     "outputs": [_side_json(t) for t in self.onnx_outputs]},
        }

    def tensor_rows(self) -> list[tuple[str, str, str, str, str, str, str]]:
        """(kind, name, served type, ONNX type, served shape, ONNX shape, status) per tensor either side declares."""
        rows = []
        served = self.served
        by_subject: dict[str, list[Finding]] = {}  # one pass over the findings: a config with 100k tensors was quadratic
        for finding in self.findings:
            by_subject.setdefault(finding.subject.output or "", []).append(finding)
        for kind, onnx_side, served_side in (("input", self.onnx_inputs, served.inputs if served else ()),
                                              ("output", self.onnx_outputs, served.outputs if served else ())):
            renamed = dict(self.input_map if kind == "input" else self.output_map)
            by_name = {t.name: t for t in served_side}
            # a renamed pair is one row, named graph=served, its status the served tensor's
            names = list(dict.fromkeys([t.name for t in onnx_side] +
                                       [t.name for t in served_side if t.name not in renamed.values()]))
            onnx_by_name = {t.name: t for t in onnx_side}
            for name in names:
                served_name = renamed.get(name, name)
                o, s = onnx_by_name.get(name), by_name.get(served_name)
                rows.append((kind, name if served_name == name else f"{name}={served_name}",
                             s.data_type if s else "-", o.data_type if o else "-",
                             fmt_shape(s.shape) if s else "-", fmt_shape(o.shape) if o else "-",
                             _status(by_subject.get(f"{kind} {served_name}", ()))))
        return rows

    def views(self) -> Sequence[Table | Chart]:
        views: list[Table | Chart] = []
        if self.served is not None or self.onnx_inputs:
            rows = self.tensor_rows()
            views.append(Table(
                title=f"{self.model} @ {self.endpoint}: served vs ONNX graph",
                columns=("kind", "name", "served type", "ONNX type", "served shape", "ONNX shape", "status"),
                rows=tuple(rows), highlight=tuple(i for i, r in enumerate(rows) if r[-1].startswith("gap")),
                note=self._note()))
        return views  # findings are drawn by every format itself

    def _note(self) -> str:
        served = self.served
        if served is None:
            return f"model state {self.model_state}"
        batch = "unknown (model config not read)" if served.max_batch_size is None else str(served.max_batch_size)
        return (f"server {self.server_name or '?'} {self.server_version or '?'} ({self.protocol}"
                f"{', detected' if self.protocol_detected else ''}); served version {served.version or '?'} "
                f"(ready: {', '.join(served.versions) or 'not listed'}), platform {served.platform or '-'}, "
                f"backend {served.backend or '-'}, max_batch_size {batch}; tensors from the {served.source}")

    def checks(self) -> Sequence[Check]:
        classname = f"triton-audit.{self.model}"
        checks = [Check(name=f"{kind} {name}", classname=classname,
                        failure=status if status.startswith("gap") else None,
                        details=f"served {stype} {sshape}, ONNX {otype} {oshape}")
                  for kind, name, stype, otype, sshape, oshape, status in self.tensor_rows()]
        tensor_subjects = {f"{r[0]} {r[1]}" for r in self.tensor_rows()}
        names = {c.name for c in checks}
        for finding in self.findings:
            if finding.subject.output in tensor_subjects:
                continue
            name = f"{finding.code} {finding.where}".strip()
            if finding.evidence.get("api"):  # one case per restricted API, not one name for all of them
                name += f" ({finding.evidence['api']})"
            while name in names:  # CI tools merge JUnit cases that share a name
                name += " (again)"
            names.add(name)
            checks.append(Check(name=name, classname=classname,
                                failure=finding.message if finding.is_gap else None, details=finding.message,
                                skipped=finding.message if finding.severity is Severity.INFO else None))
        if not checks:
            checks.append(Check(name="deployment matches the ONNX graph", classname=classname))
        return checks


def _tensor_json(t: ServedTensor) -> dict[str, Any]:
    return {"name": t.name, "data_type": t.data_type, "dims": list(t.dims), "shape": list(t.shape)}


def _side_json(t: TensorSide) -> dict[str, Any]:
    return {"name": t.name, "data_type": t.data_type, "shape": list(t.shape)}


def _status(mine: Sequence[Finding]) -> str:
    """A tensor row's status from the findings about that tensor."""
    if any(f.is_gap for f in mine):
        return "gap: " + ", ".join(dict.fromkeys(f.code for f in mine if f.is_gap))
    if mine:
        return "warning: " + ", ".join(dict.fromkeys(f.code for f in mine))
    return "ok"

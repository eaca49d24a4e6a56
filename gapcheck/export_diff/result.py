"""Values that export-diff returns. Renderers format these; they never recompute verdicts."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gapcheck.compare import ErrorStats
from gapcheck.findings import Finding, verdict_of

# Layer status values shown in the table and the JSON report.
PASS, FAIL, NO_ONNX, NOT_COMPARABLE = "pass", "fail", "no-onnx", "n/a"


@dataclass(frozen=True)
class LayerResult:
    order: int  # execution (completion) order in the torch forward pass
    module: str
    class_name: str
    op_types: tuple[str, ...]
    onnx_value: str | None
    status: str  # PASS, FAIL, NO_ONNX or NOT_COMPARABLE
    stats: ErrorStats | None  # worst case over samples
    worst_sample: int | None
    failing_samples: tuple[int, ...]
    source: str | None
    note: str = ""


@dataclass(frozen=True)
class OutputResult:
    """A final graph output of one backend compared with torch, worst case over samples."""

    name: str
    backend: str
    status: str
    stats: ErrorStats | None
    worst_sample: int | None
    failing_samples: tuple[int, ...]
    note: str = ""


@dataclass(frozen=True)
class FirstDivergence:
    module: str
    cause: str  # "local": the module's own ONNX ops introduce the error; "inherited": it arrives with its inputs
    source: str | None  # file:line of the diverging op (or of the module's forward)
    op_types: tuple[str, ...]
    sample: int
    output_max_abs: float
    input_max_abs: float | None  # worst error of the module's inputs as ONNX Runtime computed them
    local_max_abs: float | None  # error of the module's ONNX ops fed torch's own inputs
    amplification: float | None
    note: str = ""


@dataclass(frozen=True)
class InputRecord:
    """One input tensor of one sample, and its SHA256 as fed to each backend."""

    sample: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    sha256: dict[str, str]


@dataclass(frozen=True)
class BatchCheck:
    batch_size: int
    output: str
    status: str  # PASS, FAIL, or "error" when the runtime refused the batch
    max_abs: float | None
    worst_row: int | None
    error: str | None = None
    order: str = "as given"  # "as given" or "reversed": the same samples in another batch composition


@dataclass(frozen=True)
class ExportDiffResult:
    findings: tuple[Finding, ...]
    layers: tuple[LayerResult, ...]
    outputs: tuple[OutputResult, ...]
    first_divergence: FirstDivergence | None
    inputs: tuple[InputRecord, ...]
    exporter: str
    fallback_reason: str | None
    precision: str
    num_samples: int
    batch_checks: tuple[BatchCheck, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)
    server_layers: tuple[Any, ...] = ()  # ServerLayer rows, when compared on a Triton twin
    onnx_model: Any = field(default=None, repr=False, compare=False)  # the ONNX model compared (onnx.ModelProto)

    @property
    def verdict(self) -> str:
        return verdict_of(self.findings)

    def __bool__(self) -> bool:  # truthy when there is no gap, as Polygraphy's results are
        return self.verdict == "pass"

    @property
    def headline(self) -> str:
        """The one sentence on top of the report."""
        fd = self.first_divergence
        if fd is not None:
            how = {"local": "introduces the error", "inherited": "inherits the error from its inputs"}.get(
                fd.cause, "diverges (cause undetermined)"
            )
            where = f" ({fd.source})" if fd.source else ""
            ops = f" [{', '.join(fd.op_types)}]" if fd.op_types else ""
            return f"first divergence: {fd.module}{ops} {how}{where}, max |err| {fd.output_max_abs:.3g} on sample {fd.sample}"
        gaps = [f for f in self.findings if f.is_gap]
        if gaps:
            codes = ", ".join(dict.fromkeys(f.code for f in gaps))
            return f"{len(gaps)} gap finding(s): {codes}"
        compared = sum(1 for layer in self.layers if layer.status in (PASS, FAIL))
        return f"no gap: {compared} modules and {len(self.outputs)} outputs match over {self.num_samples} sample(s)"

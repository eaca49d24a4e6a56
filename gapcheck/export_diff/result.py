"""Values that export-diff returns, and the report contract over them.

:class:`ExportDiffResult` implements :class:`~gapcheck.report.contract.CommandResult`: it decides
its verdict, headline, JSON sections, the views people look at (the module table, the error-by-depth
chart, the localization, the per-backend input SHA256) and the JUnit checks. Renderers only format
these; nothing here imports torch or numpy.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from gapcheck.export_diff import views as _views
from gapcheck.export_diff.records import (  # noqa: F401 - the values are part of this module's face
    FAIL,
    NO_ONNX,
    NOT_COMPARABLE,
    PASS,
    BatchCheck,
    Cause,
    FirstDivergence,
    InputRecord,
    LayerResult,
    OutputResult,
    Status,
    num,
)
from gapcheck.findings import Finding, Verdict
from gapcheck.report.contract import Chart, Check, Table


@dataclass(frozen=True)
class ExportDiffResult:
    command: ClassVar[str] = "export-diff"

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
    padding: Any = None  # gapcheck.export_diff.padding.PaddingResult, with --pad-check
    onnx_model: Any = field(default=None, repr=False, compare=False)  # the ONNX model compared (onnx.ModelProto)
    # torch's names of every model output, in its order (the ONNX file may hold only some of them)
    model_outputs: tuple[str, ...] = ()

    @property
    def verdict(self) -> Verdict:
        return Verdict.of(self.findings)

    def __bool__(self) -> bool:  # truthy when there is no gap, as Polygraphy's results are
        return self.verdict is Verdict.PASS

    @property
    def headline(self) -> str:
        """The one sentence on top of the report."""
        fd = self.first_divergence
        if fd is not None:
            where = f" ({fd.source})" if fd.source else ""
            ops = f" [{', '.join(fd.op_types)}]" if fd.op_types else ""
            return f"first divergence: {fd.module}{ops} {fd.how}{where}, max |err| {fd.output_max_abs:.3g} on sample {fd.sample}"
        gaps = [f for f in self.findings if f.is_gap]
        if gaps:
            codes = ", ".join(dict.fromkeys(f.code for f in gaps))
            return f"{len(gaps)} gap finding(s): {codes}"
        compared = sum(1 for layer in self.layers if layer.status in (PASS, FAIL))
        return f"no gap: {compared} modules and {len(self.outputs)} outputs match over {self.num_samples} sample(s)"

    @property
    def run_summary(self) -> str:
        fallback = f" (dynamo failed: {self.fallback_reason})" if self.fallback_reason else ""
        return f"exporter: {self.exporter}{fallback} · precision: {self.precision} · samples: {self.num_samples}"

    # --- the report contract ------------------------------------------------------------------
    def sections(self) -> dict[str, Any]:
        return _views.sections(self)

    def views(self) -> tuple[Table | Chart, ...]:
        return _views.views(self)

    def checks(self) -> list[Check]:
        return _views.checks(self)

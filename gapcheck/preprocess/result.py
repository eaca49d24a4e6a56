"""The values ``preprocess_audit`` returns: frozen, truthy when the audit passes, and a
:class:`~gapcheck.report.contract.CommandResult` (JSON sections, views for console and HTML,
checks for JUnit). Every decision a report shows — which stage-table cells differ, which
findings belong to which stage pair — is made here, once; renderers only format.

The views follow the class (results hold their views, as every command's do): the stage table marks a cell that
differs from the reference stage by ONE rule (:func:`differs`), pictures are PNGs encoded here (renderers only embed
them), and findings are matched to stage pairs and stages by their structured :class:`~gapcheck.findings.Subject`,
never by parsing text.
"""
from __future__ import annotations

import base64
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from gapcheck.codes.preprocess import NONFINITE_OUTPUT, STAGE_ERROR
from gapcheck.findings import Finding
from gapcheck.preprocess.distribution import KSResult
from gapcheck.preprocess.rows import (
    BadSample,
    PairResult,
    SampleResult,
    StageError,
    StageOutcome,
    StageRow,
    WorstSample,
)
from gapcheck.report.contract import Chart, Check, ResultBase, Series, Table

DIFFERS_REL = 1e-3  # a statistic differs from the reference's when |a - b| > 1e-3 · max(1, |b|)
MARK = " ≠"  # appended to a stage-table cell that differs from the reference stage
HISTOGRAM_BINS = 32
IMAGE_SIDE = 256  # pictures are shrunk to at most this many pixels per side
CLASSNAME = "preprocess-audit"


@dataclass(frozen=True)
class PreprocessAuditResult(ResultBase):
    findings: tuple[Finding, ...] = field()  # field(): no default (ResultBase has a class-level one)
    stages: tuple[StageRow, ...]
    pairs: tuple[PairResult, ...]
    ks: tuple[KSResult, ...]
    samples: tuple[SampleResult, ...]
    bad_samples: tuple[BadSample, ...]
    stage_errors: tuple[StageError, ...]
    settings: dict[str, Any]
    worst_samples: tuple[WorstSample, ...] = ()
    channel_values: dict[str, np.ndarray] = field(default_factory=dict)  # stage -> (C, N) for histograms
    seconds: dict[str, float] = field(default_factory=dict)  # phase -> wall seconds (disjoint: they add up)
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # "parent", "workers" -> CPU seconds
    command: str = field(default="preprocess-audit", init=False)

    def __bool__(self) -> bool:
        return self.verdict == "pass"

    @property
    def audited_samples(self) -> int:
        from gapcheck.preprocess.samples import SKIPPED_INPUT_CODES

        skipped = {str(c) for c in SKIPPED_INPUT_CODES}
        return sum(1 for s in self.samples if s.stages and s.input_issue not in skipped)

    @property
    def headline(self) -> str:
        gaps = [f.code for f in self.findings if f.is_gap]
        return (f"{self.audited_samples}/{len(self.samples)} samples audited through {len(self.stages)} stages, "
                f"{len(gaps)} gap finding(s)" + (f" ({', '.join(sorted(set(gaps)))})" if gaps else "")
                + f", {self._inputs_said()}, {len(self.stage_errors)} stage error(s)")

    def _inputs_said(self) -> str:
        """Bad inputs are the ones not audited (skipped, or no stage ran on them); a grayscale or RGBA photo that went
        through the stages is only worth a note (its warning lists it), so it is not counted as bad."""
        audited = {s.path for s in self.samples if s.stages and any(o.ok for o in s.stages)}
        bad = sum(1 for b in self.bad_samples if b.skipped or b.path not in audited)
        noted = len(self.bad_samples) - bad
        return f"{bad} bad input(s)" + (f" ({noted} unusual one(s) audited, see the warnings)" if noted else "")

    @property
    def summary(self) -> str:
        return self.headline

    @property
    def timings(self) -> Mapping[str, float]:
        return dict(self.seconds)

    def sections(self) -> dict[str, Any]:
        """The command's JSON sections (the envelope adds verdict, headline, findings, timings)."""
        return {
            "settings": self.settings,
            "stages": list(self.stages),
            "pairs": list(self.pairs),
            "ks": list(self.ks),
            "bad_samples": list(self.bad_samples),
            "stage_errors": list(self.stage_errors),
            "samples": list(self.samples),
            "cpu_seconds": dict(self.cpu_seconds),
        }

    def views(self) -> Sequence[Table | Chart]:
        return _all_views(self)

    def checks(self) -> Sequence[Check]:
        return _checks(self)

    def json_payload(self) -> dict[str, Any]:
        """The sections plus verdict, summary and findings (the pre-envelope JSON shape)."""
        return {"verdict": self.verdict.value, "summary": self.summary, "findings": list(self.findings),
                **self.sections()}


def fmt(value: float) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if value in (math.inf, -math.inf):
        return "inf" if value > 0 else "-inf"
    return f"{value:.4g}"


def differs(value: float, reference: float) -> bool:
    """The one rule for "this statistic differs from the reference stage's"."""
    if math.isnan(value) or math.isnan(reference):
        return math.isnan(value) != math.isnan(reference)
    return abs(value - reference) > DIFFERS_REL * max(1.0, abs(reference))


def _cell(text: str, is_different: bool) -> str:
    return text + MARK if is_different else text


def stage_cells(row: StageRow, ref: StageRow, channels: int) -> tuple[tuple[str, ...], bool]:
    """One stage-table row as text, with the differing cells marked; and whether any cell differs."""
    marks = [False, False, row.shapes != ref.shapes, row.dtypes != ref.dtypes,
             differs(row.min, ref.min) or differs(row.max, ref.max)]
    cells = [row.stage + (" (augmented)" if row.augmented else ""), row.description, ", ".join(row.shapes),
             ", ".join(row.dtypes), f"[{fmt(row.min)}, {fmt(row.max)}]"]
    for i in range(channels):
        if i < len(row.channel_mean):
            marks.append(i >= len(ref.channel_mean) or differs(row.channel_mean[i], ref.channel_mean[i])
                         or differs(row.channel_std[i], ref.channel_std[i]))
            cells.append(f"{row.channel_mean[i]:.3f} / {row.channel_std[i]:.3f}")
        else:
            marks.append(i < len(ref.channel_mean))
            cells.append("")
    marks += [row.resize_method != ref.resize_method, bool(row.failed_samples)]
    cells += [row.resize_method, f"{row.ok_samples} ok, {row.failed_samples} failed"]
    return tuple(_cell(c, m) for c, m in zip(cells, marks, strict=True)), any(marks)


def stage_table(result: PreprocessAuditResult) -> Table:
    ref = result.stages[0]
    channels = max((len(r.channel_mean) for r in result.stages), default=0)
    rows, highlight = [], []
    for index, row in enumerate(result.stages):
        cells, any_differs = stage_cells(row, ref, channels)
        rows.append(cells)
        if any_differs and index:
            highlight.append(index)
    columns = ("stage", "description", "shape", "dtype", "range", *(f"c{i} mean / std" for i in range(channels)),
               "resize", "samples")
    return Table("Stages", columns, tuple(rows), tuple(highlight),
                 note=f"{MARK.strip()} marks a cell that differs from the reference stage ({ref.stage}); "
                      f"statistics differ when |Δ| > {DIFFERS_REL:g}·max(1, |reference|)")


def pair_status(pair: PairResult) -> str:
    return pair.note if pair.within_tolerance else "differs" + (f": {pair.note}" if pair.note else "")


def pairs_table(result: PreprocessAuditResult) -> Table:
    rows = tuple((p.label, f"{p.comparable_samples}/{p.compared_samples}", fmt(p.max_abs), fmt(p.min_psnr_db),
                  fmt(p.mean_psnr_db), pair_status(p)) for p in result.pairs)
    failing = tuple(i for i, p in enumerate(result.pairs) if not p.within_tolerance)
    return Table("Stage pairs, per sample", ("pair", "samples", "max |Δ|", "min PSNR dB", "mean PSNR dB", "status"),
                 rows, failing)


def ks_table(result: PreprocessAuditResult) -> Table:
    rows = tuple((f"{k.ref_stage}→{k.cand_stage}", k.channel, f"{k.statistic:.3f}", f"{k.p_value:.3g}",
                  f"{k.mean_difference_sd:.3f}", "yes" if k.flagged else "no") for k in result.ks)
    flagged = tuple(i for i, k in enumerate(result.ks) if k.flagged)
    return Table("Kolmogorov–Smirnov per channel", ("pair", "channel", "D (effect)", "p-value", "mean diff (SD)",
                                                     "flagged"), rows, flagged)


def inputs_table(result: PreprocessAuditResult) -> Table:
    rows = [(b.path, b.code, b.detail) for b in result.bad_samples]
    rows += [(e.sample, f"{STAGE_ERROR} in {e.stage}", e.error) for e in result.stage_errors]
    return Table("Bad inputs and stage errors", ("sample", "what", "detail"), tuple(rows),
                 tuple(range(len(result.bad_samples), len(rows))))


def histograms(result: PreprocessAuditResult) -> list[Chart]:
    """Per channel, the share of values in each of :data:`HISTOGRAM_BINS` bins, one series per stage."""
    charts = []
    values = {stage: v for stage, v in result.channel_values.items() if v.size}
    channels = max((v.shape[0] for v in values.values()), default=0)
    for channel in range(channels):
        planes = {stage: v[channel][np.isfinite(v[channel])] for stage, v in values.items() if channel < v.shape[0]}
        planes = {stage: p for stage, p in planes.items() if p.size}
        if not planes:
            continue
        lo = min(float(p.min()) for p in planes.values())
        hi = max(float(p.max()) for p in planes.values())
        edges = np.linspace(lo, hi if hi > lo else lo + 1.0, HISTOGRAM_BINS + 1)
        centers = (edges[:-1] + edges[1:]) / 2
        series = tuple(Series(stage, tuple(float(c) / p.size for c in np.histogram(p, edges)[0]), style="bar")
                       for stage, p in planes.items())
        charts.append(Chart(f"Channel {channel}: values per stage", kind="bar", x=tuple(f"{c:.3g}" for c in centers),
                            series=series, y_label="share of values"))
    return charts


def _png(image: np.ndarray) -> str:
    """A 0..1 float image (HW or HWC) as base64 PNG, shrunk to at most IMAGE_SIDE per side."""
    from PIL import Image

    pixels = np.clip(np.nan_to_num(image) * 255.0 + 0.5, 0, 255).astype(np.uint8)
    picture = Image.fromarray(pixels)
    picture.thumbnail((IMAGE_SIDE, IMAGE_SIDE))
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


# A dark-to-bright ramp (black, purple, orange, pale yellow): |Δ| = 0 is black, the largest |Δ| is bright.
_RAMP = np.array([[0, 0, 4], [120, 28, 109], [237, 105, 37], [252, 255, 164]], np.float64) / 255.0


def heatmap(diff: np.ndarray) -> np.ndarray:
    """|Δ| per pixel as an RGB picture in 0..1 (scaled by its own maximum)."""
    finite = np.nan_to_num(diff, nan=0.0, posinf=0.0)
    peak = float(finite.max()) if finite.size else 0.0
    t = finite / peak if peak > 0 else np.zeros_like(finite)
    stops = np.linspace(0.0, 1.0, len(_RAMP))
    return np.stack([np.interp(t, stops, _RAMP[:, c]) for c in range(3)], axis=-1)


def worst_sample_chart(worst: WorstSample) -> Chart:
    """One evidence sample: the raw file, both stage outputs (de-normalized for viewing) and the |Δ| map, side by side."""
    images = [] if worst.raw_image is None else [("raw file (as PIL decodes it: no EXIF orientation applied)",
                                                   _png(worst.raw_image))]
    images += [(f"{worst.ref} (reference)", _png(worst.ref_image)), (worst.cand, _png(worst.cand_image))]
    if worst.diff is not None:
        images.append((f"|Δ| per pixel (max {fmt(float(np.nanmax(worst.diff)) if worst.diff.size else 0.0)})",
                       _png(heatmap(worst.diff))))
    which = f"{worst.role} of {worst.differing} differing sample(s) (of {worst.compared})" if worst.differing else "worst"
    note = (worst.display or "each picture is scaled to its own value range")
    note += ("; the |Δ| map is the largest |Δ| over channels, in the reference's units" if worst.diff is not None
             else "; the outputs differ in shape, so there is no |Δ| map")
    return Chart(f"{worst.ref}→{worst.cand}, {which}: {Path(worst.sample).name}, max |Δ| {fmt(worst.max_abs)}, "
                 f"PSNR {fmt(worst.psnr_db)} dB", kind="images", images=tuple(images), note=note)


def steps_table(pair: PairResult) -> Table | None:
    """Both stages' steps side by side (fingerprint and summary of each output), the divergent one highlighted."""
    divergence = pair.first_divergent_step
    if divergence is None or not (divergence.ref_steps or divergence.cand_steps):
        return None
    rows: list[tuple[object, ...]] = []
    highlight: list[int] = []
    for stage, steps in ((pair.ref, divergence.ref_steps), (pair.cand, divergence.cand_steps)):
        for step in steps:
            if stage == pair.cand and step.index == divergence.step_index:
                highlight.append(len(rows))
            rows.append((stage, step.index, step.label, "×".join(map(str, step.shape)), step.dtype, fmt(step.min),
                         fmt(step.max), fmt(step.mean), step.sha256[:12]))
    note = f"on {Path(divergence.sample).name}; first divergent: {pair.cand} step {divergence.step_index}"
    if divergence.opaque:
        note += "; observed only at their boundaries: " + "; ".join(divergence.opaque)
    if divergence.fallback:
        note += "; " + "; ".join(divergence.fallback)
    return Table(f"Steps of {pair.label} ({divergence.method})",
                 ("stage", "step", "what", "shape", "dtype", "min", "max", "mean", "sha256"), tuple(rows),
                 tuple(highlight), note=note)


def _all_views(result: PreprocessAuditResult) -> list[Table | Chart]:
    # Findings are not a view here: every renderer shows the envelope's findings itself.
    views: list[Table | Chart] = [stage_table(result), pairs_table(result)]
    if result.ks:
        views.append(ks_table(result))
    if result.bad_samples or result.stage_errors:
        views.append(inputs_table(result))
    views += [table for table in (steps_table(p) for p in result.pairs) if table is not None]
    views += histograms(result)
    views += [worst_sample_chart(w) for w in result.worst_samples]
    return views


def _failure(findings: Sequence[Finding]) -> str | None:
    gaps = [f for f in findings if f.is_gap]
    return "; ".join(f"{f.code}: {f.message}" for f in gaps) or None


def _details(findings: Sequence[Finding], head: str) -> str:
    lines = [head] + [f"{f.severity.value} {f.code}: {f.message}" for f in findings]
    return "\n".join(lines)


def _checks(result: PreprocessAuditResult) -> list[Check]:
    """JUnit: one case per stage pair, one per stage (errors, NaN, determinism), one for the inputs."""
    by_stage: dict[str, list[Finding]] = {}
    for finding in result.findings:
        if finding.subject.stage is not None:
            by_stage.setdefault(finding.subject.stage, []).append(finding)
    cases = []
    for pair in result.pairs:
        own = by_stage.get(pair.label, [])
        failure = _failure(own)
        if failure is None and not pair.within_tolerance:
            # A pair left undiagnosed because a stage output NaN/inf fails with that stage's finding.
            failure = _failure([f for s in (pair.ref, pair.cand) for f in by_stage.get(s, [])
                                if f.code == str(NONFINITE_OUTPUT)])
        head = (f"max |Δ| {fmt(pair.max_abs)}, min PSNR {fmt(pair.min_psnr_db)} dB over {pair.compared_samples} "
                f"sample(s): {pair_status(pair)}")
        cases.append(Check(pair.label, f"{CLASSNAME}.pairs", failure, _details(own, head)))
    for row in result.stages:
        own = by_stage.get(row.stage, [])
        cases.append(Check(row.stage, f"{CLASSNAME}.stages", _failure(own),
                           _details(own, f"{row.ok_samples} ok, {row.failed_samples} failed")))
    inputs = [f for f in result.findings if f.subject.stage is None]
    cases.append(Check("inputs", f"{CLASSNAME}.inputs", _failure(inputs),
                       _details(inputs, f"{result.audited_samples}/{len(result.samples)} sample(s) audited")))
    return cases

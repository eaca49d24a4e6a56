"""Turn per-sample worker records into the audit's tables and its non-pair findings."""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

from gapcheck.findings import Finding, Severity
from gapcheck.preprocess.diagnoses.geometry import StageProfile
from gapcheck.preprocess.diagnoses.layout import to_chw
from gapcheck.preprocess.distribution import KSResult
from gapcheck.preprocess.result import (BadSample, PairResult, SampleResult, StageError, StageOutcome, StageRow,
                                        WorstSample)
from gapcheck.preprocess.samples import SKIPPED_INPUT_CODES
from gapcheck.preprocess.stages import StageSpec
from gapcheck.preprocess.worker import SampleRecord

if TYPE_CHECKING:
    from gapcheck.preprocess.diagnoses.nondeterminism import DeterminismCheck

LISTED = 20  # samples listed per finding; the count is always complete


def input_findings(records: list[SampleRecord]) -> list[Finding]:
    by_code: dict[str, list[SampleRecord]] = defaultdict(list)
    for record in records:
        if record.issue is not None:
            by_code[record.issue.code].append(record)
    findings = []
    for code, group in sorted(by_code.items()):
        skipped = code in SKIPPED_INPUT_CODES
        what = "skipped (never passed to a stage)" if skipped else "audited, but worth knowing"
        findings.append(Finding(
            code=code, severity=Severity.WARNING, where=group[0].path,
            message=f"{len(group)} sample(s) {code.replace('_', ' ')}: {what}; first: {group[0].path} ({group[0].issue.detail})",
            evidence={"count": len(group), "skipped": skipped,
                      "samples": [{"path": r.path, "detail": r.issue.detail} for r in group[:LISTED]]},
        ))
    return findings


def stage_errors(audited: list[SampleRecord]) -> tuple[StageError, ...]:
    return tuple(StageError(o.stage, r.path, o.error) for r in audited for o in r.stages if not o.ok)


def stage_error_findings(audited: list[SampleRecord]) -> list[Finding]:
    by_stage: dict[str, list[StageError]] = defaultdict(list)
    for error in stage_errors(audited):
        by_stage[error.stage].append(error)
    return [
        Finding(code="stage_error", severity=Severity.GAP, where=f"{stage} @ {errors[0].sample}",
                message=f"stage {stage} raised on {len(errors)} sample(s) the other stages handle; first: {errors[0].error}",
                evidence={"count": len(errors), "errors": [{"sample": e.sample, "error": e.error} for e in errors[:LISTED]]})
        for stage, errors in by_stage.items()
    ]


def determinism_findings(specs: tuple[StageSpec, ...], checks: dict[str, "DeterminismCheck"]) -> list[Finding]:
    findings = []
    for spec in specs:
        check = checks.get(spec.name)
        if check is None or check.deterministic:
            continue
        severity = Severity.INFO if spec.augmented else Severity.GAP
        expected = " (expected: the stage is marked augmented)" if spec.augmented else \
            ": a random augmentation is active outside training"
        findings.append(Finding(
            code="nondeterministic", severity=severity, where=spec.name,
            message=f"{spec.name} gave different outputs for the same sample on {len(check.differing_samples)} of "
                    f"{check.probed_samples} probed sample(s) over {check.runs_per_sample} runs{expected}",
            evidence={"differing_samples": list(check.differing_samples), "probed_samples": check.probed_samples,
                      "runs_per_sample": check.runs_per_sample},
        ))
    return findings


def pooled_channel_values(audited: list[SampleRecord], names: list[str]) -> dict[str, np.ndarray]:
    pooled = {}
    for name in names:
        values = [o.ks_values for r in audited for o in r.stages if o.stage == name and o.ok and o.ks_values is not None]
        channels = Counter(v.shape[0] for v in values).most_common(1)
        if channels:
            pooled[name] = np.concatenate([v for v in values if v.shape[0] == channels[0][0]], axis=1)
    return pooled


def ks_findings(ref: str, cand: str, results: list[KSResult]) -> list[Finding]:
    flagged = [r for r in results if r.flagged]
    if not flagged:
        return []
    worst = max(flagged, key=lambda r: r.statistic)
    return [Finding(
        code="distribution_shift", severity=Severity.WARNING, where=f"{cand} vs {ref}",
        message=f"per-channel value distributions differ on {len(flagged)} channel(s) (worst: channel {worst.channel}, "
                f"KS D={worst.statistic:.3f}, p={worst.p_value:.2g})",
        evidence={"channels": [{"channel": r.channel, "ks_statistic": r.statistic, "p_value": r.p_value,
                                "mean_difference_sd": r.mean_difference_sd} for r in flagged]},
    )]


def _pooled_stats(outcomes: list[Any]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Mean of per-sample channel means; pooled std (within + between samples)."""
    counts = Counter(len(o.summary.channels) for o in outcomes).most_common(1)
    if not counts:
        return (), ()
    same = [o.summary.channels for o in outcomes if len(o.summary.channels) == counts[0][0]]
    means = np.array([[c.mean for c in chans] for chans in same])
    stds = np.array([[c.std for c in chans] for chans in same])
    mean = np.nanmean(means, axis=0)
    var = np.nanmean(stds**2 + means**2, axis=0) - mean**2
    return tuple(float(m) for m in mean), tuple(float(math.sqrt(max(v, 0.0))) for v in var)


def stage_rows(specs: tuple[StageSpec, ...], audited: list[SampleRecord], checks: dict,
               profiles: dict[str, StageProfile | None]) -> tuple[StageRow, ...]:
    rows = []
    for spec in specs:
        outcomes = [o for r in audited for o in r.stages if o.stage == spec.name and o.ok]
        failed = sum(1 for r in audited for o in r.stages if o.stage == spec.name and not o.ok)
        mean, std = _pooled_stats(outcomes)
        if spec.recipe is not None:
            method = spec.recipe.resize_label + " (declared)"
        elif profiles.get(spec.name) is not None:
            method = profiles[spec.name].method_label + " (replayed)"
        else:
            method = "not replayed"
        check = checks.get(spec.name)
        rows.append(StageRow(
            stage=spec.name, description=spec.description, augmented=spec.augmented, ok_samples=len(outcomes),
            failed_samples=failed,
            shapes=tuple(sorted({"x".join(map(str, o.summary.shape)) for o in outcomes})),
            dtypes=tuple(sorted({o.summary.dtype for o in outcomes})),
            layouts=tuple(sorted({o.layout.layout for o in outcomes if o.layout})),
            min=min((o.summary.min for o in outcomes), default=math.nan),
            max=max((o.summary.max for o in outcomes), default=math.nan),
            channel_mean=mean, channel_std=std, resize_method=method,
            deterministic=None if check is None else check.deterministic,
        ))
    return tuple(rows)


def sample_results(records: list[SampleRecord]) -> tuple[SampleResult, ...]:
    results = []
    for r in records:
        s = r.screening
        image = f"{s.image_format} {s.mode} {s.width}x{s.height}".strip() if s.width else ""
        outcomes = tuple(
            StageOutcome(o.stage, True, o.summary.sha256, o.summary.shape, o.summary.dtype,
                         o.layout.layout if o.layout else "", o.summary.min, o.summary.max,
                         tuple(c.mean for c in o.summary.channels), tuple(c.std for c in o.summary.channels))
            if o.ok else StageOutcome(o.stage, False, error=o.error)
            for o in r.stages
        )
        results.append(SampleResult(r.path, r.raw_sha256, r.size_bytes, image, r.issue.code if r.issue else "", outcomes))
    return tuple(results)


def bad_samples(records: list[SampleRecord]) -> tuple[BadSample, ...]:
    return tuple(BadSample(r.path, r.issue.code, r.issue.detail, r.issue.skipped) for r in records if r.issue is not None)


def _display(array: np.ndarray) -> np.ndarray | None:
    chw = to_chw(np.asarray(array))
    if chw is None:
        return None
    lo, hi = float(np.nanmin(chw)), float(np.nanmax(chw))
    scaled = (chw - lo) / (hi - lo) if hi > lo else np.zeros_like(chw)
    image = np.moveaxis(scaled, 0, -1)
    return image[..., 0] if image.shape[-1] == 1 else image[..., :3]


def worst_samples(context: Any, pairs: list[PairResult]) -> tuple[WorstSample, ...]:
    """Re-run the two stages on each failing pair's worst sample, as display images and a |Δ| heatmap."""
    worst = []
    for pair in pairs:
        record = next((r for r in context.audited if r.path == pair.worst_sample), None)
        if record is None:
            continue
        ref, cand = context.output(pair.ref, record), context.output(pair.cand, record)
        if ref is None or cand is None:
            continue
        ref_img, cand_img = _display(ref), _display(cand)
        if ref_img is None or cand_img is None:
            continue
        ref_chw, cand_chw = to_chw(np.asarray(ref)), to_chw(np.asarray(cand))
        diff = np.abs(ref_chw - cand_chw).max(axis=0) if ref_chw.shape == cand_chw.shape else None
        delta = next((d for d in record.deltas if d.a == pair.ref and d.b == pair.cand), None)
        worst.append(WorstSample(pair.ref, pair.cand, record.path, delta.max_abs if delta else math.inf,
                                 delta.psnr_db if delta else -math.inf, ref_img, cand_img, diff))
    return tuple(worst)

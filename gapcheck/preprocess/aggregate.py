"""Turn per-sample worker records into the audit's tables and its non-pair findings."""
from __future__ import annotations

import math
import warnings
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

from gapcheck.codes.preprocess import DISTRIBUTION_SHIFT, NONFINITE_OUTPUT, STAGE_ERROR
from gapcheck.findings import Finding, Subject
from gapcheck.preprocess.diagnoses.nondeterminism import determinism_finding
from gapcheck.preprocess.distribution import KSResult
from gapcheck.preprocess.layout import to_chw
from gapcheck.preprocess.replay import StageProfile
from gapcheck.preprocess.rows import (
    BadSample,
    PairResult,
    SampleResult,
    StageError,
    StageOutcome,
    StageRow,
    WorstSample,
    pair_label,
)
from gapcheck.preprocess.stages import StageSpec
from gapcheck.preprocess.worker import SampleRecord

if TYPE_CHECKING:
    from gapcheck.preprocess.diagnoses.nondeterminism import DeterminismCheck
    from gapcheck.preprocess.pairs import AuditContext

LISTED = 20  # samples listed per finding; the count is always complete


def input_findings(records: list[SampleRecord]) -> list[Finding]:
    """One warning per input code (unreadable, not_image, ...), listing its samples; ``Subject.path`` is the first."""
    by_code: dict[str, list[SampleRecord]] = defaultdict(list)
    for record in records:
        if record.issue is not None:
            by_code[str(record.issue.code)].append(record)
    findings = []
    for code, group in sorted(by_code.items()):
        first = group[0]
        assert first.issue is not None
        skipped = first.issue.skipped  # (a str key is never "in" the tuple of Code objects)
        what = "skipped (never passed to a stage)" if skipped else "audited, but worth knowing"
        findings.append(first.issue.code.finding(
            f"{len(group)} sample(s) {str(code).replace('_', ' ')}: {what}; first: {first.path} ({first.issue.detail})",
            subject=Subject(path=first.path),
            evidence={"count": len(group), "skipped": skipped,
                      "samples": [{"path": r.path, "detail": r.issue.detail if r.issue else ""} for r in group[:LISTED]]},
        ))
    return findings


def stage_errors(audited: list[SampleRecord]) -> tuple[StageError, ...]:
    return tuple(StageError(o.stage, r.path, o.error) for r in audited for o in r.stages if not o.ok)


def stage_error_findings(audited: list[SampleRecord]) -> list[Finding]:
    """One gap per stage that failed on samples the others handle (raised, or killed its worker)."""
    by_stage: dict[str, list[StageError]] = defaultdict(list)
    for error in stage_errors(audited):
        by_stage[error.stage].append(error)
    findings = []
    for stage, errors in by_stage.items():
        died = sum(1 for e in errors if e.error.startswith("worker died"))
        how = "raised" if not died else "killed its worker" if died == len(errors) else "raised or killed its worker"
        findings.append(STAGE_ERROR.finding(
            f"stage {stage} {how} on {len(errors)} sample(s) the other stages handle; first: {errors[0].sample}: "
            f"{errors[0].error}",
            subject=Subject(stage=stage, sample=errors[0].sample),
            evidence={"count": len(errors), "worker_died": died,
                      "errors": [{"sample": e.sample, "error": e.error} for e in errors[:LISTED]]}))
    return findings


def nonfinite_findings(specs: tuple[StageSpec, ...], audited: list[SampleRecord]) -> list[Finding]:
    """One gap per stage whose output holds NaN or inf on some samples (never diagnosed as anything else)."""
    findings = []
    for spec in specs:
        hits = [(r.path, o.summary) for r in audited for o in r.stages
                if o.stage == spec.name and o.ok and o.summary is not None and o.stats.nonfinite]
        if not hits:
            continue
        first_path, first = hits[0]
        total = int(np.prod(first.shape)) if first.shape else 1
        everywhere = first.nonfinite == total
        findings.append(NONFINITE_OUTPUT.finding(
            f"{spec.name} outputs NaN or inf on {len(hits)} sample(s); first: {first_path} "
            f"({'every value' if everywhere else f'{first.nonfinite} of {total} values'} non-finite)",
            subject=Subject(stage=spec.name, sample=first_path),
            evidence={"count": len(hits), "samples": [{"sample": p, "nonfinite_values": s.nonfinite,
                                                       "values": int(np.prod(s.shape)) if s.shape else 1}
                                                      for p, s in hits[:LISTED]]}))
    return findings


def determinism_findings(specs: tuple[StageSpec, ...], checks: dict[str, "DeterminismCheck"]) -> list[Finding]:
    found = (determinism_finding(checks[s.name], s.augmented) for s in specs if s.name in checks)
    return [f for f in found if f is not None]


KS_SEED = 13  # the reservoir's hash seed: the same points are kept on every engine and every run


def point_priorities(paths: list[str], counts: list[int]) -> np.ndarray:
    """A seeded 64-bit priority per (sample, point index): the sample's name hash mixed with the index (splitmix64).

    The same as hashing "sample#point" strings for the reservoir's purpose, without hashing 256 strings per sample.
    """
    from gapcheck.data.sketches import name_priorities

    base = np.repeat(name_priorities(paths, KS_SEED), counts)
    index = np.concatenate([np.arange(n, dtype=np.uint64) for n in counts]) if counts else np.zeros(0, np.uint64)
    with np.errstate(over="ignore"):
        z = base + (index + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def pooled_channel_values(audited: list[SampleRecord], names: list[str]) -> dict[str, np.ndarray]:
    """Per stage, a (C, ≤ 20,000) sample of every audited sample's KS points, for KS and the histograms.

    A :class:`gapcheck.data.sketches.Reservoir` (bottom-k by a seeded hash of (sample, point), as drift
    uses) bounds it whatever the number of samples; the same points are kept for every stage, so the two
    sides of a pair stay paired, and the result does not depend on the order the records arrived in.
    """
    from gapcheck.data.sketches import Reservoir

    pooled = {}
    for name in names:
        values = [(r.path, o.ks_values) for r in audited for o in r.stages
                  if o.stage == name and o.ok and o.ks_values is not None]
        channels = Counter(v.shape[0] for _, v in values).most_common(1)
        if not channels:
            continue
        kept = [(path, v) for path, v in values if v.shape[0] == channels[0][0]]
        stacked = np.concatenate([v for _, v in kept], axis=1)
        priorities = point_priorities([path for path, _ in kept], [v.shape[1] for _, v in kept])
        columns = {str(c): stacked[c] for c in range(stacked.shape[0])}
        columns["position"] = np.arange(stacked.shape[1])
        reservoir = Reservoir(priorities=priorities, columns=columns, seen=len(priorities))._trim()
        order = np.argsort(reservoir.columns["position"], kind="stable")  # back in sample order: float sums repeat
        pooled[name] = np.stack([reservoir.columns[str(c)][order] for c in range(channels[0][0])])
    return pooled


def ks_findings(ref: str, cand: str, results: list[KSResult]) -> list[Finding]:
    flagged = [r for r in results if r.flagged]
    if not flagged:
        return []
    worst = max(flagged, key=lambda r: r.statistic)
    return [DISTRIBUTION_SHIFT.finding(
        f"per-channel value distributions differ on {len(flagged)} channel(s) (worst: channel {worst.channel}, "
        f"KS D={worst.statistic:.3f}, p={worst.p_value:.2g})",
        subject=Subject(stage=pair_label(ref, cand)),
        evidence={"channels": [{"channel": r.channel, "ks_statistic": r.statistic, "p_value": r.p_value,
                                "mean_difference_sd": r.mean_difference_sd} for r in flagged]},
    )]


def _pooled_stats(outcomes: list[Any]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Mean of per-sample channel means; pooled std (within + between samples)."""
    counts = Counter(len(o.stats.channels) for o in outcomes).most_common(1)
    if not counts:
        return (), ()
    same = [o.stats.channels for o in outcomes if len(o.stats.channels) == counts[0][0]]
    means = np.array([[c.mean for c in chans] for chans in same])
    stds = np.array([[c.std for c in chans] for chans in same])
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        # An all-NaN channel (a stage that outputs NaN: its own finding) has no mean; say NaN, quietly.
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(means, axis=0)
        var = np.nanmean(stds**2 + means**2, axis=0) - mean**2
    return tuple(float(m) for m in mean), tuple(float(math.sqrt(v)) if v > 0 else 0.0 if v <= 0 else math.nan
                                                for v in var)


def _replayed_label(profile: StageProfile) -> str:
    """The replayed method; every candidate when the sample cannot separate them (e.g. an exact 2x downscale)."""
    tied = [m for m in profile.equivalent_methods if m != profile.method_label]
    if not tied or not profile.geometry.resizes:
        return profile.method_label + " (replayed)"
    return f"{' ≈ '.join([profile.method_label, *tied])} (replayed; the first sample cannot separate them)"


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
            method = _replayed_label(profiles[spec.name])
        else:
            method = "not replayed"
        check = checks.get(spec.name)
        rows.append(StageRow(
            stage=spec.name, description=spec.description, augmented=spec.augmented, ok_samples=len(outcomes),
            failed_samples=failed,
            shapes=tuple(sorted({"x".join(map(str, o.stats.shape)) for o in outcomes})),
            dtypes=tuple(sorted({o.stats.dtype for o in outcomes})),
            layouts=tuple(sorted({o.layout.layout for o in outcomes if o.layout})),
            min=min((o.stats.min for o in outcomes), default=math.nan),
            max=max((o.stats.max for o in outcomes), default=math.nan),
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
            StageOutcome(o.stage, True, o.stats.sha256, o.stats.shape, o.stats.dtype,
                         o.layout.layout if o.layout else "", o.stats.min, o.stats.max,
                         tuple(c.mean for c in o.stats.channels), tuple(c.std for c in o.stats.channels))
            if o.ok else StageOutcome(o.stage, False, error=o.error)
            for o in r.stages
        )
        results.append(SampleResult(r.path, r.raw_sha256, r.size_bytes, image, str(r.issue.code) if r.issue else "",
                                    outcomes))
    return tuple(results)


def bad_samples(records: list[SampleRecord]) -> tuple[BadSample, ...]:
    return tuple(BadSample(r.path, str(r.issue.code), r.issue.detail, r.issue.skipped)
                 for r in records if r.issue is not None)


def _display(chw: np.ndarray) -> np.ndarray:
    """HWC (or HW) in 0..1 for a picture: each image scaled by its own finite range."""
    finite = chw[np.isfinite(chw)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    scaled = np.nan_to_num((chw - lo) / (hi - lo), nan=0.0, posinf=1.0, neginf=0.0) if hi > lo else np.zeros_like(chw)
    image = np.moveaxis(scaled, 0, -1)
    return image[..., 0] if image.shape[-1] == 1 else image[..., :3]


def _denormalized(chw: np.ndarray, profile: StageProfile | None) -> np.ndarray | None:
    """A stage output back in raw pixel units through a replayed value map (out_c = slope_c·raw + offset_c), as
    HWC/HW in 0..1; the channel order is kept, so a BGR stage shows blue skin. None without a usable map."""
    if profile is None or len(profile.fit.slope) != chw.shape[0] or not np.isfinite(chw).all():
        return None
    slope = np.asarray(profile.fit.slope, np.float64)[:, None, None]
    if np.any(np.abs(slope) < 1e-12):
        return None
    raw_units = (chw - np.asarray(profile.fit.offset, np.float64)[:, None, None]) / slope
    image = np.moveaxis(np.clip(raw_units / 255.0, 0.0, 1.0), 0, -1)
    return image[..., 0] if image.shape[-1] == 1 else image[..., :3]


def _viewable(context: "AuditContext", stages: tuple[str, str], record: SampleRecord, chws: tuple[np.ndarray, np.ndarray]
              ) -> tuple[np.ndarray, np.ndarray, str]:
    """Both outputs as pictures: de-normalized with each stage's replayed value map (or the other stage's when only
    one replays), else each scaled to its own range; and how it was done."""
    profiles = [context.stage_profile(stage, record) for stage in stages]
    shown, how = [], []
    for index, (stage, chw) in enumerate(zip(stages, chws, strict=True)):
        own, other = profiles[index], profiles[1 - index]
        image = _denormalized(chw, own)
        if image is not None:
            how.append(f"{stage}: de-normalized with its replayed value map")
        elif (image := _denormalized(chw, other)) is not None:
            how.append(f"{stage}: de-normalized with {stages[1 - index]}'s value map (its own does not replay)")
        else:
            image = _display(chw)
            how.append(f"{stage}: scaled to its own value range")
        shown.append(image)
    return shown[0], shown[1], "; ".join(how)


def worst_samples(context: "AuditContext", pairs: list[PairResult]) -> tuple[WorstSample, ...]:
    """Each failing pair's evidence samples (worst, then typical) as pictures and the |Δ| per pixel (max over channels)."""
    pictures = []
    for pair, records, differing, compared in context.evidence_records(pairs):
        for role, record in zip(("worst", "typical"), records, strict=False):
            ref, cand = context.output(pair.ref, record), context.output(pair.cand, record)
            ref_chw = to_chw(np.asarray(ref)) if ref is not None else None
            cand_chw = to_chw(np.asarray(cand)) if cand is not None else None
            if ref_chw is None or cand_chw is None:
                continue
            diff = np.abs(ref_chw - cand_chw).max(axis=0) if ref_chw.shape == cand_chw.shape else None
            delta = next((d for d in record.deltas if d.a == pair.ref and d.b == pair.cand), None)
            ref_image, cand_image, how = _viewable(context, (pair.ref, pair.cand), record, (ref_chw, cand_chw))
            raw = context.raw(record.path)
            pictures.append(WorstSample(pair.ref, pair.cand, record.path, delta.max_abs if delta else math.inf,
                                        delta.psnr_db if delta else -math.inf, ref_image, cand_image, diff, role,
                                        differing, compared, raw / 255.0 if raw is not None else None, how))
    return tuple(pictures)

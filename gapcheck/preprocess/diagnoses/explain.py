"""Explain why two stages differ: run every family of hypotheses on the evidence samples and keep
only what replay proves. Whatever is left over is reported as ``unexplained``, with its size."""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from gapcheck.findings import Finding, Severity
from gapcheck.preprocess.diagnoses.channel_order import describe_perm, fit_permuted_affine, is_identity
from gapcheck.preprocess.diagnoses.geometry import StageProfile, replay_psnr
from gapcheck.preprocess.diagnoses.layout import detect_layout, to_chw
from gapcheck.preprocess.diagnoses.value_map import SCALE_FACTORS, ImpliedNormalization, compare_affine

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Evidence:
    """One sample both stages processed: its decoded raw image and the two outputs."""

    sample: str
    raw_rgb: np.ndarray | None
    ref: np.ndarray
    cand: np.ndarray


def _gap(code: str, where: str, message: str, **evidence: object) -> Finding:
    return Finding(code=code, severity=Severity.GAP, message=message, where=where, evidence=dict(evidence))


def _rel_max_abs(a: np.ndarray, b: np.ndarray, value_range: float) -> float:
    return float(np.max(np.abs(a - b))) / value_range if a.size else 0.0


def structural_findings(ref_name: str, cand_name: str, ev: Evidence, where: str) -> list[Finding]:
    """shape (batch dims, sizes), layout and dtype: visible without any replay."""
    findings = []
    ri, ci = detect_layout(ev.ref.shape), detect_layout(ev.cand.shape)
    if ri.batch_dims != ci.batch_dims:
        findings.append(_gap("shape", where, f"{cand_name} has {ci.batch_dims} leading batch dimension(s), "
                             f"{ref_name} has {ri.batch_dims}: shapes {list(ev.cand.shape)} vs {list(ev.ref.shape)}",
                             ref_shape=list(ev.ref.shape), cand_shape=list(ev.cand.shape), sample=ev.sample))
    if ri.layout != ci.layout and "unknown" not in (ri.layout, ci.layout):
        findings.append(_gap("layout", where, f"{cand_name} is {ci.layout}, {ref_name} is {ri.layout}; "
                             f"transposing {cand_name} to {ri.layout} lines the channels up",
                             ref_layout=ri.layout, cand_layout=ci.layout, ref_shape=list(ev.ref.shape),
                             cand_shape=list(ev.cand.shape), sample=ev.sample))
    if ev.ref.dtype != ev.cand.dtype:
        findings.append(_gap("dtype", where, f"{cand_name} outputs {ev.cand.dtype}, {ref_name} outputs {ev.ref.dtype}",
                             ref_dtype=str(ev.ref.dtype), cand_dtype=str(ev.cand.dtype), sample=ev.sample))
    rc, cc = to_chw(ev.ref, ri), to_chw(ev.cand, ci)
    if rc is not None and cc is not None and rc.shape != cc.shape:
        findings.append(_gap("shape", where, f"{cand_name} outputs {cc.shape[0]} channel(s) of {cc.shape[1]}x{cc.shape[2]}, "
                             f"{ref_name} {rc.shape[0]} of {rc.shape[1]}x{rc.shape[2]}",
                             ref_shape=list(ev.ref.shape), cand_shape=list(ev.cand.shape), sample=ev.sample))
    return findings


def diagnose_pair(
    ref_name: str,
    cand_name: str,
    evidence: list[Evidence],
    tolerance: float,
    profile_of: Callable[[str, int], StageProfile | None],
    observed_max_abs: float,
) -> list[Finding]:
    """Findings for a pair that failed the tolerance; ``profile_of(stage, evidence_index)`` replays on raw."""
    where = f"{cand_name} vs {ref_name}"
    if not evidence:
        return [_gap("unexplained", where, f"{cand_name} differs from {ref_name} but no sample has both outputs to diagnose",
                     max_abs=observed_max_abs)]
    first = evidence[0]
    findings = structural_findings(ref_name, cand_name, first, where)
    chw = [(to_chw(e.ref), to_chw(e.cand)) for e in evidence]
    ranges = [float(np.ptp(r)) or 1.0 if r is not None and r.size else 1.0 for r, _ in chw]
    same_shape = all(r is not None and c is not None and r.shape == c.shape for r, c in chw)

    # 1. Structure only: once batch/layout/dtype are undone, are the values the same?
    if same_shape:
        residual = max(_rel_max_abs(r, c, rng) for (r, c), rng in zip(chw, ranges))
        if residual <= tolerance:
            return findings or [_gap("unexplained", where, "outputs differ only below the canonical view", max_abs=observed_max_abs)]

    # 2. Replay on the raw image: each stage's geometry, resize method, channel order and value map.
    profiles = [(profile_of(ref_name, i), profile_of(cand_name, i)) for i in range(len(evidence))]
    both = [(i, p, q) for i, (p, q) in enumerate(profiles) if p is not None and q is not None]
    if both:
        i, pr, pc = both[0]
        findings += _profile_findings(ref_name, cand_name, pr, pc, ranges[i], where, evidence[i])
        proof = _prove(evidence[i], pr, pc, chw[i], ranges[i], tolerance, same_shape)
        if proof is not None and not any(f.code in ("resize", "crop") for f in findings):
            if proof > tolerance:
                findings.append(_gap("unexplained", where, f"after undoing the named causes, {cand_name} still differs from "
                                     f"{ref_name} by {proof:.3g} of the value range", residual_max_abs_rel=proof,
                                     max_abs=observed_max_abs, sample=evidence[i].sample))
            else:
                for f in findings:
                    f.evidence.setdefault("replayed_residual_max_abs_rel", proof)
        value_codes = {"channel_order", "scale", "normalization", "resize", "crop"}
        if not any(f.code in value_codes for f in findings) and not any(f.code == "unexplained" for f in findings):
            findings.append(_gap("unexplained", where, f"{cand_name} differs from {ref_name} (max |Δ| {observed_max_abs:.4g}) "
                                 "but both replay to the same geometry, method, channel order and value map",
                                 max_abs=observed_max_abs, ref_psnr_db=pr.psnr_db, cand_psnr_db=pc.psnr_db))
        return findings

    # 3. No replay possible: a direct permutation + affine fit between the two outputs.
    if same_shape:
        fits = [fit_permuted_affine(c, r) for r, c in chw]
        fit = fits[0]
        worst = max((f.max_abs / rng for f, rng in zip(fits, ranges) if f is not None), default=math.inf)
        if fit is not None and worst <= tolerance:
            findings += _pairwise_value_findings(ref_name, cand_name, fit, where, worst)
            if any(f.code in ("channel_order", "scale", "normalization") for f in findings):
                return findings
    unexplained_size = observed_max_abs
    findings.append(_gap("unexplained", where, f"{cand_name} differs from {ref_name} by max |Δ| {unexplained_size:.4g}; "
                         "no channel order, layout, scale, normalization, resize, crop or dtype hypothesis reproduces it",
                         max_abs=unexplained_size, sample=first.sample))
    return findings


def _profile_findings(ref_name: str, cand_name: str, pr: StageProfile, pc: StageProfile, ref_range: float,
                      where: str, ev: Evidence) -> list[Finding]:
    findings = []
    if (pr.geometry.kind, pr.geometry.shorter_side) != (pc.geometry.kind, pc.geometry.shorter_side):
        findings.append(_gap("crop", where, f"{cand_name} does '{pc.geometry.label}', {ref_name} does '{pr.geometry.label}'",
                             ref_geometry=pr.geometry.label, cand_geometry=pc.geometry.label,
                             cand_replay_psnr_db=pc.psnr_db, ref_replay_psnr_db=pr.psnr_db, sample=ev.sample))
    if pr.geometry.resizes and pc.geometry.resizes and pr.method_label not in pc.equivalent_methods \
            and pc.method_label not in pr.equivalent_methods:
        cand_chw = to_chw(ev.cand)
        with_ref_method = replay_psnr(ev.raw_rgb, cand_chw, pc.geometry, pr.method) if ev.raw_rgb is not None else None
        findings.append(_gap("resize", where, f"{cand_name} resizes with {pc.method_label}, {ref_name} with {pr.method_label}; "
                             f"replaying {pc.method_label} reproduces {cand_name} at {pc.psnr_db:.1f} dB "
                             f"(vs {with_ref_method:.1f} dB with {pr.method_label})",
                             ref_method=pr.method_label, cand_method=pc.method_label,
                             cand_equivalent_methods=list(pc.equivalent_methods),
                             ref_equivalent_methods=list(pr.equivalent_methods),
                             cand_replay_psnr_db=pc.psnr_db, cand_psnr_with_ref_method_db=with_ref_method, sample=ev.sample))
    # Channel order and value maps are per *output position*, as the user's code applies them.
    if pr.fit.perm != pc.fit.perm:
        findings.append(_gap("channel_order", where, f"{cand_name} has channels in {describe_perm(pc.fit.perm)} order, "
                             f"{ref_name} in {describe_perm(pr.fit.perm)}",
                             ref_order=describe_perm(pr.fit.perm), cand_order=describe_perm(pc.fit.perm),
                             ref_permutation=list(pr.fit.perm), cand_permutation=list(pc.fit.perm), sample=ev.sample))
    diff = compare_affine(pr.fit.slope, pr.fit.offset, pc.fit.slope, pc.fit.offset, ref_range)
    ref_norm = ImpliedNormalization.from_affine(pr.fit.slope, pr.fit.offset)
    cand_norm = ImpliedNormalization.from_affine(pc.fit.slope, pc.fit.offset)
    if diff.scale_factor is not None:
        factor = "×255 larger (0–255 input where 0–1 is expected)" if diff.scale_factor < 1 else "255× smaller (0–1 input where 0–255 is expected)"
        findings.append(_gap("scale", where, f"{cand_name}'s values are {factor} than {ref_name}'s",
                             factor_cand_to_ref=diff.scale_factor, ref_slope=list(pr.fit.slope),
                             cand_slope=list(pc.fit.slope), sample=ev.sample))
    if diff.normalization_differs:
        findings.append(_gap("normalization", where, f"{cand_name} normalizes with mean {list(cand_norm.mean)} std "
                             f"{list(cand_norm.std)}, {ref_name} with mean {list(ref_norm.mean)} std {list(ref_norm.std)} "
                             "(implied, for pixels in 0–1)",
                             ref_implied_mean=list(ref_norm.mean), ref_implied_std=list(ref_norm.std),
                             cand_implied_mean=list(cand_norm.mean), cand_implied_std=list(cand_norm.std),
                             slope_mismatch=diff.max_slope_ratio_error, offset_gap_of_range=diff.max_offset_gap,
                             sample=ev.sample))
    return findings


def _prove(ev: Evidence, pr: StageProfile, pc: StageProfile, chw: tuple, ref_range: float, tolerance: float,
           same_shape: bool) -> float | None:
    """Map the candidate onto the reference through both fitted value maps; the residual, relative to range."""
    ref_chw, cand_chw = chw
    if not same_shape or pr.geometry != pc.geometry or ref_chw is None or cand_chw is None:
        return None
    predicted = np.empty_like(ref_chw)
    for c in range(ref_chw.shape[0]):
        q = pc.fit.perm.index(pr.fit.perm[c])
        raw = (cand_chw[q] - pc.fit.offset[q]) / (pc.fit.slope[q] or 1.0)
        predicted[c] = raw * pr.fit.slope[c] + pr.fit.offset[c]
    return _rel_max_abs(predicted, ref_chw, ref_range)


def _pairwise_value_findings(ref_name: str, cand_name: str, fit, where: str, residual: float) -> list[Finding]:
    findings = []
    if not is_identity(fit.perm):
        findings.append(_gap("channel_order", where, f"permuting {cand_name}'s channels as {list(fit.perm)} reproduces "
                             f"{ref_name}", cand_to_ref_permutation=list(fit.perm), residual_max_abs_rel=residual))
    slope = np.asarray(fit.slope)
    factor = next((f for f in SCALE_FACTORS if np.all(np.abs(slope / f - 1.0) < 0.02)), None)
    if factor is not None:
        findings.append(_gap("scale", where, f"{cand_name} × {factor:.6g} reproduces {ref_name}",
                             factor_cand_to_ref=factor, offsets=list(fit.offset), residual_max_abs_rel=residual))
    elif np.any(np.abs(slope - 1.0) > 1e-3) or np.any(np.abs(np.asarray(fit.offset)) > 1e-3):
        implied = ImpliedNormalization(tuple(round(-b / a, 4) for a, b in zip(fit.slope, fit.offset)),
                                       tuple(round(1.0 / a, 4) for a in fit.slope))
        findings.append(_gap("normalization", where, f"(x - mean)/std with mean {list(implied.mean)}, std {list(implied.std)} "
                             f"(in {cand_name}'s units) maps {cand_name} onto {ref_name}",
                             cand_to_ref_mean=list(implied.mean), cand_to_ref_std=list(implied.std),
                             residual_max_abs_rel=residual))
    return findings

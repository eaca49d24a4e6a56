"""Resize: the stages resize with another library, interpolation or antialias setting.

On some images several methods give the same pixels: on an exact 2× downscale, bilinear
without antialias, cv2's INTER_AREA and a box filter all average 2×2 blocks. One such sample
cannot tell them apart, and the best-scoring candidate there is arbitrary. So the candidates
that reproduce a stage are intersected over several samples (the evidence first, then more,
only while they stay ambiguous), the finding's numbers come from the sample that separates the
candidates best, and when no sample separates them every candidate is named and the finding
says so. It also says whether antialias was on.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from gapcheck.codes.preprocess import RESIZE
from gapcheck.findings import Finding
from gapcheck.preprocess.diagnoses.base import ReplayedDiagnosis
from gapcheck.preprocess.imageops import ResizeMethod, candidate_resize_methods
from gapcheck.preprocess.layout import to_chw
from gapcheck.preprocess.replay import EXACT_PSNR_DB, replay_psnr

if TYPE_CHECKING:
    from gapcheck.preprocess.diagnoses.base import Evidence, Pair
    from gapcheck.preprocess.replay import StageProfile

RESIZE_SAMPLES = 6  # samples looked at, at most, to separate candidate methods
_METHODS = {m.label: m for m in candidate_resize_methods()}


def antialiased(method: ResizeMethod) -> bool:
    """Whether a method low-pass filters when it downscales (PIL's filters always do, except nearest)."""
    if method.backend == "pil":
        return method.interpolation != "nearest"
    if method.backend == "cv2":
        return method.interpolation == "area"
    return method.antialias


def _antialias_of(labels: Iterable[str]) -> bool | None:
    """True/False when every candidate agrees, None when they differ."""
    values = {antialiased(_METHODS[label]) for label in labels if label in _METHODS}
    return values.pop() if len(values) == 1 else None


def _describe(labels: list[str]) -> str:
    aa = _antialias_of(labels)
    state = "antialias on" if aa else "no antialias" if aa is False else "antialias differs between the candidates"
    return f"{labels[0]} ({state})" if len(labels) == 1 else f"one of {', '.join(labels)} ({state})"


def _db(psnr: float) -> str:
    return "float-rounding exactness (≥ 120 dB)" if psnr >= EXACT_PSNR_DB else f"{psnr:.1f} dB"


class _Side:
    """The methods that reproduce one stage on every sample looked at so far."""

    def __init__(self) -> None:
        self.common: set[str] | None = None
        self.sets: list[set[str]] = []

    def add(self, labels: Iterable[str]) -> None:
        found = set(labels)
        self.sets.append(found)
        self.common = found if self.common is None else self.common & found

    @property
    def candidates(self) -> list[str]:
        """Sorted candidates: the intersection, or (when samples disagree) the smallest per-sample set."""
        if self.common:
            return sorted(self.common)
        return sorted(min(self.sets, key=lambda found: len(found))) if self.sets else []

    @property
    def separated(self) -> bool:
        return len(self.candidates) == 1


class ResizeDiagnosis(ReplayedDiagnosis):
    code = RESIZE

    def diagnose(self, pair: "Pair") -> Finding | None:
        ref, cand = _Side(), _Side()
        looked: list[tuple["Evidence", "StageProfile", "StageProfile"]] = []
        for ev, pr, pc in pair.profiled(RESIZE_SAMPLES):
            if not (pr.geometry.resizes and pc.geometry.resizes):
                continue
            ref.add(pr.equivalent_methods)
            cand.add(pc.equivalent_methods)
            looked.append((ev, pr, pc))
            if len(looked) >= len(pair.evidence) and ref.separated and cand.separated:
                break
        if not looked or set(ref.candidates) & set(cand.candidates):
            return None  # the same method can explain both stages
        # The numbers come from the sample where the candidate's method is least ambiguous.
        ev, pr, pc = min(looked, key=lambda item: (len(item[2].equivalent_methods), -item[2].psnr_db))
        cand_method = pc.method_label if pc.method_label in cand.candidates else cand.candidates[0]
        ref_method = pr.method_label if pr.method_label in ref.candidates else ref.candidates[0]
        cand_chw = to_chw(ev.cand)
        raw = pc.source if pc.source is not None else ev.raw_rgb  # the picture the candidate was replayed on
        with_ref = replay_psnr(raw, cand_chw, pc.geometry, _METHODS.get(ref_method)) \
            if raw is not None and cand_chw is not None else None
        ambiguous = [e.sample for e, _, p in looked if len(p.equivalent_methods) > 1]
        cand_aa, ref_aa = _antialias_of(cand.candidates), _antialias_of(ref.candidates)
        aa_differs = cand_aa is not None and ref_aa is not None and cand_aa != ref_aa
        message = ((f"antialiasing differs: {pair.cand} {'low-pass filters' if cand_aa else 'does not low-pass filter'} "
                    f"when it downscales, {pair.ref} {'does' if ref_aa else 'does not'}; " if aa_differs else "")
                   + f"{pair.cand} resizes with {_describe(cand.candidates)}, {pair.ref} with {_describe(ref.candidates)}; "
                   f"replaying {cand_method} reproduces {pair.cand} at {_db(pc.psnr_db)}"
                   + (f" (vs {_db(with_ref)} with {ref_method})" if with_ref is not None else ""))
        if not cand.separated:
            message += (f"; the {len(looked)} sample(s) looked at cannot separate {', '.join(cand.candidates)} "
                        "(they give the same pixels there, e.g. on an exact 2× downscale)")
        return pair.finding(
            self.code, message, sample=ev.sample, ref_method=ref_method if ref.separated else None,
            cand_method=cand_method if cand.separated else None,
            cand_antialias=cand_aa, ref_antialias=ref_aa, antialias_differs=aa_differs,
            cand_candidates=cand.candidates, ref_candidates=ref.candidates, separated=cand.separated and ref.separated,
            samples_examined=len(looked), ambiguous_samples=ambiguous, cand_replay_psnr_db=pc.psnr_db,
            cand_psnr_with_ref_method_db=with_ref)

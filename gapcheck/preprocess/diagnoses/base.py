"""The one contract every root-cause diagnosis implements, and the pair of stages it looks at.

A :class:`Pair` is a reference stage and a candidate stage on the same raw samples. Whatever
a diagnosis may need is computed lazily and at most once per pair: the canonical CHW views,
value ranges, whether the values already agree once batch/layout/dtype are undone, each
stage's replayed profile (geometry, resize method, channel order, value map) per sample, and a
direct permutation + affine fit between the two outputs when replay is impossible.

A :class:`Diagnosis` is small: ``code`` (the registered code it emits), ``reads_values`` (False
for structural checks that still make sense on NaN outputs), ``applies(pair)`` and
``diagnose(pair) -> Finding | None``; it owns its wording and evidence. The list that is
iterated lives in :mod:`gapcheck.preprocess.diagnoses.catalog`: a new root cause is one new
module and one entry there.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from gapcheck.findings import Finding, Severity, Subject
from gapcheck.preprocess.affine import AffineFit, fit_permuted_affine
from gapcheck.preprocess.layout import channel_count, colour_apart, detect_layout, to_chw
from gapcheck.preprocess.luminance import LumaMatch, luminance_match
from gapcheck.preprocess.rows import pair_label

if TYPE_CHECKING:
    from gapcheck.codes import Code
    from gapcheck.preprocess.diagnoses.value_map import ValueDifference
    from gapcheck.preprocess.replay import StageProfile
    from gapcheck.preprocess.stages import StageSpec


@dataclass(frozen=True)
class Evidence:
    """One sample on which both stages ran and differ: its decoded raw image (None when it cannot be replayed),
    the two outputs, and the raw bytes (any kind of sample) with what its header says (image files only)."""

    sample: str
    raw_rgb: np.ndarray | None
    ref: np.ndarray
    cand: np.ndarray
    data: bytes | None = None
    orientation: int = 0  # EXIF orientation tag of an image file (0: none)


@dataclass(frozen=True)
class GrayLuminance:
    """Whether a grayscale output is a standard luminance of the colour one on the evidence samples: ``match`` (the
    worst sample's fit) when every compared sample is one, None when one is not; ``compared``: samples of equal size."""

    match: LumaMatch | None
    compared: int
    gray_is_cand: bool


@dataclass(frozen=True)
class Population:
    """The samples a pair was compared on: those that differ (most first), how many were compared, their EXIF tags."""

    differing: tuple[str, ...] = ()
    compared: int = 0
    orientations: dict[str, int] = field(default_factory=dict)


class Diagnosis(Protocol):
    """One root-cause family (see the module docstring)."""

    code: "Code"
    reads_values: bool

    def applies(self, pair: "Pair") -> bool: ...

    def diagnose(self, pair: "Pair") -> Finding | None: ...


class FirstSampleDiagnosis:
    """A structural check read from the first evidence sample's shapes and dtypes (so it holds on NaN outputs too):
    subclasses set ``code`` and implement :meth:`on_first`."""

    code: "Code"
    reads_values = False

    def applies(self, pair: "Pair") -> bool:
        return pair.first is not None

    def diagnose(self, pair: "Pair") -> Finding | None:
        assert pair.first is not None
        return self.on_first(pair, pair.first)

    def on_first(self, pair: "Pair", ev: Evidence) -> Finding | None:
        raise NotImplementedError


class ReplayedDiagnosis:
    """A value check that compares what replay found for each stage on the same raw sample."""

    code: "Code"
    reads_values = True

    def applies(self, pair: "Pair") -> bool:
        return pair.values_differ and pair.replay is not None and not pair.gray_of_colour


class ValueMapDiagnosis:
    """A value check on the stages' value maps: replayed when replay worked, else the direct candidate→reference
    fit."""

    code: "Code"
    reads_values = True

    def applies(self, pair: "Pair") -> bool:
        return pair.values_differ and (pair.replay is not None or pair.direct_fit is not None)


def first_found(evidence: list[Evidence], look: Callable[[Evidence], Finding | None]) -> Finding | None:
    """The first finding ``look`` makes on the evidence samples, in their order (worst first)."""
    for ev in evidence:
        found = look(ev)
        if found is not None:
            return found
    return None


def rel_max_abs(a: np.ndarray, b: np.ndarray, value_range: float) -> float:
    return float(np.max(np.abs(a - b))) / value_range if a.size else 0.0


def _finite(array: np.ndarray) -> bool:
    return not np.issubdtype(array.dtype, np.inexact) or bool(np.isfinite(array).all())


# (stage name, sample, that stage's output on it) -> the stage's replayed profile, cached by the caller
ProfileFn = Callable[[str, Evidence, np.ndarray], "StageProfile | None"]
MoreFn = Callable[[], Iterator[Evidence]]
CallableFn = Callable[[str], Callable[..., Any]]  # stage name -> its callable (loaded once by the caller)


class Pair:
    """Two stages on the same samples; a working context for one diagnosis run (see the module docstring).

    ``evidence`` are samples on which the stages differ (the worst first, then a typical one); ``more()``
    yields further differing samples, loaded lazily, for a diagnosis that needs more samples to decide
    (resize); ``population`` says how many samples differ of how many were compared. ``found`` collects
    the findings of the diagnoses that ran before (the catch-all reads it).
    """

    def __init__(self, ref: str, cand: str, evidence: list[Evidence], *, tolerance: float, observed_max_abs: float,
                 profile_of: ProfileFn, more: MoreFn | None = None, specs: "dict[str, StageSpec] | None" = None,
                 callable_of: CallableFn | None = None, population: Population | None = None) -> None:
        self.ref, self.cand = ref, cand
        self.evidence = evidence
        self.tolerance = tolerance
        self.observed_max_abs = observed_max_abs
        self._profile_of = profile_of
        self._more = more
        self._specs = specs or {}
        self._callable_of = callable_of
        self.population = population or Population(tuple(e.sample for e in evidence), len(evidence))
        self.found: list[Finding] = []
        self.memo: dict[str, Any] = {}  # what a step locator computed once for this pair (the stages' traces)

    # --- naming ------------------------------------------------------------------------------------
    @property
    def label(self) -> str:
        return pair_label(self.ref, self.cand)

    def finding(self, code: "Code", message: str, sample: str | None = None, severity: Severity | None = None,
                **evidence: Any) -> Finding:
        """A finding about this pair (``Subject.stage`` is the pair, ``sample`` the evidence sample); ``severity``
        overrides the code's where its weight depends on the size of the effect."""
        return code.finding(message, subject=Subject(stage=self.label, sample=sample), evidence=evidence,
                            severity=severity)

    def spec(self, stage: str) -> "StageSpec | None":
        """How ``stage`` is defined (None when the caller did not say)."""
        return self._specs.get(stage)

    def callable_of(self, stage: str) -> Callable[..., Any]:
        if self._callable_of is None:
            raise LookupError(f"no callable was given for stage {stage!r}")
        return self._callable_of(stage)

    def has(self, *codes: "Code") -> bool:
        names = {str(c) for c in codes}
        return any(f.code in names for f in self.found)

    # --- values ------------------------------------------------------------------------------------
    @property
    def first(self) -> Evidence | None:
        return self.evidence[0] if self.evidence else None

    @cached_property
    def chw(self) -> list[tuple[np.ndarray | None, np.ndarray | None]]:
        return [(to_chw(e.ref), to_chw(e.cand)) for e in self.evidence]

    @cached_property
    def colour_apart(self) -> bool:
        """One stage outputs grayscale (one channel), the other colour (3 or 4), on the first evidence sample: the
        conversion is the cause (``shape`` says it); layout and channel order have nothing to compare on a lone plane."""
        first = self.first
        return first is not None and colour_apart(detect_layout(first.ref.shape), detect_layout(first.cand.shape))

    @cached_property
    def gray_luminance(self) -> GrayLuminance | None:
        """For a grayscale-against-colour pair, whether the grayscale values are a luminance of the colour ones (then
        the geometry and the reading of the file are the same: a luminance is computed pixel by pixel)."""
        if not self.colour_apart:
            return None
        assert self.first is not None
        gray_is_cand = channel_count(detect_layout(self.first.cand.shape)) == 1
        worst: LumaMatch | None = None
        compared = 0
        for rc, cc in self.chw:
            gray, colour = (cc, rc) if gray_is_cand else (rc, cc)
            if gray is None or colour is None or gray.shape[1:] != colour.shape[1:] \
                    or not (np.isfinite(gray).all() and np.isfinite(colour).all()):
                continue  # another size (a resize or crop difference, named apart) or NaN: nothing to weigh
            compared += 1
            match = luminance_match(gray[0], colour)
            if match is None:
                return GrayLuminance(None, compared, gray_is_cand)
            worst = match if worst is None or match.max_abs_rel > worst.max_abs_rel else worst
        return GrayLuminance(worst, compared, gray_is_cand)

    @property
    def gray_of_colour(self) -> bool:
        """The grayscale output is a luminance of the colour one (up to a value map): no resize, crop or reading of
        the file differs, whatever replaying the grayscale stage on the file's own grayscale suggests."""
        return self.gray_luminance is not None and self.gray_luminance.match is not None

    @cached_property
    def ranges(self) -> list[float]:
        return [float(np.ptp(r)) or 1.0 if r is not None and r.size else 1.0 for r, _ in self.chw]

    @cached_property
    def same_shape(self) -> bool:
        return bool(self.chw) and all(r is not None and c is not None and r.shape == c.shape for r, c in self.chw)

    @cached_property
    def finite(self) -> bool:
        """Every evidence output is finite (value diagnoses replay nothing on NaN or inf)."""
        return all(_finite(e.ref) and _finite(e.cand) for e in self.evidence)

    @cached_property
    def structure_only(self) -> bool:
        """Once batch dims, layout and dtype are undone, the values agree within tolerance."""
        if not self.same_shape or not self.finite:
            return False
        residual = max(rel_max_abs(r, c, rng) for (r, c), rng in zip(self.chw, self.ranges, strict=True))
        return residual <= self.tolerance

    # --- replay ------------------------------------------------------------------------------------
    def profiles(self, evidence: Evidence) -> tuple["StageProfile | None", "StageProfile | None"]:
        return self._profile_of(self.ref, evidence, evidence.ref), self._profile_of(self.cand, evidence, evidence.cand)

    @cached_property
    def replayed_values(self) -> "ValueDifference | None":
        """How the two replayed value maps differ (:func:`compare_affine`), on the replayed sample; None without
        replay. Shared by the normalization and scale diagnoses, computed once."""
        if self.replay is None:
            return None
        from gapcheck.preprocess.diagnoses.value_map import compare_affine

        index, pr, pc = self.replay
        return compare_affine(pr.fit.slope, pr.fit.offset, pc.fit.slope, pc.fit.offset, self.ranges[index])

    @cached_property
    def replay(self) -> tuple[int, "StageProfile", "StageProfile"] | None:
        """(evidence index, reference profile, candidate profile) of the first sample both stages replay on."""
        for index, ev in enumerate(self.evidence):
            pr, pc = self.profiles(ev)
            if pr is not None and pc is not None:
                return index, pr, pc
        return None

    def profiled(self, limit: int) -> Iterator[tuple[Evidence, "StageProfile", "StageProfile"]]:
        """Samples with both profiles among the first ``limit`` looked at: the evidence, then more (loaded lazily)."""
        samples = itertools.chain(self.evidence, self._more() if self._more is not None else ())
        for ev in itertools.islice(samples, limit):
            pr, pc = self.profiles(ev)
            if pr is not None and pc is not None:
                yield ev, pr, pc

    @cached_property
    def replay_residual(self) -> float | None:
        """Map the candidate onto the reference through both fitted value maps; the residual, relative to range.

        None when it cannot be computed (no replay, different shapes or geometries).
        """
        if self.replay is None or not self.same_shape or not self.finite:
            return None
        index, pr, pc = self.replay
        ref_chw, cand_chw = self.chw[index]
        if pr.geometry != pc.geometry or ref_chw is None or cand_chw is None:
            return None
        predicted = np.empty_like(ref_chw)
        for c in range(ref_chw.shape[0]):
            q = pc.fit.perm.index(pr.fit.perm[c])
            raw = (cand_chw[q] - pc.fit.offset[q]) / (pc.fit.slope[q] or 1.0)
            predicted[c] = raw * pr.fit.slope[c] + pr.fit.offset[c]
        return rel_max_abs(predicted, ref_chw, self.ranges[index])

    @cached_property
    def direct_fit(self) -> tuple[AffineFit, float] | None:
        """Without replay: the permutation + affine map from candidate to reference, when it explains every sample."""
        if self.replay is not None or not self.same_shape or not self.finite:
            return None
        fits = [fit_permuted_affine(c, r) for r, c in self.chw]
        worst = max((f.max_abs / rng if f is not None else np.inf for f, rng in zip(fits, self.ranges, strict=True)),
                    default=np.inf)
        return (fits[0], float(worst)) if fits and fits[0] is not None and worst <= self.tolerance else None

    @property
    def values_differ(self) -> bool:
        """A value diagnosis has something to explain: finite values that still differ after the canonical view."""
        return bool(self.evidence) and self.finite and not self.structure_only

"""Which step, when a stage is a callable: trace both stages on the sample that shows the difference.

A callable stage has no declared steps, so both stages of a failing pair are split into steps by
:func:`gapcheck.preprocess.traced.trace_stage` (composed items, torch.fx nodes, or torch calls
recorded at runtime with the decode part stated as opaque); a declared step list contributes its
own steps. The two step lists rarely line up one for one (a callable permutes and converts where
a recipe does not), so they are aligned by *what they produce*: each output in its canonical
(C, H, W) float view, compared within the audit's tolerance of the reference step's value range.
The candidate's steps are walked in order, each matched to the earliest later reference step with
the same values; the first divergent step is the candidate step after the last match, named
against the reference step after it. Layout and dtype conversions compare equal in that view, so
they never absorb the divergence (the layout and dtype diagnoses name those). When the candidate's
step covers several reference steps out of sight (PIL/OpenCV before its first torch call, a stage
in numpy), the pair's diagnosed cause names the reference step among them (:func:`_by_cause`).

The stages run again here, in the auditing process, on one sample (as the other diagnoses'
re-runs do). What a trace keeps is capped (``traced.MAX_TRACED_STEPS`` / ``MAX_TRACED_BYTES``); a
truncated trace's note joins the opaque parts, and a divergence that would lie past the recorded
steps of a truncated trace is not named (the recorded steps all agree there; nothing is known after).
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from gapcheck.codes.preprocess import (
    ALPHA_COMPOSITE,
    CHANNEL_ORDER,
    CROP,
    NORMALIZATION,
    ORIENTATION,
    PALETTE_INDICES,
    RESIZE,
    SCALE,
    SIZE_ROUNDING,
)
from gapcheck.errors import one_line
from gapcheck.preprocess.diagnoses.base import rel_max_abs
from gapcheck.preprocess.diagnoses.steps import StepDivergence, StepSummary, summarize
from gapcheck.preprocess.layout import to_chw
from gapcheck.preprocess.samples import local_path, read_regular_file
from gapcheck.preprocess.traced import StageTrace, TracedStep, trace_stage, unrecorded_label

if TYPE_CHECKING:
    from gapcheck.preprocess.diagnoses.base import Evidence, Pair

logger = logging.getLogger(__name__)

SMALL_STEP_VALUES = 64  # a step with fewer values than this (and than the stage's output) is not on the image
# What a diagnosed cause's step is called (lower-case parts of step labels: declared ops, torchvision and timm
# transforms, torch calls, the runtime boundary), in the order preferred.
_DECODE_WORDS = ("decode", "load", "open", "imread", "color", "boundary")
CAUSE_STEP_WORDS: dict[str, tuple[str, ...]] = {
    **{str(code): _DECODE_WORDS for code in (CHANNEL_ORDER, ORIENTATION, ALPHA_COMPOSITE, PALETTE_INDICES)},
    **{str(code): ("resize", "interpolate") for code in (RESIZE, SIZE_ROUNDING)},
    str(CROP): ("resize", "interpolate", "crop"),
    str(SCALE): ("scale", "totensor", "todtype", "to_dtype", "div", "mul"),
    str(NORMALIZATION): ("normalize", "sub", "div"),
}


def _canonical(output: np.ndarray) -> np.ndarray:
    chw = to_chw(output) if output.ndim >= 2 else None
    return chw if chw is not None else output.astype(np.float64)


def _agree(cand: np.ndarray, ref: np.ndarray, tolerance: float) -> bool:
    if cand.shape != ref.shape:
        return False
    if not ref.size:
        return True
    value_range = float(np.ptp(ref)) or 1.0
    with np.errstate(invalid="ignore", over="ignore"):
        return rel_max_abs(cand, ref, value_range) <= tolerance


def _distinct(trace: StageTrace, tolerance: float) -> list[tuple[TracedStep, np.ndarray]]:
    """The steps that change the canonical values (copies, permutes, dtype casts fold into the step before), on the
    image: a step with a handful of values (a mean, a flag) when the stage's output has many is no anchor, since
    two stages agree on such constants whatever they do to the image."""
    kept: list[tuple[TracedStep, np.ndarray]] = []
    small = min(SMALL_STEP_VALUES, trace.steps[-1].output.size) if trace.steps else 0
    for step in trace.steps:
        if step.output.size < small:
            continue
        view = _canonical(step.output)
        if kept and _agree(view, kept[-1][1], tolerance * 1e-3):
            continue
        kept.append((step, view))
    return kept


def _by_cause(ref_steps: list[tuple[TracedStep, np.ndarray]], start: int, cand_view: np.ndarray,
              causes: tuple[str, ...]) -> tuple[TracedStep, np.ndarray] | None:
    """The reference step that a diagnosed cause names, among the steps the candidate's next step spans (also used
    with the stages' roles swapped: the candidate's step among those the reference's next step spans).

    When the candidate's next step has another shape than the reference's next one, the candidate did several
    reference steps at once, out of sight (PIL/OpenCV before its first torch call, or its whole body): from
    ``start`` up to the last reference step of the candidate's shape. Which of those differs cannot be seen by
    value; the pair's diagnosed cause says (a resize finding names the resize step, a channel order the decode).
    None when the shapes agree or no cause names a step there."""
    if start >= len(ref_steps) or ref_steps[start][1].shape == cand_view.shape:
        return None
    same = [k for k in range(start, len(ref_steps)) if ref_steps[k][1].shape == cand_view.shape]
    span = ref_steps[start:(same[-1] + 1 if same else len(ref_steps))]
    for cause in causes:
        words = CAUSE_STEP_WORDS.get(cause, ())
        found = next((step for step in span if any(w in step[0].label.lower() for w in words)), None)
        if found is not None:
            return found
    return None


def align(ref: StageTrace, cand: StageTrace, tolerance: float, causes: tuple[str, ...] = ()
          ) -> tuple[TracedStep | None, TracedStep | None, float | None] | None:
    """(candidate step, reference step, max |Δ| there) at the first divergence; None when the stages agree.

    A None step means that stage ended there ("(end)"). ``causes``: the pair's finding codes, in the order
    diagnosed, to name the reference step inside a part of the candidate that is observed only at its end
    (:func:`_by_cause`).
    """
    ref_steps, cand_steps = _distinct(ref, tolerance), _distinct(cand, tolerance)
    matched, last = -1, -1  # the reference and candidate positions of the last agreement
    for i, (_, view) in enumerate(cand_steps):
        k = next((k for k in range(matched + 1, len(ref_steps)) if _agree(view, ref_steps[k][1], tolerance)), None)
        if k is not None:
            matched, last = k, i
    if last == len(cand_steps) - 1 and matched == len(ref_steps) - 1:
        return None
    cand_next = cand_steps[last + 1] if last + 1 < len(cand_steps) else None
    ref_next = ref_steps[matched + 1] if matched + 1 < len(ref_steps) else None
    if cand_next is not None and ref_next is not None:
        # Either side may be the one whose next step covers several of the other's out of sight: a reference that
        # resizes in PIL before its first torch call against a candidate that interpolates a tensor (the
        # candidate's resize step is then named), or the other way round.
        ref_seen = ref_next
        ref_next = _by_cause(ref_steps, matched + 1, cand_next[1], causes) or ref_next
        cand_next = _by_cause(cand_steps, last + 1, ref_seen[1], causes) or cand_next
    if cand_next is None and cand.truncated:
        return None  # the candidate did not end there: it stopped being recorded (memory cap); the rest is unknown
    unrecorded = ref_next is None and ref.truncated
    if unrecorded:
        # the reference's recorded steps no longer change the values, the candidate's step does: a divergence when
        # it lies within the reference's recorded depth; past it, the reference's unrecorded steps might match
        if cand_next is None or cand_next[0].index > len(ref.steps):
            return None
        ref_next = (TracedStep(len(ref.steps) + 1, unrecorded_label(ref), np.empty(0)), np.empty(0))
    max_abs = None
    # a difference only between values of one kind: uint8 pixels against a normalized float output is no size
    if cand_next is not None and ref_next is not None and not unrecorded and cand_next[1].shape == ref_next[1].shape \
            and cand_next[0].output.dtype == ref_next[0].output.dtype:
        with np.errstate(invalid="ignore", over="ignore"):
            max_abs = float(np.max(np.abs(cand_next[1] - ref_next[1]))) if cand_next[1].size else 0.0
    return (cand_next[0] if cand_next else None, ref_next[0] if ref_next else None, max_abs)


def _showing_difference(pair: "Pair") -> "Evidence":
    """The first evidence sample on which the two outputs differ beyond tolerance (the first one otherwise)."""
    for (ref, cand), value_range, ev in zip(pair.chw, pair.ranges, pair.evidence, strict=True):
        if ref is None or cand is None or ref.shape != cand.shape or rel_max_abs(ref, cand, value_range) > pair.tolerance:
            return ev
    return pair.evidence[0]


class TracedSteps:
    """At least one stage of the pair is a callable: trace both and align their steps by value."""

    names_by_cause = True  # parts observed only at their end: the step of each finding's cause is named in them

    def applies(self, pair: "Pair") -> bool:
        ref, cand = pair.spec(pair.ref), pair.spec(pair.cand)
        return bool(pair.evidence) and ref is not None and cand is not None \
            and (ref.recipe is None or cand.recipe is None)

    def trace(self, pair: "Pair", stage: str, sample: str) -> StageTrace:
        spec = pair.spec(stage)
        assert spec is not None
        data = read_regular_file(sample)
        if spec.recipe is not None:
            steps = spec.recipe.trace_orders(data)  # aligned on the RGB-ordered view, summarized as produced
            return StageTrace(tuple(TracedStep(i + 1, step.label, shown) for i, (step, _, shown, _) in enumerate(steps)),
                              "steps", produced=tuple(out for _, out, _, _ in steps))
        fn = pair.callable_of(stage)
        if spec.accepts == "bytes":
            return trace_stage(fn, data)
        with local_path(sample, data) as path:
            return trace_stage(fn, path)

    def traces(self, pair: "Pair") -> tuple[str, StageTrace, StageTrace] | None:
        """Both stages traced on the sample that shows the difference, once per pair (kept in ``pair.memo``)."""
        if "traces" not in pair.memo:
            sample = _showing_difference(pair).sample
            try:
                pair.memo["traces"] = (sample, self.trace(pair, pair.ref, sample), self.trace(pair, pair.cand, sample))
            except Exception as exc:  # noqa: BLE001 - the stage worked in a worker; no step is named, the finding stays
                logger.warning("could not trace the steps of %s on %s: %s", pair.label, sample, one_line(exc))
                pair.memo["traces"] = None
        return pair.memo["traces"]

    def locate(self, pair: "Pair", first_cause: str | None = None) -> StepDivergence | None:
        """The first divergent step; ``first_cause`` (a finding's code) is tried first to name a step inside a part
        observed only at its end (else the pair's causes in the order diagnosed)."""
        traced = self.traces(pair)
        if traced is None:
            return None
        sample, ref, cand = traced
        causes = tuple(str(f.code) for f in pair.found)
        if first_cause is not None:
            causes = (first_cause, *(c for c in causes if c != first_cause))
        found = align(ref, cand, pair.tolerance, causes)
        if found is None:
            capped = [name for name, trace in ((pair.ref, ref), (pair.cand, cand)) if trace.truncated]
            if capped:
                logger.warning("no divergent step named for %s: it lies past the recorded steps of %s (over the "
                               "memory cap)", pair.label, " and ".join(capped))
            return None
        cand_step, ref_step, max_abs = found
        opaque = tuple(f"{name}: {part}" for name, trace in ((pair.ref, ref), (pair.cand, cand)) for part in trace.opaque)
        fallback = tuple(f"{name}: {trace.reason}" for name, trace in ((pair.ref, ref), (pair.cand, cand)) if trace.reason)
        return StepDivergence(
            cand_step.index if cand_step is not None else len(cand.steps) + 1,
            ref_step.label if ref_step is not None else "(end)",
            cand_step.label if cand_step is not None else "(end)",
            sample, method=f"{ref.method}/{cand.method}", max_abs=max_abs, opaque=opaque, fallback=fallback,
            ref_steps=_summaries(ref), cand_steps=_summaries(cand))


def _summaries(trace: StageTrace) -> tuple[StepSummary, ...]:
    """Every step summarized as it was produced (a step list's BGR image keeps its own SHA256, not its RGB view's)."""
    outputs = trace.produced or tuple(step.output for step in trace.steps)
    return tuple(summarize(step.index, step.label, output) for step, output in zip(trace.steps, outputs, strict=True))

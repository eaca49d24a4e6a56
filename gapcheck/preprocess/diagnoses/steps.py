"""Which step: the first step at which two stages stop producing the same values.

A *step locator* follows the small contract :class:`StepLocator` (``applies(pair)``,
``locate(pair) -> StepDivergence | None``); :data:`~gapcheck.preprocess.diagnoses.catalog.STEP_LOCATORS`
lists them and the first that applies annotates the pair's findings with the step.
:class:`RecipeSteps` handles two declared step lists; ``traced_steps.TracedSteps`` handles
callables. Both summarize every step's output the same way (:class:`StepSummary`).

For two step lists, steps that leave the (RGB-ordered) image unchanged, such as the colour
conversion after a cv2 decode, are skipped before aligning, so the lists line up by what they do.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from gapcheck.preprocess.recipe import Recipe, Step
from gapcheck.preprocess.rows import StepDivergence, StepSummary
from gapcheck.tensors import fingerprint

if TYPE_CHECKING:
    from gapcheck.preprocess.diagnoses.base import Pair


class StepLocator(Protocol):
    """Finds the first divergent step of a failing pair (see the module docstring)."""

    names_by_cause: bool  # True: a step inside an opaque part is named by a cause, so each finding may get its own

    def applies(self, pair: "Pair") -> bool: ...

    def locate(self, pair: "Pair", first_cause: str | None = None) -> StepDivergence | None:
        """``first_cause``: a finding's code, tried first where a cause names the step (``names_by_cause``)."""
        ...


def _number(value: Any) -> float:
    value = float(value)
    return value if math.isfinite(value) else float("nan")


def summarize(index: int, label: str, output: np.ndarray) -> StepSummary:
    low = high = mean = float("nan")
    if output.size and np.issubdtype(output.dtype, np.number) and not np.issubdtype(output.dtype, np.complexfloating):
        values = output.astype(np.float64)
        if not np.isnan(values).all():
            low, high, mean = _number(np.nanmin(values)), _number(np.nanmax(values)), _number(np.nanmean(values))
    return StepSummary(index, label, fingerprint(output), tuple(int(d) for d in output.shape), str(output.dtype),
                       low, high, mean)


@dataclass(frozen=True)
class _Kept:
    """A step that changes the RGB-ordered image: its 1-based index, step, the view's fingerprint, its channel order."""

    index: int
    step: Step
    digest: str
    color: str


def _effective(trace: list[tuple[Step, np.ndarray, np.ndarray, str]]) -> list[_Kept]:
    kept: list[_Kept] = []
    previous = None
    for index, (step, _, shown, color) in enumerate(trace):
        digest = fingerprint(shown)
        if digest != previous:
            kept.append(_Kept(index + 1, step, digest, color))
        previous = digest
    return kept


def _order_set_by(trace: list[tuple[Step, np.ndarray, np.ndarray, str]], after: int, upto: int
                  ) -> tuple[int, Step] | None:
    """The last decode or colour step (1-based index, step) in ``trace`` after index ``after``, up to ``upto``."""
    found = [(index + 1, step) for index, (step, *_) in enumerate(trace) if after <= index < upto
             and step.op in ("decode", "color")]
    return found[-1] if found else None


def first_divergent_step(ref: Recipe, cand: Recipe, sample: str | bytes, sample_name: str) -> StepDivergence | None:
    """Compare intermediate outputs step by step; None when both produce the same sequence of outputs.

    Steps are aligned on their RGB-ordered images, so a cv2 decode + colour conversion lines up with a PIL decode;
    when the two stages' channel orders part (one converts its BGR decode, the other never does) and the values
    diverge later while they are still apart (at the first per-channel step: normalize), the step where they parted
    is the divergent one. The steps table summarizes what each step produced, never the RGB view.
    """
    ref_trace, cand_trace = ref.trace_orders(sample), cand.trace_orders(sample)
    summaries = (tuple(summarize(i + 1, step.label, out) for i, (step, out, *_) in enumerate(ref_trace)),
                 tuple(summarize(i + 1, step.label, out) for i, (step, out, *_) in enumerate(cand_trace)))
    ref_steps, cand_steps = _effective(ref_trace), _effective(cand_trace)
    parted: int | None = None  # the aligned position where the channel orders parted (and have not met again)
    for position, (r, c) in enumerate(zip(ref_steps, cand_steps)):
        parted = None if r.color == c.color else parted if parted is not None else position
        if r.digest != c.digest:
            if parted is not None:
                r, c = _where_orders_parted(ref_trace, cand_trace, ref_steps, cand_steps, parted)
            return StepDivergence(c.index, r.step.label, c.step.label, sample_name, ref_steps=summaries[0],
                                  cand_steps=summaries[1])
    if len(ref_steps) != len(cand_steps):
        shorter = min(len(ref_steps), len(cand_steps))
        ref_label = ref_steps[shorter].step.label if shorter < len(ref_steps) else "(end)"
        cand_index, cand_label = (cand_steps[shorter].index, cand_steps[shorter].step.label) \
            if shorter < len(cand_steps) else (len(cand.steps) + 1, "(end)")
        return StepDivergence(cand_index, ref_label, cand_label, sample_name, ref_steps=summaries[0],
                              cand_steps=summaries[1])
    return None


def _where_orders_parted(ref_trace: list, cand_trace: list, ref_steps: list[_Kept], cand_steps: list[_Kept],
                         position: int) -> tuple[_Kept, _Kept]:
    """The steps that set each stage's channel order where the orders parted (a colour conversion one stage does and
    the other lacks, or two decodes); a stage that changed nothing there is named by its aligned step."""
    r, c = ref_steps[position], cand_steps[position]
    ref_after = ref_steps[position - 1].index if position else 0
    cand_after = cand_steps[position - 1].index if position else 0
    ref_set, cand_set = _order_set_by(ref_trace, ref_after, r.index), _order_set_by(cand_trace, cand_after, c.index)
    if ref_set is not None:
        r = _Kept(ref_set[0], ref_set[1], r.digest, r.color)
    if cand_set is not None:
        c = _Kept(cand_set[0], cand_set[1], c.digest, c.color)
    return r, c


class RecipeSteps:
    """Two declared step lists: replay both on the first evidence sample and compare step by step."""

    names_by_cause = False  # every step of both lists is seen

    def applies(self, pair: "Pair") -> bool:
        ref, cand = pair.spec(pair.ref), pair.spec(pair.cand)
        return bool(pair.evidence) and ref is not None and cand is not None \
            and ref.recipe is not None and cand.recipe is not None

    def locate(self, pair: "Pair", first_cause: str | None = None) -> StepDivergence | None:
        """Every step of both lists is seen, so no cause is needed to name one (``first_cause`` is not read)."""
        ref, cand = pair.spec(pair.ref), pair.spec(pair.cand)
        assert ref is not None and cand is not None and ref.recipe is not None and cand.recipe is not None
        from gapcheck.preprocess.samples import read_regular_file

        sample = pair.evidence[0].sample
        return first_divergent_step(ref.recipe, cand.recipe, read_regular_file(sample), sample)

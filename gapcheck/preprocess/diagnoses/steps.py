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
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from gapcheck.preprocess.recipe import Recipe
from gapcheck.preprocess.rows import StepDivergence, StepSummary
from gapcheck.tensors import fingerprint

if TYPE_CHECKING:
    from gapcheck.preprocess.diagnoses.base import Pair


class StepLocator(Protocol):
    """Finds the first divergent step of a failing pair (see the module docstring)."""

    def applies(self, pair: "Pair") -> bool: ...

    def locate(self, pair: "Pair") -> StepDivergence | None: ...


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


def _effective(trace: list) -> list[tuple[int, str, str]]:
    kept, previous = [], None
    for index, (label, output) in enumerate(trace):
        digest = fingerprint(output)
        if digest != previous:
            kept.append((index + 1, label, digest))
        previous = digest
    return kept


def first_divergent_step(ref: Recipe, cand: Recipe, sample: str | bytes, sample_name: str) -> StepDivergence | None:
    """Compare intermediate outputs step by step; None when both produce the same sequence of outputs."""
    ref_trace, cand_trace = ref.trace(sample, rgb=True), cand.trace(sample, rgb=True)
    summaries = (tuple(summarize(i + 1, label, out) for i, (label, out) in enumerate(ref_trace)),
                 tuple(summarize(i + 1, label, out) for i, (label, out) in enumerate(cand_trace)))
    ref_steps, cand_steps = _effective(ref_trace), _effective(cand_trace)
    for (_, ref_label, ref_fp), (cand_index, cand_label, cand_fp) in zip(ref_steps, cand_steps):
        if ref_fp != cand_fp:
            return StepDivergence(cand_index, ref_label, cand_label, sample_name, ref_steps=summaries[0],
                                  cand_steps=summaries[1])
    if len(ref_steps) != len(cand_steps):
        shorter = min(len(ref_steps), len(cand_steps))
        ref_label = ref_steps[shorter][1] if shorter < len(ref_steps) else "(end)"
        cand_index, cand_label = (cand_steps[shorter][0], cand_steps[shorter][1]) if shorter < len(cand_steps) else (len(cand.steps) + 1, "(end)")
        return StepDivergence(cand_index, ref_label, cand_label, sample_name, ref_steps=summaries[0],
                              cand_steps=summaries[1])
    return None


class RecipeSteps:
    """Two declared step lists: replay both on the first evidence sample and compare step by step."""

    def applies(self, pair: "Pair") -> bool:
        ref, cand = pair.spec(pair.ref), pair.spec(pair.cand)
        return bool(pair.evidence) and ref is not None and cand is not None \
            and ref.recipe is not None and cand.recipe is not None

    def locate(self, pair: "Pair") -> StepDivergence | None:
        ref, cand = pair.spec(pair.ref), pair.spec(pair.cand)
        assert ref is not None and cand is not None and ref.recipe is not None and cand.recipe is not None
        from gapcheck.preprocess.samples import read_regular_file

        sample = pair.evidence[0].sample
        return first_divergent_step(ref.recipe, cand.recipe, read_regular_file(sample), sample)

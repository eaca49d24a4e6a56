"""Step lists: the first step at which two recipe stages stop producing the same bytes."""
from __future__ import annotations

from dataclasses import dataclass

from gapcheck.preprocess.recipe import Recipe
from gapcheck.tensors import fingerprint


@dataclass(frozen=True)
class StepDivergence:
    step_index: int  # 1-based
    ref_step: str
    cand_step: str
    sample: str


def first_divergent_step(ref: Recipe, cand: Recipe, sample: str | bytes, sample_name: str) -> StepDivergence | None:
    """Compare intermediate outputs step by step; None when every shared step agrees and lengths match."""
    ref_trace, cand_trace = ref.trace(sample), cand.trace(sample)
    for index, ((ref_label, ref_out), (cand_label, cand_out)) in enumerate(zip(ref_trace, cand_trace)):
        if fingerprint(ref_out) != fingerprint(cand_out):
            return StepDivergence(index + 1, ref_label, cand_label, sample_name)
    if len(ref_trace) != len(cand_trace):
        index = min(len(ref_trace), len(cand_trace))
        ref_label = ref_trace[index][0] if index < len(ref_trace) else "(end)"
        cand_label = cand_trace[index][0] if index < len(cand_trace) else "(end)"
        return StepDivergence(index + 1, ref_label, cand_label, sample_name)
    return None

"""Step lists: the first step at which two recipe stages stop producing the same bytes.

Steps that leave the (RGB-ordered) image unchanged, such as the colour conversion after a
cv2 decode, are skipped before aligning, so the two lists line up by what they do.
"""
from __future__ import annotations

from dataclasses import dataclass

from gapcheck.preprocess.recipe import Recipe
from gapcheck.tensors import fingerprint


@dataclass(frozen=True)
class StepDivergence:
    step_index: int  # 1-based index in the candidate's step list
    ref_step: str
    cand_step: str
    sample: str


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
    ref_steps, cand_steps = _effective(ref.trace(sample, rgb=True)), _effective(cand.trace(sample, rgb=True))
    for (_, ref_label, ref_fp), (cand_index, cand_label, cand_fp) in zip(ref_steps, cand_steps):
        if ref_fp != cand_fp:
            return StepDivergence(cand_index, ref_label, cand_label, sample_name)
    if len(ref_steps) != len(cand_steps):
        shorter = min(len(ref_steps), len(cand_steps))
        ref_label = ref_steps[shorter][1] if shorter < len(ref_steps) else "(end)"
        cand_index, cand_label = (cand_steps[shorter][0], cand_steps[shorter][1]) if shorter < len(cand_steps) else (len(cand.steps) + 1, "(end)")
        return StepDivergence(cand_index, ref_label, cand_label, sample_name)
    return None

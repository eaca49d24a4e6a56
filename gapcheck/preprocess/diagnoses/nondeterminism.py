"""Nondeterminism: the same sample through the same stage, run again, must give the same bytes.

A stage-level check (not a pair diagnosis): every stage is run ``repeats`` extra times on a
few probe samples in the workers; here the fingerprints are compared and worded.
"""
from __future__ import annotations

from dataclasses import dataclass

from gapcheck.codes.preprocess import NONDETERMINISTIC
from gapcheck.findings import Finding, Severity, Subject


@dataclass(frozen=True)
class DeterminismCheck:
    stage: str
    probed_samples: int
    runs_per_sample: int
    differing_samples: tuple[str, ...]  # sample paths whose repeated outputs differ

    @property
    def deterministic(self) -> bool:
        return not self.differing_samples


def check_determinism(stage: str, runs: list[tuple[str, str, tuple[str, ...]]]) -> DeterminismCheck:
    """``runs``: (sample path, first-run fingerprint, repeat fingerprints) for every probed sample."""
    differing = tuple(path for path, first, repeats in runs if any(r != first for r in repeats))
    per_sample = 1 + max((len(r) for _, _, r in runs), default=0)
    return DeterminismCheck(stage, len(runs), per_sample, differing)


def determinism_finding(check: DeterminismCheck, augmented: bool) -> Finding | None:
    """A gap for a random stage outside training; information only for a stage declared augmented."""
    if check.deterministic:
        return None
    expected = " (expected: the stage is marked augmented)" if augmented else (
        ": a random augmentation is active outside training (if this stage is the training one and meant to augment, "
        f"say so: --augmented {check.stage}, or augmented = true in [preprocess.stages.{check.stage}])")
    return NONDETERMINISTIC.finding(
        f"{check.stage} gave different outputs for the same sample on {len(check.differing_samples)} of "
        f"{check.probed_samples} probed sample(s) over {check.runs_per_sample} runs{expected}",
        subject=Subject(stage=check.stage), severity=Severity.INFO if augmented else None,
        evidence={"differing_samples": list(check.differing_samples), "probed_samples": check.probed_samples,
                  "runs_per_sample": check.runs_per_sample},
    )

"""Nondeterminism: the same sample through the same stage, run again, must give the same bytes."""
from __future__ import annotations

from dataclasses import dataclass


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

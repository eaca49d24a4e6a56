"""Task-level targets for INT8 (errors are expected; the task decides how much): top-1 agreement, cosine
similarity of the outputs, max relative error of the logits.

Every measure compares the quantized model's outputs with the FP32 model's on the verification samples:

- ``top1-agreement``: share of rows (every position of the first float output, argmax over its last axis) whose
  argmax is the same;
- ``cosine``: cosine similarity of each sample's flattened output, the mean over samples, of the worst output (the
  minimum over samples and outputs is reported);
- ``max-rel-error``: ``max |q - f| / max |f|`` per sample and output (the error relative to that output's largest
  logit), the largest.

Each output is scored on its own: a model's outputs are often on different scales (MTCNN's box offsets ~0.1 beside
its probabilities ~1), and one vector of all of them would hide the small output's error behind the large one's.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gapcheck.errors import UsageError
from gapcheck.groups.base import check_number

if TYPE_CHECKING:
    import numpy as np

MEASURES = ("top1-agreement", "cosine", "max-rel-error")


@dataclass(frozen=True)
class Target:
    measure: str
    value: float

    def __post_init__(self) -> None:
        if self.measure not in MEASURES:
            raise UsageError(f"unknown target {self.measure!r}; choose {', '.join(MEASURES)}", parameter="target")
        check_number(self.value, f"target {self.measure}", low=0.0, high=None if self.measure == "max-rel-error" else 1.0)

    def met(self, observed: float) -> bool:
        if self.measure == "max-rel-error":
            return observed <= self.value
        return observed >= self.value

    def __str__(self) -> str:
        return f"{self.measure}={self.value:g}"


def parse_target(text: str, where: str = "--target") -> Target:
    """``top1-agreement=0.99`` / ``cosine=0.999`` / ``max-rel-error=0.05``; ``where`` names the value's source in
    the error (the flag, or the config file's key)."""
    name, sep, number = text.partition("=")
    try:
        value = float(number)
    except ValueError:
        value = math.nan
    if not sep or not math.isfinite(value):
        raise UsageError(f"{where} expects MEASURE=NUMBER ({', '.join(MEASURES)}), got {text!r}", parameter="target")
    return Target(name.strip().lower().replace("_", "-"), value)


@dataclass(frozen=True)
class Scores:
    """The measures over the verification samples (see the module docstring)."""

    top1_agreement: float | None  # None: no float output with a class axis
    cosine: float
    cosine_min: float
    max_rel_error: float
    samples: int

    def value(self, measure: str) -> float:
        if measure == "top1-agreement":
            return math.nan if self.top1_agreement is None else self.top1_agreement
        return self.cosine if measure == "cosine" else self.max_rel_error

    def meets(self, targets: Sequence[Target]) -> bool:
        return all(t.met(self.value(t.measure)) for t in targets)

    def missed(self, targets: Sequence[Target]) -> list[str]:
        return [f"{t.measure} {self.value(t.measure):.4g} (target {t.value:g})" for t in targets
                if not t.met(self.value(t.measure))]

    def as_dict(self) -> dict[str, float | int | None]:
        return {"top1_agreement": self.top1_agreement, "cosine": self.cosine, "cosine_min": self.cosine_min,
                "max_rel_error": self.max_rel_error, "samples": self.samples}


def _pair(f: np.ndarray, q: np.ndarray) -> tuple[float, float]:
    """(cosine, max |q - f| / max |f|) of one output of one sample."""
    import numpy as np

    if not np.isfinite(q).all():
        return -1.0, math.inf
    norm = float(np.linalg.norm(f) * np.linalg.norm(q))
    cosine = float(f @ q / norm) if norm > 0 else float(np.array_equal(f, q))
    scale = float(np.abs(f).max()) if f.size else 0.0
    diff = float(np.abs(q - f).max()) if f.size else 0.0
    return cosine, diff / scale if scale > 0 else diff


def score(reference: Sequence[dict[str, np.ndarray]], actual: Sequence[dict[str, np.ndarray]]) -> Scores:
    """The measures of ``actual`` against ``reference`` (one dict of outputs per sample, float outputs only)."""
    import numpy as np

    cosines: dict[str, list[float]] = {}
    rels: list[float] = []
    agree, rows = 0, 0
    for ref, got in zip(reference, actual, strict=True):
        names = [n for n in ref if np.issubdtype(ref[n].dtype, np.floating)]
        for n in names:
            cosine, rel = _pair(ref[n].astype(np.float64).ravel(), got[n].astype(np.float64).ravel())
            cosines.setdefault(n, []).append(cosine)
            rels.append(rel)
        first = ref[names[0]]
        if first.ndim >= 1 and first.shape[-1] > 1:
            a = first.reshape(-1, first.shape[-1]).argmax(-1)
            b = got[names[0]].astype(np.float64).reshape(-1, first.shape[-1]).argmax(-1)
            agree += int((a == b).sum())
            rows += a.size
    per_output = [float(np.mean(c)) for c in cosines.values()]
    return Scores(top1_agreement=agree / rows if rows else None, cosine=min(per_output),
                  cosine_min=min(min(c) for c in cosines.values()), max_rel_error=max(rels),
                  samples=len(reference))

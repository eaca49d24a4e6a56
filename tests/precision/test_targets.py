"""INT8 targets score every output on its own scale (a small output's error is not hidden behind a large one's)."""
from __future__ import annotations

import numpy as np
import pytest

from gapcheck.precision.targets import parse_target, score


def _two_outputs(error: float) -> tuple[list[dict[str, np.ndarray]], list[dict[str, np.ndarray]]]:
    """MTCNN-like heads: box offsets ~0.1 (with ``error`` relative error) beside probabilities ~1 (exact)."""
    rng = np.random.default_rng(0)
    refs, gots = [], []
    for _ in range(3):
        boxes = (rng.standard_normal((1, 4)) * 0.1).astype(np.float32)
        probs = np.array([[0.02, 0.98]], dtype=np.float32)
        refs.append({"boxes": boxes, "probs": probs})
        gots.append({"boxes": boxes + error * np.abs(boxes).max() * np.array([[1, -1, 1, -1]], np.float32),
                     "probs": probs.copy()})
    return refs, gots


def test_small_output_error_is_not_hidden_by_a_large_output() -> None:
    refs, gots = _two_outputs(0.05)
    scores = score(refs, gots)
    assert scores.max_rel_error == pytest.approx(0.05, rel=1e-3)  # the box head's own error (was ~0.005 concatenated)
    assert not scores.meets([parse_target("max-rel-error=0.01")])
    boxes_cos = np.mean([float(r["boxes"].ravel() @ g["boxes"].ravel() / np.linalg.norm(r["boxes"])
                                / np.linalg.norm(g["boxes"])) for r, g in zip(refs, gots, strict=True)])
    assert scores.cosine == pytest.approx(boxes_cos)  # the worst output's mean cosine
    assert scores.cosine_min <= scores.cosine
    assert scores.samples == 3


def test_identical_outputs_meet_every_target() -> None:
    refs, _ = _two_outputs(0.0)
    scores = score(refs, [{k: v.copy() for k, v in r.items()} for r in refs])
    assert scores.meets([parse_target("max-rel-error=0"), parse_target("cosine=0.999999"),
                         parse_target("top1-agreement=1")])


def test_non_finite_output_fails_every_measure() -> None:
    refs, gots = _two_outputs(0.0)
    gots[1]["probs"] = np.array([[np.nan, 1.0]], np.float32)
    scores = score(refs, gots)
    assert scores.cosine_min == -1.0 and scores.max_rel_error == float("inf")

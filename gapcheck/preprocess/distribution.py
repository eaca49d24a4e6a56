"""Distribution check: two-sample Kolmogorov–Smirnov per channel between stages.

With thousands of values even trivial shifts get tiny p-values, so a channel is only
flagged when the p-value is below the threshold *and* the effect is large enough:
the KS statistic D itself (the largest gap between the two CDFs, 0..1) is the effect
size, and the standardized mean difference is reported beside it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import ks_2samp

DEFAULT_MIN_EFFECT = 0.1


@dataclass(frozen=True)
class KSResult:
    ref_stage: str
    cand_stage: str
    channel: int
    statistic: float  # D, the effect size
    p_value: float
    mean_difference_sd: float  # (mean_cand - mean_ref) / pooled sd
    n_ref: int
    n_cand: int
    flagged: bool


def ks_per_channel(
    ref_stage: str,
    ref_values: np.ndarray,
    cand_stage: str,
    cand_values: np.ndarray,
    p_threshold: float,
    min_effect: float,
) -> list[KSResult]:
    """``*_values``: (channels, values). Channels are compared by position; extra channels are ignored.

    Nothing is compared between one channel and 3 or 4 (grayscale against colour): the grayscale plane is no
    distribution of the red (or blue) channel, and the ``shape`` finding already names the conversion."""
    if 1 in (ref_values.shape[0], cand_values.shape[0]) and max(ref_values.shape[0], cand_values.shape[0]) in (3, 4):
        return []
    results = []
    for channel in range(min(ref_values.shape[0], cand_values.shape[0])):
        a, b = ref_values[channel], cand_values[channel]
        a, b = a[np.isfinite(a)], b[np.isfinite(b)]
        if a.size < 2 or b.size < 2:
            continue
        test = ks_2samp(a, b)
        pooled = math.sqrt((float(a.var()) + float(b.var())) / 2.0)
        smd = (float(b.mean()) - float(a.mean())) / pooled if pooled > 0 else 0.0
        statistic, p_value = float(test.statistic), float(test.pvalue)
        results.append(
            KSResult(ref_stage, cand_stage, channel, statistic, p_value, smd, int(a.size), int(b.size),
                     p_value < p_threshold and statistic >= min_effect)
        )
    return results

"""Channel order: which permutation of colour channels (with a per-channel affine map) explains an output.

The fit is closed-form: for every pair (output channel c, source channel k) the
least-squares affine fit ``out_c ≈ a·src_k + b`` leaves ``var(out_c) - cov²/var(src_k)``
per element, so choosing the permutation is an argmax over at most 6 sums.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations
from typing import TYPE_CHECKING

import numpy as np

from gapcheck.codes.preprocess import CHANNEL_ORDER

if TYPE_CHECKING:
    from gapcheck.findings import Finding
    from gapcheck.preprocess.diagnoses.base import Pair


@dataclass(frozen=True)
class AffineFit:
    """``target[c] ≈ slope[c] * source[perm[c]] + offset[c]``."""

    perm: tuple[int, ...]
    slope: tuple[float, ...]
    offset: tuple[float, ...]
    rmse: float
    max_abs: float

    def apply(self, source: np.ndarray) -> np.ndarray:
        slope = np.asarray(self.slope)[:, None, None]
        offset = np.asarray(self.offset)[:, None, None]
        return source[list(self.perm)] * slope + offset


def fit_permuted_affine(source: np.ndarray, target: np.ndarray, allow_permutation: bool = True) -> AffineFit | None:
    """Best (perm, affine) map from ``source`` (C,H,W) to ``target`` (C,H,W); None if shapes differ."""
    if source.shape != target.shape or source.ndim != 3 or source.shape[1] * source.shape[2] == 0:
        return None
    channels = source.shape[0]
    src = source.reshape(channels, -1).astype(np.float64, copy=False)
    tgt = target.reshape(channels, -1).astype(np.float64, copy=False)
    src_mean, tgt_mean = src.mean(axis=1), tgt.mean(axis=1)
    src_c = src - src_mean[:, None]
    tgt_c = tgt - tgt_mean[:, None]
    src_var = (src_c * src_c).mean(axis=1)
    tgt_var = (tgt_c * tgt_c).mean(axis=1)
    cov = tgt_c @ src_c.T / src.shape[1]  # cov[c, k] between target c and source k
    safe_var = np.where(src_var > 1e-12, src_var, np.inf)
    explained = cov * cov / safe_var[None, :]
    candidates = list(permutations(range(channels))) if allow_permutation and channels <= 4 else [tuple(range(channels))]
    identity = tuple(range(channels))

    def residual(perm: tuple[int, ...]) -> float:
        return float(sum(tgt_var[c] - explained[c, perm[c]] for c in range(channels)))

    # Prefer the identity unless a permutation is clearly better (ties happen on grey images).
    best = min(candidates, key=lambda p: (residual(p) - (1e-9 * (1 + tgt_var.sum()) if p == identity else 0.0)))
    slope = tuple(float(cov[c, best[c]] / src_var[best[c]]) if src_var[best[c]] > 1e-12 else 0.0 for c in range(channels))
    offset = tuple(float(tgt_mean[c] - slope[c] * src_mean[best[c]]) for c in range(channels))
    fit = AffineFit(best, slope, offset, 0.0, 0.0)
    err = np.abs(fit.apply(source) - target)
    return AffineFit(best, slope, offset, float(np.sqrt(np.mean(err * err))), float(err.max()))


def is_identity(perm: tuple[int, ...]) -> bool:
    return perm == tuple(range(len(perm)))


def describe_perm(perm: tuple[int, ...]) -> str:
    names = "RGBA" if len(perm) <= 4 else None
    if names and len(perm) in (3, 4):
        return "".join(names[k] for k in perm)
    return str(list(perm))


class ChannelOrderDiagnosis:
    """Replayed channel permutations differ (per output position), or a direct fit needs a permutation."""

    code = CHANNEL_ORDER
    reads_values = True

    def applies(self, pair: "Pair") -> bool:
        return pair.values_differ and (pair.replay is not None or pair.direct_fit is not None)

    def diagnose(self, pair: "Pair") -> "Finding | None":
        if pair.replay is not None:
            index, pr, pc = pair.replay
            if pr.fit.perm == pc.fit.perm:
                return None
            return pair.finding(self.code, f"{pair.cand} has channels in {describe_perm(pc.fit.perm)} order, "
                                f"{pair.ref} in {describe_perm(pr.fit.perm)}", sample=pair.evidence[index].sample,
                                ref_order=describe_perm(pr.fit.perm), cand_order=describe_perm(pc.fit.perm),
                                ref_permutation=list(pr.fit.perm), cand_permutation=list(pc.fit.perm),
                                replayed_residual_max_abs_rel=pair.replay_residual)
        assert pair.direct_fit is not None
        fit, residual = pair.direct_fit
        if is_identity(fit.perm):
            return None
        return pair.finding(self.code, f"permuting {pair.cand}'s channels as {list(fit.perm)} reproduces {pair.ref}",
                            sample=pair.evidence[0].sample, cand_to_ref_permutation=list(fit.perm),
                            residual_max_abs_rel=residual)

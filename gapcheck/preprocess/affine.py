"""Channel order and value maps in closed form: which permutation of colour channels, with a per-channel
affine map, explains an array.

The fit is closed-form: for every pair (output channel c, source channel k) the least-squares affine
fit ``out_c ≈ a·src_k + b`` leaves ``var(out_c) - cov²/var(src_k)`` per element, so choosing the
permutation is an argmax over at most 24 sums. The covariances are summed with ``np.einsum`` (no BLAS):
a BLAS product splits its sums by thread count, so the same arrays would give other last bits in a
worker process than in the parent, and reports would differ between engines.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations

import numpy as np


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


class AffineTarget:
    """The target side of :func:`fit_permuted_affine`, computed once: a replay fits ~30 candidate sources to the
    same stage output, and the target's mean, centred values and variance are the same for each."""

    def __init__(self, target: np.ndarray) -> None:
        self.target = target
        self.usable = target.ndim == 3 and target.shape[1] * target.shape[2] > 0
        if self.usable:
            tgt = target.reshape(target.shape[0], -1).astype(np.float64, copy=False)
            self.mean = tgt.mean(axis=1)
            self.centred = tgt - self.mean[:, None]
            self.var = (self.centred * self.centred).mean(axis=1)

    def fit(self, source: np.ndarray, allow_permutation: bool = True) -> AffineFit | None:
        """Best (perm, affine) map from ``source`` (C,H,W) to the target; None if shapes differ."""
        if source.shape != self.target.shape or not self.usable:
            return None
        channels = source.shape[0]
        src = source.reshape(channels, -1).astype(np.float64, copy=False)
        src_mean = src.mean(axis=1)
        src_c = src - src_mean[:, None]
        src_var = (src_c * src_c).mean(axis=1)
        cov = np.einsum("ck,dk->cd", self.centred, src_c) / src.shape[1]  # cov[c, k] between target c and source k
        del src_c
        safe_var = np.where(src_var > 1e-12, src_var, np.inf)
        explained = cov * cov / safe_var[None, :]
        candidates = list(permutations(range(channels))) if allow_permutation and channels <= 4 else [tuple(range(channels))]
        identity = tuple(range(channels))
        tgt_var = self.var

        def residual(perm: tuple[int, ...]) -> float:
            return float(sum(tgt_var[c] - explained[c, perm[c]] for c in range(channels)))

        # Prefer the identity unless a permutation is clearly better (ties happen on grey images).
        best = min(candidates, key=lambda p: (residual(p) - (1e-9 * (1 + tgt_var.sum()) if p == identity else 0.0)))
        slope = tuple(float(cov[c, best[c]] / src_var[best[c]]) if src_var[best[c]] > 1e-12 else 0.0
                      for c in range(channels))
        offset = tuple(float(self.mean[c] - slope[c] * src_mean[best[c]]) for c in range(channels))
        # |apply(source) - target| in one buffer (the same operations, in the same order, as AffineFit.apply).
        err = source[list(best)] if best != identity or not source.flags.c_contiguous else source.copy()
        err = err.astype(np.float64, copy=False)
        err *= np.asarray(slope)[:, None, None]
        err += np.asarray(offset)[:, None, None]
        err -= self.target
        np.abs(err, out=err)
        max_abs = float(err.max())
        np.square(err, out=err)
        return AffineFit(best, slope, offset, float(np.sqrt(np.mean(err))), max_abs)


def fit_permuted_affine(source: np.ndarray, target: np.ndarray, allow_permutation: bool = True) -> AffineFit | None:
    """Best (perm, affine) map from ``source`` (C,H,W) to ``target`` (C,H,W); None if shapes differ."""
    if source.shape != target.shape:
        return None
    return AffineTarget(target).fit(source, allow_permutation)


def is_identity(perm: tuple[int, ...]) -> bool:
    return perm == tuple(range(len(perm)))


def describe_perm(perm: tuple[int, ...]) -> str:
    names = "RGBA" if len(perm) <= 4 else None
    if names and len(perm) in (3, 4):
        return "".join(names[k] for k in perm)
    return str(list(perm))

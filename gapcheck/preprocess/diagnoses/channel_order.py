"""Channel order: the stages' replayed channel permutations differ (BGR vs RGB); the fit is
:func:`gapcheck.preprocess.affine.fit_permuted_affine`."""
from __future__ import annotations

from typing import TYPE_CHECKING

from gapcheck.codes.preprocess import CHANNEL_ORDER
from gapcheck.preprocess.affine import describe_perm, is_identity

if TYPE_CHECKING:
    from gapcheck.findings import Finding
    from gapcheck.preprocess.diagnoses.base import Pair


class ChannelOrderDiagnosis:
    """Replayed channel permutations differ (per output position), or a direct fit needs a permutation."""

    code = CHANNEL_ORDER
    reads_values = True

    def applies(self, pair: "Pair") -> bool:
        # a grayscale output has no channel order to compare with a colour one (shape names the conversion)
        return pair.values_differ and not pair.colour_apart and (pair.replay is not None or pair.direct_fit is not None)

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

"""What a verified fix says about each cause it handled: only a module whose nodes it keeps is 'kept in FP32'."""
from __future__ import annotations

from gapcheck.codes.precision import PRECISION_SENSITIVE, PRECISION_TARGET_MISSED
from gapcheck.findings import Severity
from gapcheck.precision.outcome import downgraded


def test_only_the_kept_module_is_said_to_be_kept() -> None:
    kept = PRECISION_SENSITIVE.finding("dense5_2 adds 0.369", where="dense5_2", evidence={"nodes": ["node_linear_2"]})
    left = PRECISION_SENSITIVE.finding("conv2 adds 0.068", where="conv2", evidence={"nodes": ["node_conv2d_1"]})
    missed = PRECISION_TARGET_MISSED.finding("the INT8 model misses cosine 0.99", where="outputs")
    out = [downgraded(f, ("node_linear_2",)) for f in (kept, left, missed)]
    assert all(f.severity is Severity.WARNING for f in out)
    assert out[0].message.endswith("(kept in FP32 by the fix)")
    assert "kept in FP32" not in out[1].message.replace("without it in FP32", "")
    assert "left as it is by the fix" in out[1].message
    assert "kept in FP32" not in out[2].message and "before the fix" in out[2].message

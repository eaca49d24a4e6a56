"""Finding codes of ``gapcheck precision``: reduced-precision deployments (FP16, INT8), their fixes and proofs.

``fp16_overflow`` (a module beyond FP16's range) is export-diff's code and is reused, not redefined here.

The texts (severity, title, explanation, fix) are in ``precision.toml`` beside this module; adding a code is
one entry there plus one constant line here.
"""
from gapcheck.codes import catalog

_codes = catalog(__name__)

PRECISION_SENSITIVE = _codes["precision_sensitive"]
PRECISION_TARGET_MISSED = _codes["precision_target_missed"]
PRECISION_FIX_VERIFIED = _codes["precision_fix_verified"]
PRECISION_FIX_INSUFFICIENT = _codes["precision_fix_insufficient"]
CALIBRATION_UNREPRESENTATIVE = _codes["calibration_unrepresentative"]
CALIBRATION_SAMPLE_SKIPPED = _codes["calibration_sample_skipped"]

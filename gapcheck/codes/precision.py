"""Finding codes of ``gapcheck precision``: reduced-precision deployments (FP16, INT8), their fixes and proofs.

``fp16_overflow`` (a module beyond FP16's range) is export-diff's code and is reused, not redefined here.
"""
from gapcheck.codes import define
from gapcheck.findings import Severity

F = "precision"

PRECISION_SENSITIVE = define(
    "precision_sensitive", Severity.GAP, F, "A module loses accuracy in reduced precision",
    """In FP16 the module's own ops, fed the reference (FP32) inputs, still miss the FP16 tolerance (a sum over a long
    axis, a variance of large activations); in INT8 it is among the modules that add the most error, and the
    quantized model misses the task-level target. The evidence holds the measure (local error ratio, or the relative
    error the module adds over its inputs) and the module's ONNX nodes.""",
    "Keep the module in FP32 (the --fix model does it and proves it), or rescale its inputs so that they fit.")
PRECISION_TARGET_MISSED = define(
    "precision_target_missed", Severity.GAP, F, "The reduced-precision model misses the target",
    """The fully converted model (FP16, or INT8 quantized with the chosen calibration) misses the tolerance or the
    task-level target (top-1 agreement, cosine similarity, max relative error of the logits) on the verification
    samples.""",
    "Run with --fix PATH: gapcheck keeps the fewest modules in FP32 that reach the target and verifies the result.")
PRECISION_FIX_VERIFIED = define(
    "precision_fix_verified", Severity.INFO, F, "The fixed model was written and verified",
    """The model written to --fix keeps the listed modules (ONNX nodes) in FP32 and passes the same comparison (FP16:
    layer by layer within the tolerance; INT8: the task-level target) on the verification samples. The JSON report
    lists the kept modules and nodes so a CI job can apply them.""",
    "Deploy the written model, or apply the kept node list in your own conversion (trtexec/Polygraphy strings are "
    "in the report).")
PRECISION_FIX_INSUFFICIENT = define(
    "precision_fix_insufficient", Severity.GAP, F, "No fix that gapcheck tried reaches the target",
    """Keeping the chosen modules in FP32 did not make the model pass, or no exclusion set (up to every quantized
    node) reaches the INT8 target. The message says what is still off; nothing is claimed as fixed.""",
    "Loosen the target if the task allows, calibrate with more representative samples, or change the model (scale "
    "the activations that overflow).")
CALIBRATION_UNREPRESENTATIVE = define(
    "calibration_unrepresentative", Severity.WARNING, F, "Calibration or verification inputs are not representative",
    """INT8 ranges were calibrated on random inputs, or the verification samples are the calibration samples
    themselves: the target is then measured on what the ranges were fitted to, or on inputs the model never sees.""",
    "Give --calibration with real samples and --inputs with other real samples (held out from calibration).")
CALIBRATION_SAMPLE_SKIPPED = define(
    "calibration_sample_skipped", Severity.WARNING, F, "Calibration samples were skipped",
    """Some calibration samples could not be used: a file that cannot be read or that the preprocessing stage fails
    on (a corrupt image), or a sample holding NaN/inf (it would poison the calibrated ranges). They are counted, named
    and left out; the run uses the remaining samples (exit 2 only when none remains).""",
    "Fix or remove the named samples.")

"""Finding codes of the runtime guards (``gapcheck.guards``): what a training loop trips at run time.

A guard raises (``mode="raise"``) or logs and counts (``mode="warn"``) on a GAP-severity code;
WARNING and INFO codes are only logged and kept on the guard's result.

The texts (severity, title, explanation, fix) are in ``guards.toml`` beside this module; adding a code is
one entry there plus one constant line here.
"""
from gapcheck.codes import catalog

_codes = catalog(__name__)

GRAD_NONFINITE = _codes["guards_grad_nonfinite"]
OUTPUT_NONFINITE = _codes["guards_output_nonfinite"]
GRAD_ZERO = _codes["guards_grad_zero"]
GRAD_MISSING = _codes["guards_grad_missing"]
SCALER_SKIPPING = _codes["guards_scaler_skipping"]
SCALER_COLLAPSED = _codes["guards_scaler_collapsed"]
SCALER_BF16 = _codes["guards_scaler_bf16"]
BN_POLLUTION = _codes["guards_bn_pollution"]
EVAL_TRAIN_MODE = _codes["guards_eval_train_mode"]
SPLIT_OVERLAP = _codes["guards_split_overlap"]
INPUT_CONTRACT = _codes["guards_input_contract"]
NONDETERMINISTIC = _codes["guards_nondeterministic"]
TRIAL_LEAK = _codes["guards_trial_leak"]
PROFILE_BOTTLENECK = _codes["guards_profile_bottleneck"]
INPUT_STARVED = _codes["guards_input_starved"]

"""Finding codes of the runtime guards (``gapcheck.guards``): what a training loop trips at run time.

A guard raises (``mode="raise"``) or logs and counts (``mode="warn"``) on a GAP-severity code;
WARNING and INFO codes are only logged and kept on the guard's result.
"""
from gapcheck.codes import define
from gapcheck.findings import Severity

F = "guards"

GRAD_NONFINITE = define("guards_grad_nonfinite", Severity.GAP, F, "A gradient is NaN or Inf",
    "After backward, a parameter's gradient holds NaN or Inf; the next optimizer step would write it into the "
    "weights. The first parameters with a non-finite gradient are named, in the model's parameter order.",
    "Find the op with torch.autograd.set_detect_anomaly(True); look for log(0), division by zero, sqrt of a "
    "negative number or an exploding loss; lower the learning rate or clip gradients.")
OUTPUT_NONFINITE = define("guards_output_nonfinite", Severity.GAP, F, "A forward output is NaN or Inf",
    "The model's forward pass produced NaN or Inf for a finite input: an overflow, log/sqrt of a non-positive value, "
    "a division by zero or an uninitialised parameter.",
    "Find the first module whose output is non-finite (forward hooks, torch.autograd.detect_anomaly) and fix its "
    "numerics or its initialisation.")
GRAD_ZERO = define("guards_grad_zero", Severity.GAP, F, "Too many parameters receive an all-zero gradient",
    "The share of parameters whose whole gradient is zero is above the configured limit: dead ReLUs, a detached "
    "branch (.detach(), .data, torch.no_grad in forward), or a loss that does not depend on those parameters.",
    "Check the named parameters' path to the loss; remove stray .detach()/no_grad; check the activation and init.")
GRAD_MISSING = define("guards_grad_missing", Severity.WARNING, F, "A parameter received no gradient",
    "A parameter that requires grad has .grad None after backward: it is not used in the forward pass, or the "
    "graph to it is cut. DDP fails on such parameters (find_unused_parameters) and they never train.",
    "Remove the unused parameter, set requires_grad=False on it, or reconnect it to the loss.")
SCALER_SKIPPING = define("guards_scaler_skipping", Severity.GAP, F, "The GradScaler skips most optimizer steps",
    "Over the last N iterations, most optimizer steps were skipped because the scaled gradients held Inf/NaN "
    "(detected from the scale drop and the optimizer's step count); the scheduler may keep decaying meanwhile.",
    "Look for NaN in the forward pass; compute the loss in float32; do not combine bfloat16 with GradScaler; "
    "step the scheduler only after a real optimizer step (guards.SteppedOnly).")
SCALER_COLLAPSED = define("guards_scaler_collapsed", Severity.GAP, F, "The loss scale collapsed to its minimum",
    "The GradScaler's scale fell to or below the minimum: the gradients overflow even without scaling, so every "
    "step is skipped. Scaling cannot fix this; the values themselves are Inf/NaN.",
    "Find the first NaN/Inf in the forward pass (anomaly detection, GradientHealth); lower the learning rate.")
SCALER_BF16 = define("guards_scaler_bf16", Severity.WARNING, F, "GradScaler used with bfloat16",
    "bfloat16 has float32's exponent range, so loss scaling is unnecessary; a GradScaler on bfloat16 gradients "
    "only adds skipped steps and a scale that can collapse.",
    "Drop the GradScaler (or construct it with enabled=False) when autocasting to bfloat16.")
BN_POLLUTION = define("guards_bn_pollution", Severity.GAP, F, "Validation changed BatchNorm statistics",
    "A validation pass changed running_mean, running_var or num_batches_tracked of a normalization layer: it ran "
    "in train mode, so the validation data leaked into the statistics the model will use at inference.",
    "Call model.eval() before validating (guards.EvalGuard does it) and do not call model.train() inside it.")
EVAL_TRAIN_MODE = define("guards_eval_train_mode", Severity.GAP, F, "Modules were in train mode during validation",
    "After the validation block, modules are in train mode: something called .train() inside it, so dropout and "
    "BatchNorm behaved as in training and the validation numbers are not the inference numbers.",
    "Find the .train() call inside validation (often a helper or a callback) and move it after validation.")
SPLIT_OVERLAP = define("guards_split_overlap", Severity.GAP, F, "The same sample is in two splits",
    "Items of the two datasets have the same canonical tensor fingerprint (dtype, shape and values): validation "
    "scores on them measure memorisation, not generalisation.",
    "Deduplicate before splitting; split by a group key (patient, video, user) rather than by item.")
INPUT_CONTRACT = define("guards_input_contract", Severity.GAP, F, "A model input breaks its contract",
    "The model was called with an input of another dtype, outside the declared value range, with NaN/Inf, or "
    "in another layout (e.g. NHWC where NCHW is expected) than the contract declares.",
    "Fix the preprocessing that produced the input (missing normalization, ToTensor, permute or dtype cast).")
NONDETERMINISTIC = define("guards_nondeterministic", Severity.GAP, F, "Two identical training runs differ",
    "The same model trained twice with the same seed ends with different weights (assert_close semantics, the "
    "tolerances of export-diff); the first differing parameter or buffer is named.",
    "Seed every generator (guards.seed_everything, deterministic_loader_kwargs for DataLoaders); look for "
    "modules with their own unseeded generator; use torch.use_deterministic_algorithms(True).")
TRIAL_LEAK = define("guards_trial_leak", Severity.GAP, F, "A trial left tensor memory behind",
    "After the trial's model, gradients and optimizer state were released and the garbage collector ran, more "
    "tensor memory is alive than before the trial: something still references tensors (a list of losses "
    "without .item(), a closure, a global cache), so a hyperparameter search runs out of memory after N trials.",
    "Store Python numbers (loss.item()) instead of tensors; clear caches and callbacks that hold the model.")
PROFILE_BOTTLENECK = define("guards_profile_bottleneck", Severity.INFO, F, "Where the training step spends its time",
    "The phase (data loading, host-to-device copy, forward/backward, optimizer, sync wait, other) with the "
    "largest share of step time, with the usual remedy. Informational when it is forward/backward; a warning "
    "when the step waits on something else.",
    "Follow the remedy named with the phase (more DataLoader workers, pin_memory, fused optimizers, fewer "
    ".item() calls in the step).")
INPUT_STARVED = define("guards_input_starved", Severity.GAP, F, "The training loop is starved by data loading",
    "Data loading (plus the host-to-device copy) takes a larger share of step time than the limit given: the "
    "accelerator waits for input.",
    "Raise num_workers, use pin_memory=True and persistent_workers=True, decode and augment faster, or cache.")

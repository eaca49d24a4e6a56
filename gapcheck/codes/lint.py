"""Finding codes of ``gapcheck lint``: the training-code review checklist, one code per risk.

Codes are grouped by hundreds: GC1xx leakage, GC2xx distributed data parallel, GC3xx mixed
precision, GC4xx evaluation, GC5xx data loading, GC6xx reproducibility, GC7xx hyper-parameter
search, GC8xx safety and loop hygiene. Every rule class in :mod:`gapcheck.lint.rules` points at
exactly one of these objects; the rule's one-line message is written where it fires.

The texts (severity, title, explanation, fix) are in ``lint.toml`` beside this module; adding a code is
one entry there plus one constant line here.
"""
from gapcheck.codes import catalog

_codes = catalog(__name__)

# --- GC1xx leakage -------------------------------------------------------------------------------
FIT_BEFORE_SPLIT = _codes["GC101"]
DATASET_NORMALIZES_ALL = _codes["GC102"]
VOCAB_FROM_ALL_SPLITS = _codes["GC103"]
FIT_ON_EVAL_DATA = _codes["GC104"]

# --- GC2xx distributed data parallel -------------------------------------------------------------
SAMPLER_WITHOUT_SET_EPOCH = _codes["GC201"]
SHUFFLE_WITH_SAMPLER = _codes["GC202"]

# --- GC3xx mixed precision ------------------------------------------------------------------------
SCALER_WITH_BF16 = _codes["GC301"]
SCHEDULER_AFTER_SKIPPED_STEP = _codes["GC302"]
CLIP_WITHOUT_UNSCALE = _codes["GC303"]
FP16_WITHOUT_SCALER = _codes["GC304"]
DEPRECATED_CUDA_AMP = _codes["GC305"]

# --- GC4xx evaluation -----------------------------------------------------------------------------
EVAL_WITHOUT_EVAL_MODE = _codes["GC401"]
EVAL_WITHOUT_NO_GRAD = _codes["GC402"]
TRAIN_MODE_NOT_RESTORED = _codes["GC403"]
RANDOM_AUG_IN_EVAL = _codes["GC404"]

# --- GC5xx data loading ---------------------------------------------------------------------------
EVAL_LOADER_DROP_LAST = _codes["GC501"]
EVAL_LOADER_SHUFFLE = _codes["GC502"]
TRAIN_LOADER_BATCH_OF_ONE = _codes["GC503"]
EVAL_LOADER_FROM_TRAIN = _codes["GC504"]

# --- GC6xx reproducibility ------------------------------------------------------------------------
ENTRY_POINT_WITHOUT_SEED = _codes["GC601"]
WORKERS_WITHOUT_SEEDING = _codes["GC602"]
BENCHMARK_WITH_DETERMINISM = _codes["GC603"]

# --- GC7xx hyper-parameter search -----------------------------------------------------------------
HPO_MODEL_NOT_RELEASED = _codes["GC701"]
TRIAL_PRUNED_WITHOUT_CLEANUP = _codes["GC702"]

# --- GC8xx safety and loop hygiene ----------------------------------------------------------------
TORCH_LOAD_UNSAFE = _codes["GC801"]
LOSS_ACCUMULATED_WITH_GRAPH = _codes["GC802"]
MISSING_ZERO_GRAD = _codes["GC803"]
ZERO_GRAD_BEFORE_STEP = _codes["GC804"]
SCHEDULER_BEFORE_STEP = _codes["GC805"]

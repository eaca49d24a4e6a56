"""Finding codes of ``gapcheck lint``: the training-code review checklist, one code per risk.

Codes are grouped by hundreds: GC1xx leakage, GC2xx distributed data parallel, GC3xx mixed
precision, GC4xx evaluation, GC5xx data loading, GC6xx reproducibility, GC7xx hyper-parameter
search, GC8xx safety and loop hygiene. Every rule class in :mod:`gapcheck.lint.rules` points at
exactly one of these objects; the rule's one-line message is written where it fires.
"""
from gapcheck.codes import define
from gapcheck.findings import Severity

F = "lint"
GAP, INFO = Severity.GAP, Severity.INFO

# --- GC1xx leakage -------------------------------------------------------------------------------
FIT_BEFORE_SPLIT = define("GC101", GAP, F, "Preprocessing fit on data that is split afterwards",
    "A scaler, encoder, PCA or target encoder is fit (fit / fit_transform) on an array that is only later split "
    "into train and validation/test (train_test_split, random_split, KFold, index slicing). Its statistics then "
    "include the validation/test rows, and every metric computed on them is optimistic.",
    "Split first, fit the transformer on the training part only, then transform the others "
    "(or put it in a sklearn Pipeline that is fit inside the cross-validation).")
DATASET_NORMALIZES_ALL = define("GC102", GAP, F, "Dataset.__init__ normalizes everything it loads before the split",
    "A Dataset computes normalization statistics (mean/std, min/max, a fitted scaler) over every sample it loads "
    "in __init__, and the same dataset object is then split into train and validation/test. The validation "
    "samples shaped the statistics the model trains with.",
    "Pass the statistics in (computed on the training indices only), or normalize after the split.")
VOCAB_FROM_ALL_SPLITS = define("GC103", GAP, F, "Vocabulary or token table built from all splits",
    "A vocabulary, tokenizer or label table is built from an iterator that contains validation/test text "
    "(train + test concatenated, or the full corpus that is split afterwards). Tokens seen only in the "
    "held-out data get their own ids, which leaks information about it.",
    "Build the vocabulary from the training split only; map unseen tokens to <unk>.")
FIT_ON_EVAL_DATA = define("GC104", GAP, F, "fit called on validation or test data",
    "fit / fit_transform is called with validation or test data as its input, so the model or transformer "
    "learns from the data it is evaluated on.",
    "Fit on the training data; call transform (or predict) on validation and test data.")

# --- GC2xx distributed data parallel -------------------------------------------------------------
SAMPLER_WITHOUT_SET_EPOCH = define("GC201", GAP, F, "DistributedSampler without set_epoch in the epoch loop",
    "A DistributedSampler shuffles with a seed derived from its epoch. When the epoch loop never calls "
    "sampler.set_epoch(epoch), every epoch visits the samples in the same order on every rank.",
    "Call train_sampler.set_epoch(epoch) at the start of every epoch, before iterating the DataLoader.")
SHUFFLE_WITH_SAMPLER = define("GC202", GAP, F, "DataLoader gets shuffle=True together with a sampler",
    "DataLoader's shuffle and sampler/batch_sampler are mutually exclusive: the combination raises at "
    "construction, or (when shuffle is computed) hides that the sampler decides the order.",
    "Drop shuffle=True and let the sampler shuffle (DistributedSampler(shuffle=True) is the default).")

# --- GC3xx mixed precision ------------------------------------------------------------------------
SCALER_WITH_BF16 = define("GC301", GAP, F, "GradScaler used with bfloat16 autocast",
    "bfloat16 has the exponent range of float32, so gradients do not underflow and loss scaling only adds "
    "work and skipped steps (inf checks on a dtype that does not need them).",
    "Remove the GradScaler under bfloat16 (keep it for float16), or enable it only when the dtype is float16.")
SCHEDULER_AFTER_SKIPPED_STEP = define("GC302", GAP, F, "LR scheduler stepped even when scaler.step skipped",
    "scaler.step(optimizer) skips the optimizer step when the gradients contain inf/NaN (and update() then "
    "lowers the scale). Stepping the scheduler unconditionally advances the learning-rate schedule for a step "
    "that never happened, and torch warns 'lr_scheduler.step() before optimizer.step()'.",
    "Compare scaler.get_scale() before and after scaler.update() and step the scheduler only when the scale "
    "did not drop.")
CLIP_WITHOUT_UNSCALE = define("GC303", GAP, F, "clip_grad_norm_ under a GradScaler without scaler.unscale_",
    "With a GradScaler the gradients are multiplied by the loss scale until scaler.step. Clipping them before "
    "scaler.unscale_(optimizer) clips the scaled values, so the threshold is effectively divided by the scale.",
    "Call scaler.unscale_(optimizer) after backward and before clip_grad_norm_.")
FP16_WITHOUT_SCALER = define("GC304", GAP, F, "float16 autocast in training without a GradScaler",
    "Training under float16 autocast without loss scaling lets small gradients underflow to zero; the model "
    "trains worse or not at all, without an error.",
    "Use torch.amp.GradScaler('cuda') with float16 (scaler.scale(loss).backward(); scaler.step(opt); "
    "scaler.update()), or switch to bfloat16.")
DEPRECATED_CUDA_AMP = define("GC305", INFO, F, "Deprecated torch.cuda.amp spelling",
    "torch.cuda.amp.autocast and torch.cuda.amp.GradScaler are deprecated aliases of torch.amp.autocast('cuda') "
    "and torch.amp.GradScaler('cuda'); they warn at run time and will be removed.",
    "Write torch.amp.autocast('cuda', ...) and torch.amp.GradScaler('cuda').")

# --- GC4xx evaluation -----------------------------------------------------------------------------
EVAL_WITHOUT_EVAL_MODE = define("GC401", GAP, F, "Validation/test loop without model.eval()",
    "Dropout stays active and BatchNorm keeps updating its running statistics with validation batches when the "
    "model is evaluated in training mode; the metric is noisy and the model changes during evaluation.",
    "Call model.eval() before the validation loop (and model.train() before training resumes).")
EVAL_WITHOUT_NO_GRAD = define("GC402", GAP, F, "Validation/test loop without no_grad or inference_mode",
    "Without torch.no_grad()/torch.inference_mode() every validation forward records an autograd graph: memory "
    "grows with the batch, and anything accumulated from the outputs keeps the graphs alive.",
    "Wrap the loop in `with torch.no_grad():` or decorate the function with @torch.inference_mode().")
TRAIN_MODE_NOT_RESTORED = define("GC403", GAP, F, "model.train() not restored after evaluation in the epoch loop",
    "The epoch loop evaluates (model.eval()) and then trains the next epoch without calling model.train(): "
    "from the second epoch on, dropout is off and BatchNorm statistics are frozen during training.",
    "Call model.train() at the start of every training epoch (inside the loop, or at the top of train_one_epoch).")
RANDOM_AUG_IN_EVAL = define("GC404", GAP, F, "Random augmentation in a validation/test pipeline",
    "A validation/test transform contains random augmentation (RandomResizedCrop, RandomHorizontalFlip, "
    "ColorJitter, albumentations' random transforms, ...), or a random_split subset used for validation "
    "shares the training dataset's augmenting transform. The metric changes from run to run and measures "
    "augmented images instead of what inference sees.",
    "Give validation/test their own deterministic transform (Resize + CenterCrop + Normalize); after "
    "random_split, wrap the validation subset in a dataset with the evaluation transform.")

# --- GC5xx data loading ---------------------------------------------------------------------------
EVAL_LOADER_DROP_LAST = define("GC501", GAP, F, "Validation/test DataLoader with drop_last=True",
    "drop_last=True silently leaves the last partial batch out of the metric: up to batch_size - 1 samples "
    "are never evaluated.",
    "Use drop_last=False for validation and test loaders.")
EVAL_LOADER_SHUFFLE = define("GC502", GAP, F, "Validation/test DataLoader with shuffle=True",
    "Shuffling a validation/test loader makes per-sample outputs, saved predictions and any order-dependent "
    "metric differ between runs, and together with drop_last or a sample limit changes which samples count.",
    "Use shuffle=False for validation and test loaders.")
TRAIN_LOADER_BATCH_OF_ONE = define("GC503", GAP, F, "Training loader can end with a batch of size 1 under BatchNorm/DDP",
    "With BatchNorm1d or SyncBatchNorm a last batch of a single sample raises 'Expected more than 1 value per "
    "channel' (or trains on a one-sample statistic); under DDP the ranks' last batches differ in size.",
    "Set drop_last=True on the training DataLoader (or on the DistributedSampler).")
EVAL_LOADER_FROM_TRAIN = define("GC504", GAP, F, "Validation/test loader built from the training dataset",
    "The validation/test DataLoader wraps the training dataset object, so the model is evaluated on the data "
    "it was trained on.",
    "Build the validation loader from the validation dataset (or the validation subset of a split).")

# --- GC6xx reproducibility ------------------------------------------------------------------------
ENTRY_POINT_WITHOUT_SEED = define("GC601", GAP, F, "Training entry point without seeds",
    "The program trains a model but never seeds torch (and the numpy / random generators it uses), so two "
    "runs of the same commit initialise and shuffle differently and results cannot be reproduced.",
    "Seed every generator at the start of the entry point: torch.manual_seed, numpy.random.seed, random.seed "
    "(or lightning's seed_everything / transformers' set_seed).")
WORKERS_WITHOUT_SEEDING = define("GC602", GAP, F, "numpy's global RNG in DataLoader workers on torch < 1.9",
    "Before torch 1.9 every DataLoader worker started with a copy of the parent's numpy RNG state, so a Dataset or "
    "transform drawing from numpy's global RNG produced the same 'random' numbers in every worker (and every "
    "epoch). Since 1.9 the DataLoader seeds numpy, random and torch in each worker from base_seed + worker id "
    "(base_seed drawn from the main process's torch generator), so the rule only fires for projects that declare "
    "support for torch < 1.9 (requirements or --target-torch).",
    "Pass worker_init_fn=lambda i: np.random.seed(torch.initial_seed() % 2**32) (or use a per-sample "
    "np.random.default_rng), and generator=torch.Generator().manual_seed(seed) for reproducible runs; or require "
    "torch >= 1.9.")
BENCHMARK_WITH_DETERMINISM = define("GC603", GAP, F, "cudnn.benchmark on while determinism is claimed",
    "torch.backends.cudnn.benchmark = True picks convolution algorithms by timing them, which differs between "
    "runs; it contradicts cudnn.deterministic / torch.use_deterministic_algorithms(True) set in the same program.",
    "Set torch.backends.cudnn.benchmark = False when you ask for deterministic results.")

# --- GC7xx hyper-parameter search -----------------------------------------------------------------
HPO_MODEL_NOT_RELEASED = define("GC701", GAP, F, "HPO objective creates a model and never releases it",
    "An Optuna / Ray Tune objective builds a model on the device and returns (or is pruned) without releasing "
    "it. Tracebacks of pruned trials and the caching allocator keep the memory, and trials slow down or run "
    "out of memory one after another.",
    "Release the model in a finally block: del model, optimizer; gc.collect(); torch.cuda.empty_cache().")
TRIAL_PRUNED_WITHOUT_CLEANUP = define("GC702", GAP, F, "TrialPruned caught without cleanup",
    "An except TrialPruned handler re-raises or returns without freeing the trial's model; the exception's "
    "traceback holds the frame and with it every tensor of the trial.",
    "Free the model (del, gc.collect(), torch.cuda.empty_cache()) in the handler or a finally block.")

# --- GC8xx safety and loop hygiene ----------------------------------------------------------------
TORCH_LOAD_UNSAFE = define("GC801", GAP, F, "torch.load without weights_only=True",
    "torch.load unpickles the file; without weights_only=True a crafted checkpoint runs arbitrary code on torch "
    "< 2.6, where the unsafe mode is the default (and on any version with weights_only=False). Where the project "
    "requires torch >= 2.6 (its declared requirement or --target-torch) a call that does not pass False is safe by "
    "default and reported as info only.",
    "Call torch.load(path, weights_only=True, map_location=...) (gapcheck lint --fix adds it); load foreign "
    "formats with safetensors.")
LOSS_ACCUMULATED_WITH_GRAPH = define("GC802", GAP, F, "Loss tensor accumulated across steps without .item()/.detach()",
    "Adding the loss tensor itself to a running total keeps every step's autograd graph alive: memory grows "
    "every step until the epoch ends (or the process runs out).",
    "Accumulate loss.item() (or loss.detach()).")
MISSING_ZERO_GRAD = define("GC803", GAP, F, "optimizer.zero_grad() missing from the step loop",
    "Gradients accumulate in .grad until they are cleared. A loop that calls backward and optimizer.step "
    "without zero_grad adds every previous step's gradient to the current one.",
    "Call optimizer.zero_grad(set_to_none=True) once per step (before backward, or after step).")
ZERO_GRAD_BEFORE_STEP = define("GC804", GAP, F, "zero_grad between backward and optimizer.step",
    "The expected order is zero_grad -> backward -> (unscale_ -> clip) -> step. Clearing the gradients after "
    "backward and before step makes the step a no-op.",
    "Move zero_grad before backward (or after step).")
SCHEDULER_BEFORE_STEP = define("GC805", GAP, F, "LR scheduler stepped before optimizer.step",
    "Since torch 1.1 the scheduler must be stepped after the optimizer. Stepping it first skips the first "
    "value of the schedule and shifts every later one.",
    "Call scheduler.step() after optimizer.step() (or after scaler.step/update).")

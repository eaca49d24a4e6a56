"""Finding codes of the data checks: `gapcheck leakage` and `gapcheck drift` (and the pytest plugin)."""
from gapcheck.codes import define
from gapcheck.findings import Severity

F = "data"

EXACT_DUPLICATE = define("exact_duplicate", Severity.GAP, F, "The same sample is in two splits",
    "Two splits hold an identical item: the same file bytes, the same decoded pixels (a lossless re-save or an "
    "EXIF-stripped copy), or the same canonicalized table row or key. Validation scores on it measure memory.",
    "Deduplicate before splitting (split by content hash), then re-split.")
DUPLICATE_WITHIN = define("duplicate_within_split", Severity.GAP, F, "The same sample is in one split twice",
    "A split checked within (validation and test splits by default) holds an identical item twice: the same file "
    "bytes, the same decoded pixels, or the same canonical table row or key. Its score counts that sample twice "
    "(cleanlab's Datalab and fastdup report these too). Reported apart from duplicates across splits.",
    "Deduplicate the split (keep one of each group of copies), or split by content hash.")
NEAR_DUPLICATE_WITHIN = define("near_duplicate_within_split", Severity.GAP, F,
    "A near copy of a sample is in the same split",
    "Two images of a split checked within are within the perceptual-hash (pHash) Hamming threshold of each other: "
    "a re-encode, resize or small crop of one photo counted twice in that split's score.",
    "Keep one image per group of near copies, or tune --near if the pairs are truly distinct.")
NEAR_DUPLICATE = define("near_duplicate", Severity.GAP, F, "A near copy of a sample is in another split",
    "An image in one split is within the perceptual-hash (pHash) Hamming threshold of an image in another split: "
    "a JPEG re-encode, a small resize or crop of the same photo.",
    "Group near duplicates (same source image) and split by group; tune --near if the pairs are truly distinct.")
GROUP_OVERLAP = define("group_overlap", Severity.GAP, F, "A group is in two splits",
    "The same group id (patient, source image, session, user) appears in two splits, so the model can learn the "
    "group instead of the task.",
    "Split by group (e.g. sklearn GroupShuffleSplit) rather than by sample.")
LABEL_CONFLICT = define("label_conflict", Severity.GAP, F, "Duplicates carry different labels",
    "Identical or near-identical samples have different labels: label noise, or a label that depends on "
    "something not in the sample.",
    "Review the listed items and fix or drop the wrong labels.")
LABEL_MISSING = define("label_missing", Severity.WARNING, F, "Samples without a label",
    "Some samples of a split have no label (missing in the labels file, an empty or NaN label cell).",
    "Label them or drop them explicitly before training.")
TARGET_LEAKAGE = define("target_leakage", Severity.GAP, F, "A feature predicts the label too well",
    "A single feature predicts the label almost perfectly, or much better in one split than in another: the "
    "signature of a target encoding fit with that split's labels, or of a column derived from the label.",
    "Fit encodings on the training split only (out-of-fold inside it); drop columns computed from the label.")
DRIFT = define("drift", Severity.GAP, F, "A feature's distribution shifted",
    "The two-sample test rejects equality after Benjamini–Hochberg correction AND the effect size (KS D, "
    "Wasserstein distance in reference-std units, or Cramér's V for categories) is at least the minimum, so "
    "noise in large samples is not flagged.",
    "Find which step produces the feature differently (source, time window, preprocessing) or re-split.")
DRIFT_UNDERPOWERED = define("drift_underpowered", Severity.INFO, F, "Too few rows to see a shift of the minimum effect",
    "With these sample sizes and p-threshold the test can only call an effect significant above the minimum "
    "effect (KS: the critical D = sqrt(-ln(p/2)/2) * sqrt((n+m)/(n*m)); chi-square: the critical Cramér's V; the "
    "missing-values z-test: the smallest change of the missing rate it calls significant, against the minimum "
    "null-rate shift), so 'no drift' here says little: a 20-row split cannot show a shift of 0.1. The smallest "
    "detectable effect is stated per feature.",
    "Compare more rows, or accept the stated detectable effect (raise the minimum effect); the pytest plugin fails "
    "on this only with --gapcheck-fail-underpowered.")
MISSING_VALUES_SHIFT = define("missing_values_shift", Severity.GAP, F, "The share of missing values changed",
    "A feature's null rate differs between the reference and the current split by more than the minimum effect.",
    "Check the pipeline that fills this feature for the current split (a join that stopped matching, a new source).")
COVERAGE_GAP = define("coverage_gap", Severity.WARNING, F, "The current split misses part of the reference range",
    "Some quantile bins of the reference (often its tails) hold almost none of the current split, even when the "
    "KS test is quiet; metrics on the current split say nothing about that range.",
    "Collect or keep samples that cover the reference's range, or report metrics per range.")
BAD_INPUT = define("bad_input", Severity.WARNING, F, "Items that could not be read",
    "Some items could not be used: an unreadable or corrupt image, a cell that does not fit its column's type, "
    "an all-NaN column, a symlink loop. They are counted and listed, not silently dropped.",
    "Fix or remove the listed items; a check over the rest is still reported.")
EMPTY_SPLIT = define("empty_split", Severity.GAP, F, "A split has no usable items",
    "A split (or the reference/current side) is empty or none of its items could be read, so nothing can be "
    "compared for it.",
    "Point the split at the right folder or file, or fix its items.")
SHARD_FAILED = define("shard_failed", Severity.GAP, F, "A shard of work kept failing",
    "The engine retried a shard (a worker died or raised) and it still failed; its items are not in the result.",
    "Read the error; rerun with --engine serial --debug to see the traceback for those items.")
NEAR_UNCHECKED = define("near_duplicate_unchecked", Severity.INFO, F, "Images too small for perceptual hashes",
    "Images smaller than 32 pixels on a side were compared for exact duplicates only: pHash resamples to 32x32, "
    "so distinct tiny images (8x8 digits, icons) hash within a few bits of each other.",
    "Nothing to fix; near copies of these images are not searched.")
MIXED_DECODERS = define("mixed_decoders", Severity.WARNING, F, "Workers decoded images with different libraries",
    "The perceptual hashes depend on the decode path (PIL and imagehash versions); some workers used another one, "
    "so near-duplicate distances across their shards are not comparable.",
    "Run every worker from the same image or environment (same PIL and imagehash versions).")

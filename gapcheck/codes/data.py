"""Finding codes of the data checks: `gapcheck leakage` and `gapcheck drift` (and the pytest plugin).

The texts (severity, title, explanation, fix) are in ``data.toml`` beside this module; adding a code is
one entry there plus one constant line here.
"""
from gapcheck.codes import catalog

_codes = catalog(__name__)

EXACT_DUPLICATE = _codes["exact_duplicate"]
DUPLICATE_WITHIN = _codes["duplicate_within_split"]
NEAR_DUPLICATE_WITHIN = _codes["near_duplicate_within_split"]
NEAR_DUPLICATE = _codes["near_duplicate"]
GROUP_OVERLAP = _codes["group_overlap"]
COLUMNS_DIFFER = _codes["columns_differ"]
IDENTIFIER_IN_ROWS = _codes["identifier_in_rows"]
LABEL_CONFLICT = _codes["label_conflict"]
LABEL_MISSING = _codes["label_missing"]
TARGET_LEAKAGE = _codes["target_leakage"]
DRIFT = _codes["drift"]
DRIFT_UNDERPOWERED = _codes["drift_underpowered"]
IDENTIFIER_COLUMN = _codes["identifier_column"]
MISSING_VALUES_SHIFT = _codes["missing_values_shift"]
INFINITE_VALUES_SHIFT = _codes["infinite_values_shift"]
INFINITE_VALUES = _codes["infinite_values"]
COVERAGE_GAP = _codes["coverage_gap"]
BAD_INPUT = _codes["bad_input"]
EMPTY_SPLIT = _codes["empty_split"]
SHARD_FAILED = _codes["shard_failed"]
NEAR_UNCHECKED = _codes["near_duplicate_unchecked"]
MIXED_DECODERS = _codes["mixed_decoders"]
EXIF_ORIENTATION_DIFFERS = _codes["exif_orientation_differs"]
TIME_ORDERED_SPLIT = _codes["time_ordered_split"]
ROWS_REPEAT = _codes["rows_repeat_within_splits"]

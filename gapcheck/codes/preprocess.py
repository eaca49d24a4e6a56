"""Finding codes of preprocess-audit: the same raw samples through train / val / inference preprocessing.

The texts (severity, title, explanation, fix) are in ``preprocess.toml`` beside this module; adding a code is
one entry there plus one constant line here.
"""
from gapcheck.codes import catalog

_codes = catalog(__name__)

CHANNEL_ORDER = _codes["channel_order"]
LAYOUT = _codes["layout"]
SCALE = _codes["scale"]
NORMALIZATION = _codes["normalization"]
RESIZE = _codes["resize"]
CROP = _codes["crop"]
DTYPE = _codes["dtype"]
SHAPE = _codes["shape"]
UNEXPLAINED = _codes["unexplained"]
STAGE_ERROR = _codes["stage_error"]
NONFINITE_OUTPUT = _codes["nonfinite_output"]
NONDETERMINISTIC = _codes["nondeterministic"]
DISTRIBUTION_SHIFT = _codes["distribution_shift"]
UNREADABLE = _codes["unreadable"]
NOT_IMAGE = _codes["not_image"]
CORRUPT_IMAGE = _codes["corrupt_image"]
DECOMPRESSION_BOMB = _codes["decompression_bomb"]
GRAYSCALE_INPUT = _codes["grayscale_input"]
ALPHA_INPUT = _codes["alpha_input"]
HIGH_BIT_DEPTH_INPUT = _codes["high_bit_depth_input"]
ORIENTATION = _codes["orientation"]
ALPHA_COMPOSITE = _codes["alpha_composite"]
PALETTE_INDICES = _codes["palette_indices"]
SIZE_ROUNDING = _codes["size_rounding"]
GRAYSCALE_CONVERSION = _codes["grayscale_conversion"]

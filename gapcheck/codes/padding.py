"""Finding codes of the padding-invariance check (export-diff --pad-check).

The texts (severity, title, explanation, fix) are in ``padding.toml`` beside this module; adding a code is
one entry there plus one constant line here.
"""
from gapcheck.codes import catalog

_codes = catalog(__name__)

PADDING_DEPENDENCE = _codes["padding_dependence"]
MASK_IGNORED = _codes["mask_ignored"]
PADDING_NOT_CHECKED = _codes["padding_not_checked"]

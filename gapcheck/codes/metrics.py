"""Finding codes of check_metric: a hand-written validation metric against its scikit-learn reference.

The texts (severity, title, explanation, fix) are in ``metrics.toml`` beside this module; adding a code is
one entry there plus one constant line here.
"""
from gapcheck.codes import catalog

_codes = catalog(__name__)

METRIC_MISMATCH = _codes["metric_mismatch"]
METRIC_UNDEFINED = _codes["metric_undefined_case"]

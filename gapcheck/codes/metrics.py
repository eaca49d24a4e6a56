"""Finding codes of check_metric: a hand-written validation metric against its scikit-learn reference."""
from gapcheck.codes import define
from gapcheck.findings import Severity

F = "metrics"

METRIC_MISMATCH = define(
    "metric_mismatch", Severity.GAP, F, "A custom metric disagrees with its reference",
    """The user's metric function and the scikit-learn reference give different values (beyond tolerance) on the
    user's data or on a generated edge case (a class absent from the predictions, a single class, tied scores,
    all correct, empty input), or one of them raises where the other returns a value. The case, both values and the
    error are named: the last number of every training report is only as right as this function.""",
    "Compare the averaging (micro/macro/weighted), the zero-division convention and the handling of absent classes "
    "with the reference; or call the reference implementation directly.")
METRIC_UNDEFINED = define(
    "metric_undefined_case", Severity.INFO, F, "The reference metric is undefined on an edge case",
    """On this generated case the reference itself raises or returns NaN (e.g. ROC-AUC with one class in y_true);
    the custom metric's value there is shown for information, not compared.""",
    "Decide what the metric should report on such data (NaN, an error, or a documented convention).")

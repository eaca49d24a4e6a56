"""Metric alignment: compare a hand-written metric with the scikit-learn reference.

``check_metric(my_f1, "f1_macro", y_true, y_pred)`` runs both on the user's data and on
generated edge cases (a class absent from the predictions, a single class, tied scores,
all correct, all wrong, empty input) and returns a :class:`MetricCheckResult` that
implements the report contract; :func:`assert_metric_matches` is the pytest helper.
Values are compared with the same rule as everywhere in gapcheck (``|a - e| <= atol +
rtol * |e|``, NaN matches NaN). scikit-learn is imported only when a check runs.
"""
from gapcheck.metrics.check import (
    REFERENCES,
    CaseOutcome,
    MetricCheckResult,
    MetricTimeout,
    assert_metric_matches,
    check_metric,
)

__all__ = ["REFERENCES", "CaseOutcome", "MetricCheckResult", "MetricTimeout", "assert_metric_matches", "check_metric"]

"""The reference metrics (scikit-learn) by name, and what kind of prediction each takes.

"labels" metrics take predicted class labels (n,); "scores" metrics take scores or
probabilities: (n,) for binary (score of the positive class) or (n, C) for C classes.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Reference:
    name: str
    kind: str  # "labels" | "scores"
    compute: Callable[[np.ndarray, np.ndarray, dict[str, Any]], float]
    doc: str


def _sk() -> Any:
    try:
        import sklearn.metrics as metrics
    except ImportError as exc:  # pragma: no cover - scikit-learn is a dependency
        from gapcheck.errors import UsageError
        raise UsageError("metric references need scikit-learn (pip install scikit-learn)") from exc
    return metrics


def _averaged(fn_name: str, average: str) -> Callable[[np.ndarray, np.ndarray, dict[str, Any]], float]:
    def compute(y_true: np.ndarray, y_pred: np.ndarray, options: dict[str, Any]) -> float:
        fn = getattr(_sk(), fn_name)
        return float(fn(y_true, y_pred, average=average, labels=options.get("labels"), zero_division=0))
    return compute


def _accuracy(y_true: np.ndarray, y_pred: np.ndarray, options: dict[str, Any]) -> float:
    return float(_sk().accuracy_score(y_true, y_pred))


def _roc_auc(y_true: np.ndarray, scores: np.ndarray, options: dict[str, Any]) -> float:
    kwargs: dict[str, Any] = {}
    if scores.ndim == 2 and scores.shape[1] == 2 and np.unique(y_true).size <= 2:
        scores = scores[:, 1]  # softmax over two logits: column 1 is the positive class (sklearn wants it 1-D)
    if scores.ndim == 2:
        kwargs = {"multi_class": "ovr", "average": options.get("average", "macro"), "labels": options.get("labels")}
    return float(_sk().roc_auc_score(y_true, scores, **kwargs))


def _column_labels(scores: np.ndarray, options: dict[str, Any]) -> Any:
    """The user's labels, else column i scores class i: a class missing from y_true is still a class."""
    labels = options.get("labels")
    return np.arange(scores.shape[1]) if labels is None and scores.ndim == 2 else labels


def _log_loss(y_true: np.ndarray, scores: np.ndarray, options: dict[str, Any]) -> float:
    return float(_sk().log_loss(y_true, scores, labels=_column_labels(scores, options)))


def _top_k(y_true: np.ndarray, scores: np.ndarray, options: dict[str, Any]) -> float:
    labels = _column_labels(scores, options)
    return float(_sk().top_k_accuracy_score(y_true, scores, k=int(options.get("k", 5)), labels=labels))


def _average_precision(y_true: np.ndarray, scores: np.ndarray, options: dict[str, Any]) -> float:
    if scores.ndim == 2 and y_true.ndim == 1:  # multiclass: one-vs-rest indicator matrix
        labels = options.get("labels")
        classes = np.arange(scores.shape[1]) if labels is None else np.asarray(labels)
        y_true = (y_true[:, None] == classes[None, :]).astype(int)
    return float(_sk().average_precision_score(y_true, scores, average=options.get("average", "macro")))


REFERENCES: dict[str, Reference] = {
    "accuracy": Reference("accuracy", "labels", _accuracy, "share of exact matches"),
    **{f"{metric}_{avg}": Reference(f"{metric}_{avg}", "labels", _averaged(f"{metric}_score", avg),
                                     f"{metric} with {avg} averaging, zero_division=0")
       for metric in ("precision", "recall", "f1") for avg in ("micro", "macro", "weighted")},
    "roc_auc": Reference("roc_auc", "scores", _roc_auc, "ROC-AUC (binary, or one-vs-rest macro for (n, C) scores)"),
    "log_loss": Reference("log_loss", "scores", _log_loss, "cross-entropy of probabilities"),
    "top_k_accuracy": Reference("top_k_accuracy", "scores", _top_k, "true label among the k best scores (k option)"),
    "average_precision": Reference("average_precision", "scores", _average_precision,
                                   "mean average precision (mAP) over classes, one-vs-rest"),
}

"""check_metric: a custom metric against its reference on the user's data and on generated edge cases."""
from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from gapcheck.codes.metrics import METRIC_MISMATCH, METRIC_UNDEFINED
from gapcheck.compare import Tolerance
from gapcheck.errors import UsageError, one_line
from gapcheck.findings import Finding, Subject
from gapcheck.metrics.references import REFERENCES, Reference
from gapcheck.report.contract import Check, ResultBase, Table

if TYPE_CHECKING:
    from typing_extensions import Unpack

# float64 arithmetic on a few hundred values: differences above this are a different formula, not rounding.
DEFAULT_TOLERANCE = Tolerance(rtol=1e-6, atol=1e-9)


@dataclass(frozen=True)
class Case:
    name: str
    y_true: np.ndarray
    y_pred: np.ndarray


@dataclass(frozen=True)
class CaseOutcome:
    case: str
    n: int
    reference: float | None  # None: the reference is undefined here (raised or NaN)
    custom: float | None  # None: the custom metric raised
    error: str = ""  # what raised, shortened
    abs_error: float | None = None
    passed: bool = True
    note: str = ""


@dataclass(frozen=True)
class MetricCheckResult(ResultBase):
    metric: str = ""
    reference: str = ""
    outcomes: tuple[CaseOutcome, ...] = ()
    findings: tuple[Finding, ...] = ()
    tolerance: Tolerance = DEFAULT_TOLERANCE
    command: str = "check-metric"
    extra_timings: dict[str, float] = field(default_factory=dict)

    @property
    def headline(self) -> str:
        failing = [o.case for o in self.outcomes if not o.passed]
        if not failing:
            return f"{self.metric} matches {self.reference} on {len(self.outcomes)} case(s)"
        return f"{self.metric} disagrees with {self.reference} on: {', '.join(failing)}"

    def sections(self) -> dict[str, Any]:
        return {"metric": self.metric, "reference": self.reference,
                "tolerance": {"rtol": self.tolerance.rtol, "atol": self.tolerance.atol},
                "cases": [outcome.__dict__ for outcome in self.outcomes]}

    def views(self) -> Sequence[Table]:
        rows = tuple((o.case, o.n, _fmt(o.reference), _fmt(o.custom) if not o.error else f"raised: {o.error}",
                      _fmt(o.abs_error), "ok" if o.passed else "MISMATCH", o.note) for o in self.outcomes)
        failing = tuple(i for i, o in enumerate(self.outcomes) if not o.passed)
        return (Table(f"{self.metric} vs {self.reference}", ("case", "n", "reference", "custom", "|Δ|", "verdict", "note"),
                      rows, highlight=failing),)

    def checks(self) -> Sequence[Check]:
        return [Check(name=o.case, classname=f"check-metric.{self.reference}",
                      failure=None if o.passed else f"reference {_fmt(o.reference)} vs custom {_fmt(o.custom)} {o.error}")
                for o in self.outcomes]

    def table_text(self) -> str:
        table = self.views()[0]
        lines = [" | ".join(table.columns)] + [" | ".join(str(c) for c in row) for row in table.rows]
        return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.6g}"


class MetricTimeout(UsageError):
    """The custom metric did not return within the deadline."""


def _scalar(value: Any) -> float:
    """The metric's value as a float; anything that is not one number (None, a string, a vector) is an error."""
    if hasattr(value, "detach"):  # a torch tensor, without importing torch
        if value.numel() != 1:
            raise TypeError(f"the metric returned a tensor of shape {tuple(value.shape)}, not one number")
        value = value.detach().cpu().item()
    if value is None or isinstance(value, (str, bytes)):
        # np.asarray("0.5", float) would quietly parse it; None would become NaN and pass as "undefined"
        raise TypeError(f"the metric returned {type(value).__name__} {value!r:.40}, not a number")
    array = np.asarray(value)
    if array.size != 1 or array.dtype.kind not in "biuf":
        raise TypeError(f"the metric returned {type(value).__name__} of shape {array.shape}, not one number")
    return float(array.astype(np.float64).reshape(()))


def _call_with_deadline(fn: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Run ``fn`` in a daemon thread and wait at most ``timeout_s``; a hung metric cannot hang the check."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="gapcheck-metric", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():  # the thread cannot be killed; it is a daemon, so it does not keep the process alive
        raise MetricTimeout(f"{what} did not return within {timeout_s:g} s; raise timeout_s if it is just slow")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _run(fn: Callable[..., Any], case: Case, as_torch: bool = False, timeout_s: float | None = None,
         what: str = "", **kwargs: Any) -> tuple[float | None, str]:
    # own copies: a metric that works in place (clipping scores, sorting) must not change the caller's arrays
    # or the next case's
    y_true, y_pred = case.y_true.copy(), case.y_pred.copy()
    if as_torch:  # the user's metric was given tensors: hand it tensors on every case
        import torch
        y_true, y_pred = torch.from_numpy(np.ascontiguousarray(y_true)), torch.from_numpy(np.ascontiguousarray(y_pred))
    try:
        with warnings.catch_warnings():  # sklearn's UndefinedMetricWarning, numpy's empty-mean: outcomes, not noise
            warnings.simplefilter("ignore")
            if timeout_s is None:
                value = _scalar(fn(y_true, y_pred, **kwargs))
            else:
                value = _scalar(_call_with_deadline(lambda: fn(y_true, y_pred, **kwargs), timeout_s,
                                                    f"{what} on case '{case.name}'"))
    except (MetricTimeout, KeyboardInterrupt):
        raise
    except BaseException as exc:  # noqa: BLE001 - a metric that raises is an outcome to report, not a crash;
        # BaseException too: a metric calling sys.exit(0) must not end the caller's script (quietly, with status 0)
        return None, one_line(exc, limit=120)
    return value, ""


def _label_cases(y_true: np.ndarray, y_pred: np.ndarray) -> list[Case]:
    classes = np.unique(np.concatenate([y_true, y_pred])) if y_true.size else np.arange(3)
    if classes.size < 2:  # a second class to confuse with, of the user's label type
        classes = np.arange(2) if not classes.size else _with_other_class(classes[0])
    truth = np.tile(classes, 4)
    wrong = np.roll(truth, 1)
    absent = truth.copy()
    absent[absent == classes[-1]] = classes[0]  # the last class never predicted
    single_truth = np.full_like(truth, classes[0])
    return [
        Case("all correct", truth, truth.copy()),
        Case("all wrong", truth, wrong),
        Case("class absent from predictions", truth, absent),
        Case("single class in y_true", single_truth, truth.copy()),
        Case("empty input", truth[:0], truth[:0]),
    ]


def _with_other_class(label: Any) -> np.ndarray:
    if isinstance(label, (bool, np.bool_)):
        return np.array([False, True])
    if isinstance(label, str):  # "cat" -> "cat", "cat_other"
        return np.array([label, f"{label}_other"])
    return np.array([label, label + 1])


def _score_cases(y_true: np.ndarray, scores: np.ndarray) -> list[Case]:
    n_classes = scores.shape[1] if scores.ndim == 2 else 2
    truth = np.tile(np.arange(n_classes), 4)
    if scores.ndim == 2:
        # the wrong classes get distinct small scores: a tie here would test tie-breaking (arbitrary for top-k),
        # not what the case is named after; rows still sum to 1 for log-loss
        confident: np.ndarray = np.tile((np.arange(n_classes) + 1.0) / (10.0 * n_classes * n_classes), (truth.size, 1))
        confident[np.arange(truth.size), truth] = 0.0
        confident[np.arange(truth.size), truth] = 1.0 - confident.sum(axis=1)
        tied: np.ndarray = np.full((truth.size, n_classes), 1.0 / n_classes)
    else:
        confident = np.where(truth == 1, 0.9, 0.1)
        tied = np.full(truth.size, 0.5)
    return [
        Case("all correct", truth, confident),
        Case("tied scores", truth, tied),
        Case("single class in y_true", np.zeros_like(truth), confident),
        Case("empty input", truth[:0], confident[:0]),
    ]


def _reference_value(case: Case, reference: Reference, options: dict[str, Any]) -> tuple[float | None, str]:
    """The reference's value on ``case``; None (with why) where it is undefined: it raised or gave NaN."""
    ref_value, ref_error = _run(lambda t, p: reference.compute(t, p, options), case)
    if ref_value is not None and math.isnan(ref_value):
        return None, "NaN"
    return ref_value, ref_error


def _compare(case: Case, ref_value: float | None, ref_error: str, custom: Callable[..., Any],
             tol: Tolerance, custom_kwargs: dict[str, Any], as_torch: bool, timeout_s: float,
             metric: str) -> CaseOutcome:
    value, error = _run(custom, case, as_torch, timeout_s, metric, **custom_kwargs)
    n = int(case.y_true.shape[0])
    if ref_value is None:
        note = f"reference undefined ({ref_error})"
        consistent = value is None or math.isnan(value)
        return CaseOutcome(case.name, n, None, value, error, None, True,
                           note + ("" if consistent else "; custom returns a value"))
    if value is None:
        return CaseOutcome(case.name, n, ref_value, None, error, None, False, "custom raised where the reference is defined")
    diff = abs(value - ref_value)
    passed = diff <= tol.atol + tol.rtol * abs(ref_value) if math.isfinite(value) else value == ref_value
    return CaseOutcome(case.name, n, ref_value, value, "", diff if math.isfinite(diff) else None, bool(passed))


def _finding(outcome: CaseOutcome, metric: str, reference: str) -> Finding | None:
    subject = Subject(module=metric, step=outcome.case)
    evidence = {"case": outcome.case, "n": outcome.n, "reference": outcome.reference, "custom": outcome.custom,
                "abs_error": outcome.abs_error, "error": outcome.error}
    if not outcome.passed:
        if outcome.custom is None:
            what = f"raised {outcome.error}"
        else:  # abs_error is None when the custom value is NaN/Inf
            delta = "non-finite" if outcome.abs_error is None else f"{outcome.abs_error:.3g}"
            what = f"gives {outcome.custom:.6g}, {reference} gives {_fmt(outcome.reference)} (|Δ| {delta})"
        return METRIC_MISMATCH.finding(f"{metric} on '{outcome.case}' (n={outcome.n}): {what}", subject=subject,
                                       evidence=evidence)
    if outcome.reference is None and outcome.custom is not None and not math.isnan(outcome.custom):
        return METRIC_UNDEFINED.finding(
            f"{reference} is undefined on '{outcome.case}'; {metric} returns {outcome.custom:.6g}", subject=subject,
            evidence=evidence)
    return None


class ReferenceOptions(TypedDict, total=False):
    """The reference metric's own options, passed to scikit-learn: ``labels`` (the class of each score column;
    default: column i is class i), ``k`` (top-k accuracy, default 5), ``average`` (default ``"macro"``)."""

    labels: Sequence[Any] | None
    k: int
    average: str


_REFERENCE_OPTIONS = frozenset(ReferenceOptions.__annotations__)


def check_metric(
    custom: Callable[..., Any],
    reference: str,
    y_true: Any,
    y_pred: Any,
    *,
    edge_cases: bool = True,
    rtol: float | None = None,
    atol: float | None = None,
    custom_kwargs: dict[str, Any] | None = None,
    name: str | None = None,
    timeout_s: float = 60.0,
    **options: Unpack[ReferenceOptions],
) -> MetricCheckResult:
    """Compare ``custom(y_true, y_pred)`` with the reference ``reference`` (a key of :data:`REFERENCES`).

    ``y_pred`` holds labels for label metrics and scores/probabilities for score metrics
    (``roc_auc``, ``log_loss``, ``top_k_accuracy``, ``average_precision``). Torch tensors are accepted.
    ``timeout_s`` bounds each call of ``custom`` (a hung metric raises :class:`MetricTimeout`, a UsageError).
    ``labels``, ``k`` and ``average`` (:class:`ReferenceOptions`) go to the reference.
    """
    ref = _checked_call(custom, reference, timeout_s, options)
    labels, k, average = _checked_labels(options.get("labels")), _checked_k(options.get("k", 5)), \
        options.get("average", "macro")
    tol = Tolerance(rtol=DEFAULT_TOLERANCE.rtol if rtol is None else rtol,
                    atol=DEFAULT_TOLERANCE.atol if atol is None else atol)
    as_torch = hasattr(y_true, "detach") or hasattr(y_pred, "detach")
    truth, pred = _as_array(y_true, "y_true"), _as_array(y_pred, "y_pred")
    _check_shapes(truth, pred, ref)
    if reference == "top_k_accuracy":
        n_classes = len(labels) if labels is not None else pred.shape[1] if pred.ndim == 2 else 2
        if k > n_classes:
            raise UsageError(f"k={k} is larger than the number of classes ({n_classes}): every sample would be a "
                             "top-k hit; pass k= at most the number of classes", parameter="k")
    cases = [Case("user data", truth, pred)]
    if edge_cases:
        cases += _label_cases(truth, pred) if ref.kind == "labels" else _score_cases(truth, pred)
    passed = {"labels": labels, "k": k, "average": average}
    references = [_reference_value(case, ref, passed) for case in cases]
    if all(value is None for value, _ in references):
        # nothing can be compared: a "pass" here would be vacuous (the usual cause is an option the reference
        # refuses, e.g. labels that do not match the score columns, or an unknown average)
        first, first_error = cases[0], references[0][1]
        raise UsageError(f"the reference {reference} could not be computed on any of the {len(cases)} case(s) "
                         f"(on '{first.name}': {first_error or 'undefined'}), so nothing was compared; check the "
                         "data and the options (labels, k, average)")
    metric = str(name or getattr(custom, "__name__", "custom metric"))
    outcomes = tuple(_compare(case, ref_value, ref_error, custom, tol, dict(custom_kwargs or {}), as_torch, timeout_s,
                              metric) for case, (ref_value, ref_error) in zip(cases, references, strict=True))
    findings = tuple(f for f in (_finding(o, metric, reference) for o in outcomes) if f is not None)
    return MetricCheckResult(metric=metric, reference=reference, outcomes=outcomes, findings=findings, tolerance=tol)


def _checked_call(custom: Any, reference: str, timeout_s: Any, options: ReferenceOptions) -> Reference:
    """The reference, once the call's own arguments are sane (UsageError, or TypeError for an unknown option)."""
    unknown = sorted(set(options) - _REFERENCE_OPTIONS)
    if unknown:
        raise TypeError(f"check_metric() got an unexpected keyword argument {unknown[0]!r}")
    if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
        raise UsageError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    if not callable(custom):
        raise UsageError(f"the custom metric must be a callable (y_true, y_pred) -> number, got {type(custom).__name__}")
    if reference not in REFERENCES:
        raise UsageError(f"unknown reference metric {reference!r}; known: {', '.join(sorted(REFERENCES))}")
    return REFERENCES[reference]


def _checked_labels(labels: Sequence[Any] | None) -> list[Any] | None:
    """``labels`` as a list (a generator would be used up by the first case); an empty set of labels is refused."""
    if labels is None:
        return None
    if isinstance(labels, (str, bytes)) or not hasattr(labels, "__iter__"):
        raise UsageError(f"labels must be a sequence of class labels, got {type(labels).__name__} {labels!r:.40}",
                         parameter="labels")
    listed = list(np.asarray(labels).reshape(-1)) if hasattr(labels, "shape") else list(labels)
    if not listed:
        raise UsageError("labels is empty: no metric is defined over no classes; pass the class labels, or leave "
                         "labels out to use the classes in the data", parameter="labels")
    return listed


def _checked_k(k: Any) -> int:
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
        raise UsageError(f"k must be a whole number of at least 1, got {type(k).__name__} {k!r:.40}", parameter="k")
    if k < 1:
        raise UsageError(f"k must be at least 1 (top-k accuracy over the k best scores), got {k}", parameter="k")
    return int(k)


def _as_array(value: Any, what: str) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    try:
        array = np.asarray(value)
    except ValueError as exc:  # ragged nested lists
        raise UsageError(f"{what} is not a rectangular array: {exc}") from None
    if array.ndim == 0 or array.ndim > 2:
        raise UsageError(f"{what} must be 1-D (labels) or 2-D (scores), got shape {array.shape}")
    if array.dtype.kind not in "biufU":  # object arrays (None, mixed types) would crash inside numpy/sklearn
        raise UsageError(f"{what} must hold numbers or strings, got dtype {array.dtype}")
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        bad = int(np.flatnonzero(~np.isfinite(array).reshape(array.shape[0], -1).all(axis=1))[0])
        raise UsageError(f"{what} holds NaN/Inf (first at sample {bad}); no reference metric is defined on it — "
                         "drop or fix those samples first")
    return array


def _check_shapes(truth: np.ndarray, pred: np.ndarray, ref: Reference) -> None:
    if truth.shape[0] != pred.shape[0]:
        raise UsageError(f"y_true has {truth.shape[0]} samples, y_pred {pred.shape[0]}")
    if truth.ndim != 1:
        raise UsageError(f"y_true must be 1-D class labels, got shape {truth.shape}"
                         + (" (one-hot? pass y_true.argmax(1))" if truth.shape[1] > 1 else " (pass y_true.ravel())"))
    if ref.kind == "labels" and pred.ndim != 1:
        raise UsageError(f"{ref.name} compares predicted labels: y_pred must be 1-D, got shape {pred.shape}"
                         + (" (scores? pass y_pred.argmax(1))" if pred.shape[1] > 1 else " (pass y_pred.ravel())"))


def assert_metric_matches(custom: Callable[..., Any], reference: str, y_true: Any, y_pred: Any,
                          **kwargs: Any) -> MetricCheckResult:
    """pytest helper: raise AssertionError with the case table when the metric disagrees with its reference."""
    result = check_metric(custom, reference, y_true, y_pred, **kwargs)
    if result.verdict.value == "gap":
        raise AssertionError(f"{result.headline}\n{result.table_text()}")
    return result

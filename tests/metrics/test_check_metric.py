"""check_metric: planted metric bugs are found on the case that exposes them; correct metrics pass every case."""
from __future__ import annotations

import json
from importlib import resources

import jsonschema
import numpy as np
import pytest

from gapcheck.errors import UsageError
from gapcheck.metrics import assert_metric_matches, check_metric
from gapcheck.report.formats import ReportFormat, render

SCHEMA = json.loads(resources.files("gapcheck.schemas").joinpath("check-metric.schema.json").read_text())
RNG = np.random.default_rng(0)
Y_TRUE = RNG.integers(0, 4, 200)
Y_PRED = np.where(RNG.random(200) < 0.7, Y_TRUE, RNG.integers(0, 4, 200))


def f1_macro_correct(y_true, y_pred):
    classes = np.unique(np.concatenate([y_true, y_pred]))
    scores = []
    for c in classes:
        tp = np.sum((y_pred == c) & (y_true == c))
        fp = np.sum((y_pred == c) & (y_true != c))
        fn = np.sum((y_pred != c) & (y_true == c))
        denom = 2 * tp + fp + fn
        scores.append(0.0 if denom == 0 else 2 * tp / denom)
    return float(np.mean(scores)) if scores else 0.0


def f1_macro_over_true_classes_only(y_true, y_pred):
    """A common bug: average over the classes of y_true only, so a class that is only predicted is ignored."""
    classes = np.unique(y_true)
    scores = []
    for c in classes:
        tp = np.sum((y_pred == c) & (y_true == c))
        fp = np.sum((y_pred == c) & (y_true != c))
        fn = np.sum((y_pred != c) & (y_true == c))
        scores.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores))


def accuracy_correct(y_true, y_pred):
    return float(np.mean(y_true == y_pred)) if len(y_true) else float("nan")


def test_correct_macro_f1_matches_on_every_case():
    result = check_metric(f1_macro_correct, "f1_macro", Y_TRUE, Y_PRED)
    assert result.verdict.value == "pass", result.table_text()
    assert [o.case for o in result.outcomes][:2] == ["user data", "all correct"]
    assert len(result.outcomes) == 6


def test_macro_over_true_classes_is_caught_on_single_class_case():
    # On the user's data every class occurs in y_true, so the bug hides; the edge case exposes it.
    result = check_metric(f1_macro_over_true_classes_only, "f1_macro", Y_TRUE, Y_PRED)
    assert result.verdict.value == "gap"
    failing = {f.evidence["case"] for f in result.findings if f.code == "metric_mismatch"}
    assert "user data" not in failing
    assert "single class in y_true" in failing
    finding = next(f for f in result.findings if f.evidence["case"] == "single class in y_true")
    assert finding.evidence["reference"] != finding.evidence["custom"]
    assert finding.subject.step == "single class in y_true"


def test_wrong_averaging_is_caught_on_user_data():
    def f1_micro_by_mistake(y_true, y_pred):
        return float(np.mean(y_true == y_pred))  # micro-F1 == accuracy for single-label data
    result = check_metric(f1_micro_by_mistake, "f1_macro", Y_TRUE, Y_PRED)
    assert any(f.evidence["case"] == "user data" for f in result.findings)


def test_metric_that_raises_on_empty_input_is_reported_not_crashing():
    def accuracy_raises_on_empty(y_true, y_pred):
        return (y_true == y_pred).sum() / len(y_true) if len(y_true) else 1 / 0
    result = check_metric(accuracy_raises_on_empty, "accuracy", Y_TRUE, Y_PRED)
    empty = next(o for o in result.outcomes if o.case == "empty input")
    # sklearn's accuracy on empty input is NaN (undefined): a raise there is consistent, not a gap.
    assert empty.reference is None and empty.passed
    assert result.verdict.value == "pass"


def test_roc_auc_single_class_is_undefined_info_when_custom_returns_number():
    y = RNG.integers(0, 2, 100)
    scores = np.clip(y * 0.6 + RNG.random(100) * 0.5, 0, 1)

    def auc_rank(y_true, s):
        if len(y_true) == 0:
            raise ValueError("empty")
        pos, neg = s[y_true == 1], s[y_true == 0]
        if len(pos) == 0 or len(neg) == 0:
            return 0.5  # a convention the reference does not have
        greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
        return greater / (len(pos) * len(neg))

    result = check_metric(auc_rank, "roc_auc", y, scores)
    assert result.verdict.value == "pass", result.table_text()
    assert [f.code for f in result.findings] == ["metric_undefined_case"]


def test_torch_tensors_and_tensor_results_are_accepted():
    torch = pytest.importorskip("torch")
    result = check_metric(lambda t, p: (t == p).float().mean(), "accuracy", torch.tensor(Y_TRUE), torch.tensor(Y_PRED),
                          )
    assert result.outcomes[0].passed


def test_assert_helper_raises_with_table():
    with pytest.raises(AssertionError, match="single class in y_true"):
        assert_metric_matches(f1_macro_over_true_classes_only, "f1_macro", Y_TRUE, Y_PRED)
    assert_metric_matches(accuracy_correct, "accuracy", Y_TRUE, Y_PRED)


def test_bad_arguments_are_usage_errors():
    with pytest.raises(UsageError, match="unknown reference"):
        check_metric(accuracy_correct, "accuracy_typo", Y_TRUE, Y_PRED)
    with pytest.raises(UsageError, match="samples"):
        check_metric(accuracy_correct, "accuracy", Y_TRUE, Y_PRED[:10])
    with pytest.raises(UsageError):
        check_metric(accuracy_correct, "accuracy", Y_TRUE, Y_PRED, rtol=float("nan"))
    with pytest.raises(TypeError, match="unexpected keyword argument 'averge'"):  # a typo is not silently ignored
        check_metric(accuracy_correct, "accuracy", Y_TRUE, Y_PRED, averge="micro")


def test_report_envelope_and_junit():
    result = check_metric(f1_macro_over_true_classes_only, "f1_macro", Y_TRUE, Y_PRED)
    doc = json.loads(render(ReportFormat.JSON, result))
    jsonschema.validate(doc, SCHEMA)
    assert doc["command"] == "check-metric" and doc["verdict"] == "gap"
    assert {c["case"] for c in doc["cases"]} >= {"user data", "empty input"}
    assert all(f["code"] in ("metric_mismatch", "metric_undefined_case") for f in doc["findings"])
    xml = render(ReportFormat.JUNIT, result)
    assert 'failures="' in xml and "single class in y_true" in xml


# -- hostile / unlucky input: one clear UsageError or a named mismatch, never a crash inside gapcheck ----------

@pytest.mark.parametrize("returned, said", [(None, "NoneType"), ("0.5", "str"), (np.array([0.5, 0.5]), "shape (2,)")])
def test_metric_returning_a_non_number_is_a_named_mismatch(returned, said):
    # None used to crash while formatting the finding; "0.5" used to be parsed quietly as 0.5.
    result = check_metric(lambda t, p: returned, "accuracy", Y_TRUE, Y_PRED, edge_cases=False)
    assert result.verdict.value == "gap"
    (finding,) = result.findings
    assert finding.code == "metric_mismatch" and said in finding.message and "not" in finding.message


def test_metric_returning_nan_where_reference_is_defined_names_the_case():
    result = check_metric(lambda t, p: float("nan"), "accuracy", Y_TRUE, Y_PRED, edge_cases=False)
    (finding,) = result.findings
    assert "gives nan" in finding.message and "non-finite" in finding.message


def test_hung_metric_is_stopped_by_the_deadline():
    import threading

    release = threading.Event()
    from gapcheck.metrics import MetricTimeout

    with pytest.raises(MetricTimeout, match="did not return within 0.2 s") as info:
        check_metric(lambda t, p: release.wait(30), "accuracy", Y_TRUE, Y_PRED, timeout_s=0.2)
    release.set()
    assert isinstance(info.value, UsageError) and "user data" in str(info.value)


@pytest.mark.parametrize("y_true, y_pred, said", [
    (Y_TRUE, np.where(np.arange(200) == 3, np.nan, Y_PRED), "NaN/Inf (first at sample 3)"),
    (Y_TRUE[:, None], Y_PRED, "y_true.ravel()"),
    (np.eye(4)[Y_TRUE], Y_PRED, "one-hot? pass y_true.argmax(1)"),
    (Y_TRUE, np.eye(4)[Y_PRED], "scores? pass y_pred.argmax(1)"),
    (Y_TRUE, [None] * 200, "dtype object"),
])
def test_bad_inputs_are_usage_errors(y_true, y_pred, said):
    with pytest.raises(UsageError, match=__import__("re").escape(said)):
        check_metric(accuracy_correct, "accuracy", y_true, y_pred)


def test_top_k_is_defined_when_a_class_is_missing_from_y_true():
    # Column i scores class i; sklearn needs labels= to know that when y_true lacks a class.
    scores = RNG.random((60, 4))
    truth = RNG.integers(0, 3, 60)  # class 3 never occurs

    def top2(y_true, s):
        return float(np.mean((np.argsort(-s, axis=1)[:, :2] == y_true[:, None]).any(axis=1)))

    result = check_metric(top2, "top_k_accuracy", truth, scores, k=2)
    assert result.verdict.value == "pass", result.table_text()
    assert all(o.reference is not None for o in result.outcomes if o.case != "empty input"), result.table_text()


def test_rank_auc_from_a_real_classifier_passes_and_the_tie_blind_variant_is_named():
    from scipy.stats import rankdata
    from sklearn.datasets import load_breast_cancer
    from sklearn.naive_bayes import GaussianNB

    x, y = load_breast_cancer(return_X_y=True)
    scores = GaussianNB().fit(x[:400], y[:400]).predict_proba(x[400:])[:, 1]

    def auc_mann_whitney(y_true, s, rank=rankdata):
        r = rank(s)
        pos = int(y_true.sum())
        return float((r[y_true == 1].sum() - pos * (pos + 1) / 2) / (pos * (len(y_true) - pos)))

    def auc_argsort_ranks(y_true, s):  # as copied from a blog post: ties get distinct ranks
        return auc_mann_whitney(y_true, s, rank=lambda v: np.argsort(np.argsort(v)) + 1.0)

    assert check_metric(auc_mann_whitney, "roc_auc", y[400:], scores).verdict.value == "pass"
    result = check_metric(auc_argsort_ranks, "roc_auc", y[400:], scores)
    assert {f.evidence["case"] for f in result.findings if f.code == "metric_mismatch"} == {"tied scores"}


def test_public_spelling_from_the_issue():
    import gapcheck

    assert gapcheck.check_metric is check_metric


def test_sklearn_itself_passes_every_case_of_every_reference_on_a_real_classifier():
    # the reference against itself on digits: any finding would be a false alarm of the edge-case generator
    import sklearn.metrics as skm
    from sklearn.datasets import load_digits
    from sklearn.naive_bayes import GaussianNB

    x, y = load_digits(return_X_y=True)
    model = GaussianNB().fit(x[:1000], y[:1000])
    labels, proba = model.predict(x[1000:]), model.predict_proba(x[1000:])
    classes = np.arange(10)
    own = {"f1_macro": (lambda t, p: skm.f1_score(t, p, average="macro", zero_division=0), labels),
           "accuracy": (skm.accuracy_score, labels),
           "top_k_accuracy": (lambda t, s: skm.top_k_accuracy_score(t, s, k=5, labels=classes), proba),
           "log_loss": (lambda t, s: skm.log_loss(t, s, labels=classes), proba)}
    for reference, (metric, pred) in own.items():
        result = check_metric(metric, reference, y[1000:], pred)
        assert result.verdict.value == "pass" and not result.findings, result.table_text()


def test_report_with_nan_and_raising_outcomes_is_strict_json_and_validates():
    result = check_metric(lambda t, p: float("nan") if len(t) > 100 else None, "accuracy", Y_TRUE, Y_PRED)
    text = render(ReportFormat.JSON, result)
    doc = json.loads(text, parse_constant=lambda name: pytest.fail(f"non-standard JSON constant {name}"))
    jsonschema.validate(doc, SCHEMA)
    assert doc["cases"][0]["custom"] == "nan" and doc["cases"][1]["custom"] is None  # NaN vs raised, told apart


@pytest.mark.parametrize("labels", [["cat"] * 6, [True] * 6, [3] * 6])
def test_single_class_user_data_of_any_label_type_gets_edge_cases(labels):
    # string labels of a single class crashed the edge-case generator ("cat" + 1)
    result = check_metric(lambda t, p: float(np.mean(np.asarray(t) == np.asarray(p))), "accuracy", labels, labels)
    assert result.verdict.value == "pass", result.table_text()
    assert len(result.outcomes) == 6


def test_binary_roc_auc_from_two_softmax_columns_uses_the_positive_column():
    y_true = np.array([0, 1, 1, 0, 1, 0])
    logits = RNG.normal(size=(6, 2))
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)

    def auc_positive_column(t, p):
        from sklearn.metrics import roc_auc_score
        return roc_auc_score(t, p[:, 1])

    result = check_metric(auc_positive_column, "roc_auc", y_true, probs)
    assert result.verdict.value == "pass" and result.outcomes[0].reference is not None, result.table_text()


def test_a_metric_that_works_in_place_does_not_change_the_callers_arrays():
    y_true, y_pred = Y_TRUE.copy(), Y_PRED.copy()

    def clobbering_accuracy(t, p):
        result = float(np.mean(t == p))
        t[:] = -1
        p.sort()
        return result

    result = check_metric(clobbering_accuracy, "accuracy", y_true, y_pred)
    assert result.verdict.value == "pass", result.table_text()
    assert np.array_equal(y_true, Y_TRUE) and np.array_equal(y_pred, Y_PRED)


def test_a_non_callable_metric_is_a_usage_error():
    with pytest.raises(UsageError, match="must be a callable"):
        check_metric(0.93, "accuracy", Y_TRUE, Y_PRED)


# -- options the reference cannot use: a UsageError up front, never a vacuous pass -----------------------------

SCORES_4 = RNG.random((40, 4))
TRUTH_4 = RNG.integers(0, 4, 40)


def _top1(y_true, s):
    return float(np.mean(np.argmax(s, axis=1) == y_true)) if len(y_true) else float("nan")


@pytest.mark.parametrize("k, said", [(0, "k must be at least 1"), (-3, "k must be at least 1"),
                                     (2.5, "k must be a whole number"), (True, "k must be a whole number"),
                                     (5, "k=5 is larger than the number of classes (4)")])
def test_top_k_with_an_impossible_k_is_a_usage_error_not_a_pass(k, said):
    # k=0 / k=-3 made the reference raise on every case, and the verdict was "matches ... on 5 case(s)"
    with pytest.raises(UsageError, match=__import__("re").escape(said)):
        check_metric(_top1, "top_k_accuracy", TRUTH_4, SCORES_4, k=k)


def test_empty_labels_are_a_usage_error_not_a_pass():
    with pytest.raises(UsageError, match="labels is empty"):
        check_metric(f1_macro_correct, "f1_macro", Y_TRUE, Y_PRED, labels=[])
    with pytest.raises(UsageError, match="labels is empty"):
        check_metric(f1_macro_correct, "f1_macro", Y_TRUE, Y_PRED, labels=np.array([], dtype=int))


def test_a_reference_undefined_on_every_case_is_never_a_pass():
    # labels that do not match the 4 score columns: sklearn refuses every case, so nothing would be compared
    calls = []

    def counted(t, s):
        calls.append(len(t))
        return 0.5

    with pytest.raises(UsageError, match="could not be computed on any of the 5 case") as info:
        check_metric(counted, "log_loss", TRUTH_4, SCORES_4, labels=[0, 1])
    assert "user data" in str(info.value) and not calls  # the custom metric is not even run
    # one case, undefined (ROC-AUC of a single class): no comparison happened, so no pass either
    with pytest.raises(UsageError, match="could not be computed on any of the 1 case"):
        check_metric(lambda t, s: 0.5, "roc_auc", np.ones(10, dtype=int), RNG.random(10), edge_cases=False)


def test_labels_given_as_a_generator_are_used_on_every_case():
    result = check_metric(f1_macro_correct, "f1_macro", Y_TRUE, Y_PRED, labels=(c for c in range(4)))
    assert all(o.reference is not None for o in result.outcomes if o.case != "empty input"), result.table_text()


# -- a metric that exits: reported as raising on that case, never ends the caller's script ---------------------

@pytest.mark.parametrize("exit_with", [lambda: __import__("sys").exit(0), lambda: __import__("sys").exit(),
                                       lambda: (_ for _ in ()).throw(GeneratorExit("stop"))])
def test_a_metric_calling_sys_exit_is_reported_as_raising(exit_with):
    def exits_on_empty(t, p):
        if len(t) == 0:
            exit_with()
        return float(np.mean(t == p))

    def always_exits(t, p):
        exit_with()

    result = check_metric(always_exits, "accuracy", Y_TRUE, Y_PRED)
    assert result.verdict.value == "gap"
    user = result.outcomes[0]
    assert user.custom is None and not user.passed and user.error.split(":")[0] in ("SystemExit", "GeneratorExit")
    assert any("raised SystemExit" in f.message or "raised GeneratorExit" in f.message for f in result.findings)
    # where the reference is undefined too (empty input), exiting is consistent: no gap
    assert check_metric(exits_on_empty, "accuracy", Y_TRUE, Y_PRED).verdict.value == "pass"


def test_a_metric_raising_keyboard_interrupt_still_interrupts():
    def interrupted(t, p):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        check_metric(interrupted, "accuracy", Y_TRUE, Y_PRED)

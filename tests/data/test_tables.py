from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gapcheck.data.api import drift, leakage
from gapcheck.data.drift import DriftOptions, benjamini_hochberg
from gapcheck.data.leakage import LeakageOptions
from gapcheck.engines import open_engine
from tests.data.conftest import shifted_tables, validate


@pytest.fixture(scope="module")
def serial():
    with open_engine("serial") as engine:
        yield engine


def test_seed_shift_of_08_on_one_feature_is_drift_and_nothing_else(tmp_path, serial):
    reference, current = shifted_tables(tmp_path)
    result = drift(str(reference), str(current), engine=serial)
    document = validate(result)
    drifted = [f for f in result.features if f.drift]
    assert [f.feature for f in drifted] == ["x1"]
    assert 0.25 < drifted[0].ks_d < 0.4 and 0.7 < drifted[0].wasserstein_std < 0.9
    assert {f.code for f in result.findings} <= {"drift", "coverage_gap"}
    assert document["features"][3]["test"] == "chi2" and document["features"][3]["drift"] is False


def test_large_samples_do_not_flag_noise(tmp_path, serial):
    reference, current = shifted_tables(tmp_path, rows=100_000, shift=0.03)
    result = drift(str(reference), str(current), engine=serial)
    assert result.findings == ()  # p may be small; the effect is far below the minimum


def test_missing_values_shift_all_nan_and_mixed_columns(tmp_path, serial):
    rng = np.random.default_rng(1)
    ref = pd.DataFrame({"a": rng.normal(size=3000), "b": rng.normal(size=3000), "empty": np.nan,
                        "mixed": rng.normal(size=3000).astype(object)})
    cur = ref.copy()
    cur.loc[:900, "b"] = np.nan
    cur.loc[:5, "mixed"] = "twelve"
    ref.to_csv(tmp_path / "ref.csv", index=False)
    cur.to_csv(tmp_path / "cur.csv", index=False)
    result = drift(str(tmp_path / "ref.csv"), str(tmp_path / "cur.csv"), engine=serial)
    validate(result)
    shift = [f for f in result.findings if f.code == "missing_values_shift"]
    assert [f.subject.output for f in shift] == ["b"]
    bad = [f for f in result.findings if f.code == "bad_input"]
    items = " ".join(bad[0].evidence["items"])
    assert "reference:empty" in items and "current:empty" in items and "current:mixed" in items
    assert not any(f.drift for f in result.features)


def test_categorical_drift_uses_cramers_v(tmp_path, serial):
    rng = np.random.default_rng(2)
    pd.DataFrame({"c": rng.choice(list("abc"), 5000, p=[0.6, 0.3, 0.1])}).to_parquet(tmp_path / "r.parquet")
    pd.DataFrame({"c": rng.choice(list("abc"), 5000, p=[0.2, 0.3, 0.5])}).to_parquet(tmp_path / "c.parquet")
    result = drift(str(tmp_path / "r.parquet"), str(tmp_path / "c.parquet"), engine=serial)
    [feature] = result.features
    assert feature.test == "chi2" and feature.drift and feature.cramers_v > 0.3


def test_coverage_gap_when_ks_is_quiet(tmp_path, serial):
    rng = np.random.default_rng(3)
    ref = rng.normal(size=20_000)
    cur = rng.normal(size=20_000)
    cur = cur[(cur > np.quantile(ref, 0.1)) & (cur < np.quantile(ref, 0.9))]  # no tails at all
    pd.DataFrame({"x": ref}).to_parquet(tmp_path / "r.parquet")
    pd.DataFrame({"x": cur}).to_parquet(tmp_path / "c.parquet")
    result = drift(str(tmp_path / "r.parquet"), str(tmp_path / "c.parquet"), DriftOptions(min_effect=0.3),
                   engine=serial)
    gap = [f for f in result.findings if f.code == "coverage_gap"]
    assert gap and gap[0].evidence["empty_bins"] == [1, 10]
    assert not result.features[0].drift
    heatmap = [v for v in result.views() if getattr(v, "kind", "") == "heatmap"]
    assert heatmap and heatmap[0].y == ("x",)


def test_npy_matrix_with_columns_and_empty_side(tmp_path, serial):
    rng = np.random.default_rng(4)
    np.save(tmp_path / "r.npy", rng.normal(size=(4000, 3)))
    shifted = rng.normal(size=(4000, 3))
    shifted[:, 2] += 0.8
    np.save(tmp_path / "c.npy", shifted)
    result = drift(str(tmp_path / "r.npy"), str(tmp_path / "c.npy"), DriftOptions(columns=("age", "bmi", "dose")),
                   engine=serial)
    assert [f.feature for f in result.features if f.drift] == ["dose"]
    np.save(tmp_path / "none.npy", np.zeros((0, 3)))
    empty = drift(str(tmp_path / "r.npy"), str(tmp_path / "none.npy"), engine=serial)
    assert [f.code for f in empty.findings] == ["empty_split"]


def test_benjamini_hochberg_matches_the_textbook():
    q = benjamini_hochberg([0.01, 0.04, 0.03, 0.005])
    assert q == pytest.approx([0.02, 0.04, 0.04, 0.02])


def _ctr_split(rng, rows, categories, leaky):
    category = rng.integers(0, categories, rows)
    rate = rng.uniform(0.05, 0.6, categories)
    label = (rng.uniform(size=rows) < rate[category]).astype(int)
    frame = pd.DataFrame({"user": rng.integers(0, 10**6, rows), "category": category, "label": label,
                          "noise": rng.normal(size=rows)})
    if leaky:  # encoding fit on this split's own labels, each row's label included
        frame["category_te"] = frame.groupby("category")["label"].transform("mean")
    else:  # the honest encoding: the category's true rate
        frame["category_te"] = rate[category] + rng.normal(0, 0.01, rows)
    return frame


def test_planted_target_encoding_and_duplicate_rows_and_groups(tmp_path, serial):
    rng = np.random.default_rng(5)
    train = _ctr_split(rng, 6000, 1500, leaky=False)
    val = _ctr_split(rng, 3000, 1500, leaky=True)
    val.loc[0, ["user", "category", "noise", "category_te"]] = train.loc[7, ["user", "category", "noise", "category_te"]]
    val.loc[0, "label"] = 1 - train.loc[7, "label"]
    val.loc[1, "user"] = train.loc[3, "user"]
    train.to_parquet(tmp_path / "train.parquet")
    val.to_csv(tmp_path / "val.csv", index=False)
    result = leakage([f"train={tmp_path / 'train.parquet'}", f"val={tmp_path / 'val.csv'}"],
                     LeakageOptions(label_column="label", group_column="user"), engine=serial)
    document = validate(result)
    target = [f for f in result.findings if f.code == "target_leakage"]
    assert [f.subject.output for f in target] == ["category_te"]
    auc = target[0].evidence["auc"]
    assert auc["val"] - auc["train"] > 0.15
    assert document["target_auc"]["noise"]["val"] < 0.6
    assert {(p.item, p.other) for p in result.exact} >= {("val.csv:2", "train.parquet row 7")}
    assert any(f.code == "label_conflict" for f in result.findings)
    groups = [f for f in result.findings if f.code == "group_overlap"]
    assert groups and groups[0].evidence["shared"] >= 2


def test_key_columns(tmp_path, serial):
    pd.DataFrame({"user_id": [1, 2, 3], "item_id": [10, 20, 30], "x": [0.1, 0.2, 0.3]}).to_parquet(tmp_path / "a.parquet")
    pd.DataFrame({"user_id": [3, 4], "item_id": [30.0, 40.0], "x": [9.9, 0.4]}).to_parquet(tmp_path / "b.parquet")
    result = leakage([f"train={tmp_path / 'a.parquet'}", f"val={tmp_path / 'b.parquet'}"],
                     LeakageOptions(key_columns=("user_id", "item_id")), engine=serial)
    assert [(p.kind, p.item, p.other) for p in result.exact] == [("key", "b.parquet row 0", "a.parquet row 2")]


def test_drift_on_a_tabular_dataset_callable(serial, monkeypatch):
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    result = drift("dataset_fixture:train_rows", "dataset_fixture:val_rows", engine=serial)
    validate(result)
    assert [f.feature for f in result.features] == ["f0", "f1", "f2", "label"]
    assert [f.feature for f in result.features if f.drift] == ["f1"]


def test_a_requested_column_that_does_not_exist_is_a_usage_error_raised_at_once(tmp_path):
    from gapcheck.errors import UsageError

    reference, current = shifted_tables(tmp_path, rows=2_000)
    for kind in ("serial", "local"):
        with open_engine(kind) as engine, pytest.raises(UsageError, match="no column.*typo"):
            drift(str(reference), str(current), DriftOptions(columns=("x0", "typo")), engine=engine)


@pytest.mark.parametrize("sizes", [(300, 500), (12_000, 15_000), (20_000, 9_000)])
def test_one_sort_statistics_equal_scipys(sizes):
    from scipy import stats

    from gapcheck.data.drift import sorted_ks_wasserstein

    rng = np.random.default_rng(sum(sizes))
    a = np.round(rng.normal(size=sizes[0]), 2)  # ties, as in real columns
    b = np.round(rng.normal(0.05, 1.1, size=sizes[1]), 2)
    d, p, w = sorted_ks_wasserstein(np.sort(a), np.sort(b))
    expected = stats.ks_2samp(a, b)
    assert (d, p) == (float(expected.statistic), float(expected.pvalue))
    assert w == pytest.approx(stats.wasserstein_distance(a, b), rel=1e-12)

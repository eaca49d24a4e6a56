"""Target encodings found by construction: the seed's CTR story built honestly, and its out-of-fold twin.

Users with their own click rates; rows split at random (so every user is in both splits, as in the seed's
report); ``user_ctr`` is the per-user mean of the click label over train + validation. Its AUC is high and
about equal in both splits, so neither AUC rule fires — the construction does. The out-of-fold twin
(each training row's mean from the other folds of train, validation rows from train) stays clean.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gapcheck.data.api import leakage
from gapcheck.data.leakage import LeakageOptions
from gapcheck.engines import open_engine
from tests.data.conftest import validate


def ctr_story(seed: int = 0, users: int = 500, rows: int = 20_000) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    rate = rng.beta(0.3, 0.3, users)  # users who almost never click and users who almost always do
    user = rng.integers(0, users, rows)
    frame = pd.DataFrame({"user_id": user, "y": (rng.uniform(size=rows) < rate[user]).astype(int),
                          "price": rng.lognormal(size=rows), "hour": rng.integers(0, 24, rows)})
    in_val = rng.uniform(size=rows) < 0.2
    train, val = frame[~in_val].reset_index(drop=True), frame[in_val].reset_index(drop=True)
    everything = pd.concat([train, val])
    means = everything.groupby("user_id")["y"].mean()
    sums, counts = everything.groupby("user_id")["y"].sum(), everything.groupby("user_id")["y"].count()
    for part in (train, val):
        part["user_ctr"] = part["user_id"].map(means)  # the leak: both splits' labels, own label included
        own_sum, own_count = part["user_id"].map(sums), part["user_id"].map(counts)
        part["user_ctr_loo"] = (own_sum - part["y"]) / (own_count - 1)
        split_mean = part.groupby("user_id")["y"].transform("mean")
        part["user_ctr_split"] = split_mean
    _out_of_fold(train, val, rng)
    return train, val


def _out_of_fold(train: pd.DataFrame, val: pd.DataFrame, rng: np.random.Generator, folds: int = 5) -> None:
    """The honest twin: train rows encoded from the other folds of train, validation rows from all of train."""
    prior = train["y"].mean()
    fold = rng.integers(0, folds, len(train))
    encoded = np.empty(len(train))
    for k in range(folds):
        others = train[fold != k].groupby("user_id")["y"].mean()
        encoded[fold == k] = train.loc[fold == k, "user_id"].map(others).fillna(prior).to_numpy()
    train["user_ctr_oof"] = encoded
    val["user_ctr_oof"] = val["user_id"].map(train.groupby("user_id")["y"].mean()).fillna(prior)


@pytest.fixture(scope="module")
def ctr_result(tmp_path_factory):
    root = tmp_path_factory.mktemp("ctr")
    train, val = ctr_story()
    train.to_parquet(root / "train.parquet", row_group_size=4_000)
    val.to_csv(root / "val.csv", index=False)
    with open_engine("serial") as engine:
        return leakage([f"train={root / 'train.parquet'}", f"validation={root / 'val.csv'}"],
                       LeakageOptions(group_column="user_id", label_column="y"), engine=engine)


def _target(result) -> dict:
    return {f.subject.output: f for f in result.findings if f.code == "target_leakage"}


def test_ctr_encoding_over_both_splits_is_target_leakage_by_construction(ctr_result):
    validate(ctr_result)
    found = _target(ctr_result)["user_ctr"]
    assert found.evidence["construction"] == {"train": "across_splits", "validation": "across_splits"}
    assert found.evidence["match_share"]["train"]["across_splits"] == 1.0
    assert found.evidence["match_share"]["train"]["in_split"] < 0.5  # the other split's labels are in it
    auc = found.evidence["auc"]
    # what made it pass before: high, and the same in both splits, so neither AUC rule fires
    assert 0.9 < auc["train"] < 0.99 and 0.9 < auc["validation"] < 0.99 and abs(auc["train"] - auc["validation"]) < 0.05
    example = found.evidence["examples"]["validation"][0]
    assert example["feature"] == pytest.approx(example["group_label_mean"])
    assert "other splits' labels" in found.message
    assert any(f.code == "group_overlap" for f in ctr_result.findings)


def test_each_construction_is_named(ctr_result):
    found = _target(ctr_result)
    assert found["user_ctr_loo"].evidence["construction"] == {"train": "loo_across_splits",
                                                              "validation": "loo_across_splits"}
    assert found["user_ctr_split"].evidence["construction"] == {"train": "in_split", "validation": "in_split"}


def test_out_of_fold_twin_and_plain_features_stay_clean(ctr_result):
    found = _target(ctr_result)
    assert "user_ctr_oof" not in found and "price" not in found and "hour" not in found
    assert ctr_result.auc["user_ctr_oof"]["train"] > 0.85  # a strong, honest feature: clean anyway

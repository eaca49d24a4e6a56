"""Leakage on tables with different columns (issue 23 follow-up: a new user's review).

``wine_train.csv`` against ``iris_val.csv`` passed with exit 0 (no row hash can match across other columns), and a
training table with two extra id columns hid every planted copy the same way. Rows are now compared on the columns
every split holds, named in the report; no column in common, or a share under half of a split's columns, is exit 2;
a partial overlap is a ``columns_differ`` warning."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from sklearn import datasets

from gapcheck.cli.app import main
from gapcheck.data.api import leakage
from gapcheck.data.leakage import LeakageOptions
from gapcheck.engines import open_engine
from gapcheck.errors import InputError
from tests.data.conftest import validate


def _frame(name: str):
    return getattr(datasets, f"load_{name}")(as_frame=True).frame


def _leak(args: list[str]) -> int:
    return main(["leakage", *[a for s in args for a in ("--split", s)], "--engine", "serial"])


def test_tables_without_common_columns_are_refused(tmp_path, capsys):
    _frame("wine").to_csv(tmp_path / "wine.csv", index=False)
    iris = _frame("iris")
    iris.to_parquet(tmp_path / "iris.parquet")  # shares only `target` with wine
    iris.drop(columns="target").to_csv(tmp_path / "iris_x.csv", index=False)  # shares nothing
    assert _leak([f"train={tmp_path / 'wine.csv'}", f"val={tmp_path / 'iris_x.csv'}"]) == 2
    assert "no column in common" in capsys.readouterr().err
    assert _leak([f"train={tmp_path / 'wine.csv'}", f"val={tmp_path / 'iris.parquet'}"]) == 2
    err = capsys.readouterr().err
    assert "share only target" in err and "sepal length (cm)" in err and "--key" in err
    with open_engine("serial") as engine, pytest.raises(InputError):  # the library refuses, not only the CLI
        leakage([f"train={tmp_path / 'wine.csv'}", f"val={tmp_path / 'iris_x.csv'}"], engine=engine)


def test_extra_id_columns_no_longer_hide_copies(tmp_path):
    table = _frame("breast_cancer").sample(frac=1.0, random_state=0).reset_index(drop=True)
    train, val = table.iloc[:426].copy(), table.iloc[426:]
    val = pd.concat([val, train.iloc[[0, 5, 9]]], ignore_index=True)  # three planted copies
    train.insert(0, "row_id", np.arange(len(train)))  # the training export has ids the validation one lacks
    train.insert(0, "patient_id", [f"P{i:05d}" for i in range(len(train))])
    train.to_csv(tmp_path / "train.csv", index=False)
    val.to_parquet(tmp_path / "val.parquet")
    with open_engine("serial") as engine:
        result = leakage([f"train={tmp_path / 'train.csv'}", f"val={tmp_path / 'val.parquet'}"],
                         LeakageOptions(label_column="target"), engine=engine)
    validate(result)
    assert len(result.exact) == 3
    differ = [f for f in result.findings if f.code == "columns_differ"]
    assert len(differ) == 1 and differ[0].severity.value == "warning"
    assert differ[0].evidence["only_in"] == {"train": ["patient_id", "row_id"]}
    assert len(differ[0].evidence["compared"]) == 30 and "target" not in differ[0].evidence["compared"]
    assert result.compared_columns == tuple(c for c in table.columns if c != "target")
    assert main(["leakage", "--split", f"train={tmp_path / 'train.csv'}", "--split", f"val={tmp_path / 'val.parquet'}",
                 "--engine", "serial", "--json", str(tmp_path / "r.json")]) == 1
    assert json.loads((tmp_path / "r.json").read_text())["compared_columns"] == list(table.columns)  # no label here


def test_same_columns_say_which_and_warn_nothing(tmp_path, capsys):
    table = _frame("wine")
    table.iloc[:130].to_csv(tmp_path / "train.csv", index=False)
    table.iloc[130:].to_parquet(tmp_path / "val.parquet")
    assert _leak([f"train={tmp_path / 'train.csv'}", f"val={tmp_path / 'val.parquet'}"]) == 0
    out = capsys.readouterr().out
    assert "table rows compared on 14 column(s): alcohol, malic_acid" in out and "columns_differ" not in out


def test_drift_between_tables_without_a_common_column_is_refused(tmp_path, capsys):
    _frame("wine").to_csv(tmp_path / "wine.csv", index=False)
    _frame("iris").drop(columns="target").to_csv(tmp_path / "iris.csv", index=False)  # used to pass with exit 0
    assert main(["drift", "--reference", str(tmp_path / "wine.csv"), "--current", str(tmp_path / "iris.csv"),
                 "--engine", "serial"]) == 2
    assert "no column in common" in capsys.readouterr().err


def test_an_identifier_in_the_row_hash_is_said_and_key_finds_the_renumbered_copies(tmp_path):
    """Both exports number their rows (row_id): a row copied into val and renumbered there hashes differently over
    every column. Rows are now compared again without row_id (attacker D7: the copies were missed, exit 0, with only
    this info), and the copies are exact_duplicate gaps; said as info; --key over the features finds them too."""
    table = _frame("wine").sample(frac=1.0, random_state=1).reset_index(drop=True)
    train, val = table.iloc[:130].copy(), table.iloc[130:]
    val = pd.concat([val, train.iloc[[2, 7]]], ignore_index=True)  # two planted copies, renumbered below
    train.insert(0, "row_id", np.arange(len(train)))
    val.insert(0, "row_id", np.arange(1000, 1000 + len(val)))
    train.to_csv(tmp_path / "train.csv", index=False)
    val.to_csv(tmp_path / "val.csv", index=False)
    splits = [f"train={tmp_path / 'train.csv'}", f"val={tmp_path / 'val.csv'}"]
    with open_engine("serial") as engine:
        plain = leakage(splits, LeakageOptions(label_column="target"), engine=engine)
        features = tuple(c for c in table.columns if c != "target")
        keyed = leakage(splits, LeakageOptions(label_column="target", key_columns=features), engine=engine)
    validate(plain)
    (said,) = [f for f in plain.findings if f.code == "identifier_in_rows"]
    assert said.severity.value == "info" and said.evidence["columns"] == ["row_id"] and "--key" in said.message
    assert [p.kind for p in plain.exact] == ["row_without_identifiers"] * 2 and plain.set_aside_columns == ("row_id",)
    assert [f.code for f in plain.findings if f.is_gap] == ["exact_duplicate"] * 2
    assert len(keyed.exact) == 2 and not [f for f in keyed.findings if f.code == "identifier_in_rows"]


def test_names_that_only_contain_id_words_are_no_row_ids():
    from gapcheck.data.identifiers import named_like_row_id

    assert all(named_like_row_id(n) for n in ("row_id", "PatientID", "index", "Unnamed: 0", "uuid", "sample_idx"))
    assert not any(named_like_row_id(n) for n in ("num_rooms", "key_length", "idle_time", "number", "width"))

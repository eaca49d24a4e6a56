"""A row copied into another split and renumbered there is leakage (attacker D7).

30 of 100 validation rows were copies of training rows; an ``id`` column numbered per split made every row hash
differ, so the run passed (exit 0) with only the info ``identifier_in_rows``; the same tables without ``id`` failed
(exit 1). Rows hashed over identifier-like columns are now compared again without them: the copies are
``exact_duplicate`` gaps (match ``row_without_identifiers``) naming the columns set aside; ``--key`` stays the
explicit way; clean real tables with an id stay clean."""
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
from tests.data.conftest import validate


@pytest.fixture(scope="module")
def serial():
    with open_engine("serial") as engine:
        yield engine


def _splits(folder, copies: int, with_id: bool = True, id_name: str = "id") -> list[str]:
    """breast_cancer: 300 training rows, 100 validation rows of which ``copies`` are training rows; ``id`` numbered
    from 0 in each split (as a per-split export writes it)."""
    table = datasets.load_breast_cancer(as_frame=True).frame.sample(frac=1.0, random_state=3).reset_index(drop=True)
    train, val = table.iloc[:300], table.iloc[300:400 - copies]
    val = pd.concat([val, train.iloc[:copies]], ignore_index=True)
    splits = []
    for name, part in (("train", train), ("val", val)):
        part = part.reset_index(drop=True)
        if with_id:
            part.insert(0, id_name, np.arange(len(part)))
        part.to_csv(folder / f"{name}.csv", index=False)
        splits.append(f"{name}={folder / f'{name}.csv'}")
    return splits


def test_renumbered_copies_are_found_without_the_id(tmp_path, serial):
    splits = _splits(tmp_path, copies=30)
    result = leakage(splits, engine=serial)
    document = validate(result)
    across = [p for p in result.exact if p.split != p.other_split]
    assert len(across) == 30 and {p.kind for p in across} == {"row_without_identifiers"}
    gaps = [f for f in result.findings if f.code == "exact_duplicate"]
    assert len(gaps) == 30 and "apart from id" in gaps[0].message and gaps[0].evidence["set_aside"] == ["id"]
    assert document["set_aside_columns"] == ["id"] and document["compared_columns"][0] == "id"
    report = tmp_path / "leakage.json"
    assert main(["leakage", "--split", splits[0], "--split", splits[1], "--engine", "serial",
                 "--json", str(report)]) == 1
    assert json.loads(report.read_text())["pair_counts"]["exact"] == 30


def test_the_same_copies_without_an_id_column_are_found_alike(tmp_path, serial):
    result = leakage(_splits(tmp_path, copies=30, with_id=False), engine=serial)
    assert len(result.exact) == 30 and {p.kind for p in result.exact} == {"row"} and result.set_aside_columns == ()


def test_a_copy_that_kept_its_id_is_a_whole_row_match(tmp_path, serial):
    splits = _splits(tmp_path, copies=0)
    train = pd.read_csv(tmp_path / "train.csv")
    val = pd.concat([pd.read_csv(tmp_path / "val.csv"), train.iloc[[5]]], ignore_index=True)  # id 5 kept
    val.to_csv(tmp_path / "val.csv", index=False)
    result = leakage(splits, engine=serial)
    assert [p.kind for p in result.exact] == ["row"]  # found once, by the stronger hash


@pytest.mark.parametrize("id_name", ["id", "PatientID", "Unnamed: 0"])
def test_clean_splits_with_an_id_stay_clean(tmp_path, serial, id_name):
    result = leakage(_splits(tmp_path, copies=0, id_name=id_name), engine=serial)
    assert not any(f.is_gap for f in result.findings) and result.set_aside_columns == (id_name,)


def test_key_is_still_the_explicit_way(tmp_path, serial):
    splits = _splits(tmp_path, copies=30)
    features = tuple(datasets.load_breast_cancer().feature_names[:5])
    keyed = leakage(splits, LeakageOptions(key_columns=features), engine=serial)
    assert keyed.set_aside_columns == () and len([p for p in keyed.exact if p.split != p.other_split]) == 30
    assert not [f for f in keyed.findings if f.code == "identifier_in_rows"]


def test_repeated_row_hashes_group_like_the_dict_they_replace():
    """exact_pairs groups 128-bit row hashes with one stable sort (the second, id-less hash doubled a per-row
    Python loop): the same groups, in the same order, as filling a dict split by split."""
    from gapcheck.data.leakage_checks import _repeated_rows

    rng = np.random.default_rng(0)
    for _ in range(200):
        names = [f"s{i}" for i in range(rng.integers(1, 4))]
        arrays = [rng.integers(0, rng.integers(1, 6), size=(rng.integers(0, 12), 2)).astype(np.uint64) for _ in names]
        owners: dict[tuple[int, ...], list[tuple[str, int]]] = {}
        for name, array in zip(names, arrays, strict=True):
            for i, value in enumerate(array.tolist()):
                owners.setdefault(tuple(value), []).append((name, i))
        assert _repeated_rows(names, arrays) == [g for g in owners.values() if len(g) > 1]


def _categorical(folder, with_id: bool) -> list[str]:
    """A table of three categorical columns (the verification review's case: few distinct rows), split at random."""
    rng = np.random.default_rng(5)
    table = pd.DataFrame({"pclass": rng.integers(1, 4, 400), "sex": rng.choice(["male", "female"], 400),
                          "embarked": rng.choice(["S", "C", "Q"], 400), "survived": rng.integers(0, 2, 400)})
    splits = []
    for name, part in (("train", table.iloc[:300]), ("val", table.iloc[300:])):
        part = part.reset_index(drop=True)
        if with_id:
            part.insert(0, "PassengerId", np.arange(len(part)) + (0 if name == "train" else 300))
        part.to_csv(folder / f"{name}.csv", index=False)
        splits.append(f"{name}={folder / f'{name}.csv'}")
    return splits


@pytest.mark.parametrize("with_id", [True, False])
def test_rows_that_repeat_inside_the_splits_get_a_warning_beside_the_duplicates(tmp_path, serial, with_id):
    result = leakage(_categorical(tmp_path, with_id), engine=serial)
    validate(result)
    duplicates = [f for f in result.findings if f.code == "exact_duplicate"]
    (repeats,) = [f for f in result.findings if f.code == "rows_repeat_within_splits"]
    assert duplicates and repeats.severity.value == "warning"  # the duplicates stay gaps; the context is said
    assert repeats.evidence["repeat_share"]["train"] > 0.5 and "natural repeats" in repeats.message


def test_unique_rows_get_no_repeat_warning(tmp_path, serial):
    result = leakage(_splits(tmp_path, copies=30), engine=serial)
    assert "rows_repeat_within_splits" not in [f.code for f in result.findings]

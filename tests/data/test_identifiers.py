"""Identifier columns are not drift (a new user's first real table, issue 23 follow-up).

breast_cancer split 426/143 in file order with a ``row_id`` (0..425, then 426..568) gave KS D = 1 and exit 1: a
"drift" that is only the numbering. The same ids as text were info. Both forms are now ``identifier_column`` (info),
out of BH and the verdict; a real shift in a real feature beside them still fails; ``--columns`` tests them."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from sklearn import datasets

from gapcheck.cli.app import main
from gapcheck.data.api import drift
from gapcheck.data.drift import DriftOptions
from gapcheck.data.identifiers import identifier_reason, name_tokens
from gapcheck.data.sketches import column_stats
from gapcheck.engines import open_engine
from tests.data.conftest import validate


@pytest.fixture(scope="module")
def serial():
    with open_engine("serial") as engine:
        yield engine


def _split_with_ids(folder, shift: float = 0.0):
    table = datasets.load_breast_cancer(as_frame=True).frame.sample(frac=1.0, random_state=0)  # file order is not random
    table.insert(0, "row_id", np.arange(len(table)))  # sequential, split in file order: disjoint ranges
    table.insert(0, "patient_id", [f"P{i:05d}" for i in range(len(table))])
    table.insert(0, "serial", np.arange(len(table)) + 1000)  # no id-like name: a contiguous numbering
    train, val = table.iloc[:426], table.iloc[426:].copy()
    val["mean radius"] += shift * train["mean radius"].std()
    train.to_csv(folder / "train.csv", index=False)
    val.to_parquet(folder / "val.parquet")
    return folder / "train.csv", folder / "val.parquet"


def _codes(result) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in result.findings:
        out.setdefault(f.code, []).append(f.subject.output or "")
    return out


def test_integer_and_text_ids_are_info_not_drift(tmp_path, serial):
    reference, current = _split_with_ids(tmp_path)
    result = drift(str(reference), str(current), engine=serial)
    validate(result)
    assert not any(f.is_gap for f in result.findings)
    assert sorted(_codes(result)["identifier_column"]) == ["patient_id", "row_id", "serial"]
    row_id = next(f for f in result.features if f.feature == "row_id")
    assert row_id.ks_d == 1.0 and not row_id.drift and row_id.q_value is None and row_id.identifier
    message = next(f.message for f in result.findings if f.subject.output == "row_id")
    assert "looks like an identifier" in message and "--columns row_id" in message
    report = tmp_path / "drift.json"
    assert main(["drift", "--reference", str(reference), "--current", str(current), "--engine", "serial",
                 "--json", str(report)]) == 0
    features = {f["feature"]: f for f in json.loads(report.read_text())["features"]}
    assert features["row_id"]["identifier"] and features["mean radius"]["identifier"] is None  # the JSON says why


def test_a_real_shift_beside_ids_still_fails(tmp_path, serial):
    reference, current = _split_with_ids(tmp_path, shift=1.0)
    result = drift(str(reference), str(current), engine=serial)
    assert _codes(result)["drift"] == ["mean radius"]
    assert sorted(_codes(result)["identifier_column"]) == ["patient_id", "row_id", "serial"]
    assert main(["drift", "--reference", str(reference), "--current", str(current), "--engine", "serial"]) == 1


def test_columns_names_an_id_to_test_it(tmp_path, serial):
    reference, current = _split_with_ids(tmp_path)
    result = drift(str(reference), str(current), DriftOptions(columns=("row_id", "mean radius")), engine=serial)
    assert _codes(result)["drift"] == ["row_id"] and "identifier_column" not in _codes(result)


def _reason(name: str, reference, current):
    ref, cur = pd.Series(reference), pd.Series(current)
    names = [f"row {i}" for i in range(max(len(ref), len(cur)))]
    return identifier_reason(name, column_stats(ref, names[:len(ref)]), column_stats(cur, names[:len(cur)]),
                             ref.to_numpy(np.float64)
                             if ref.dtype.kind in "biuf" else np.full(len(ref), np.nan),
                             cur.to_numpy(np.float64) if cur.dtype.kind in "biuf" else np.full(len(cur), np.nan))


def test_real_integer_features_are_not_ids():
    rng = np.random.default_rng(0)
    ages = rng.integers(18, 90, 300)  # repeats: never an id, whatever its name
    assert _reason("age", ages[:200], ages[200:]) is None and _reason("age_id", ages[:200], ages[200:]) is None
    sparse = rng.choice(1_000_000, 300, replace=False)  # unique integers, not a contiguous range, no id-like name
    assert _reason("income", sparse[:200], sparse[200:]) is None
    assert _reason("customer_id", sparse[:200], sparse[200:]) is not None  # the same values named like an id
    floats = rng.normal(size=300)  # unique, not integers
    assert _reason("row", floats[:200], floats[200:]) is None
    assert _reason("id", np.arange(10), np.arange(10, 15)) is None  # too few rows to tell
    assert _reason("valid", sparse[:200], sparse[200:]) is None  # "valid" is not "id"
    assert _reason("order_no", sparse[:200], sparse[200:]) is not None  # ... "no" is
    counts = rng.integers(0, 5, 300)  # a count named like a number: repeats, so a feature
    assert _reason("number_of_rooms", counts[:200], counts[200:]) is None


def test_name_tokens():
    assert name_tokens("PatientID") == ["patient", "id"] and name_tokens("row-id") == ["row", "id"]
    assert name_tokens("Unnamed: 0") == ["unnamed", "0"] and name_tokens("humidity") == ["humidity"]


def test_64_bit_ids_beyond_float_precision_are_ids_not_drift(tmp_path, serial):
    """Twitter-style user ids (~1.5e18, above 2**53) collapse as float64 values: they were a drift gap (attacker D4)."""
    rng = np.random.default_rng(0)
    for name, first in (("train.csv", 0), ("val.csv", 500)):
        pd.DataFrame({"user_id": [str(1_500_000_000_000_000_000 + 7919 * (first + i)) for i in range(500)],
                      "score": rng.normal(size=500)}).to_csv(tmp_path / name, index=False)
    result = drift(str(tmp_path / "train.csv"), str(tmp_path / "val.csv"), engine=serial)
    assert not any(f.is_gap for f in result.findings), [f.message for f in result.findings if f.is_gap]
    (said,) = [f for f in result.findings if f.code == "identifier_column"]
    assert said.subject.output == "user_id" and "named like an identifier" in said.message


INT64_MAX = 2 ** 63 - 1


def _wine_by_class(folder, sentinel: bool):
    """wine's ``proline`` (integers, repeats) split by cultivar: class 0 ~1100, class 1 ~520 — a real shift."""
    wine = datasets.load_wine(as_frame=True).frame
    sides = []
    for name, cls in (("ref.csv", 0), ("cur.csv", 1)):
        part = wine.loc[wine["target"] == cls, ["proline", "alcohol"]].astype({"proline": "int64"})
        if sentinel:  # one INT64_MAX "missing" code per side, as exports write it
            part = pd.concat([part, pd.DataFrame({"proline": [INT64_MAX], "alcohol": [part["alcohol"].iloc[0]]})])
        part.to_csv(folder / name, index=False)
        sides.append(str(folder / name))
    return sides


@pytest.mark.parametrize("sentinel", [False, True])
def test_a_64_bit_sentinel_never_makes_a_feature_an_identifier(tmp_path, serial, sentinel):
    """Attacker D5a: one value >= 2**53 per side made any integer column a "64-bit identifier" (abs().max(), no
    uniqueness test): proline's real shift (KS D ~0.9) passed with the sentinel and failed without it."""
    reference, current = _wine_by_class(tmp_path, sentinel)
    result = drift(reference, current, engine=serial)
    assert "identifier_column" not in _codes(result)
    assert "proline" in _codes(result)["drift"]
    assert main(["drift", "--reference", reference, "--current", current, "--engine", "serial"]) == 1


def test_large_magnitudes_and_numbering_words_inside_names_are_features():
    """Attacker D5b/c: rounded byte counts near 1e16-1e17 were "64-bit identifiers"; unique integers named
    ``price_no_tax`` or ``num_bytes`` were identifiers by the substring-like words "no"/"num"."""
    rng = np.random.default_rng(1)
    ref_bytes, cur_bytes = np.round(rng.uniform(1e16, 9e16, 300)), np.round(rng.uniform(1e17, 2e17, 300))
    assert _reason("bytes_sent", ref_bytes, cur_bytes) is None
    prices = rng.choice(2_000_000, 600, replace=False)  # unique integers, not contiguous
    for name in ("price_no_tax", "num_bytes", "number_of_items", "no_show_count"):
        assert _reason(name, prices[:300], prices[300:]) is None, name
    with_sentinel = np.append(rng.integers(0, 500, 299), INT64_MAX)  # repeats + one sentinel
    assert _reason("amount_cents", with_sentinel, with_sentinel.copy()) is None
    assert _reason("amount_id", with_sentinel, with_sentinel.copy()) is None  # not unique: no name rescues it


def test_real_identifiers_stay_identifiers():
    """The earlier true positives: Kaggle's PassengerId / ID_code, Telco's customerID, pandas' Unnamed: 0, a
    ``record`` numbering, Twitter-style 64-bit ids that are unique, ``order_no`` (numbering word last)."""
    rng = np.random.default_rng(2)
    sparse = rng.choice(10_000_000, 600, replace=False)
    for name in ("PassengerId", "ID_code", "record", "order_no", "row", "user_key", "Unnamed: 0"):
        assert _reason(name, sparse[:300], sparse[300:]) is not None, name
    numbered = np.arange(600)  # a contiguous numbering under any name
    assert _reason("Unnamed: 0", numbered[:300], numbered[300:]) is not None
    assert _reason("n", numbered[:300], numbered[300:]) is not None
    snowflakes = (1_500_000_000_000_000_000 + 4_194_304 * np.sort(rng.choice(10**9, 600, replace=False))).astype(float)
    assert _reason("tweet_id", snowflakes[:300], snowflakes[300:]) is not None
    assert _reason("tweet", snowflakes[:300], snowflakes[300:]) is None  # magnitude alone: never an identifier
    letters = rng.choice(list("ABCDEFGH"), 600)
    customers = pd.Series([f"{i:04d}-{c}" for i, c in enumerate(letters)], dtype=object)
    assert _reason("customerID", customers[:300], customers[300:].reset_index(drop=True)) is not None

"""A numbering that holds a sentinel is still an identifier (a new user's exported table).

breast_cancer in file order with a ``sample`` numbering (1000.., split 426/143) whose unknown rows were written -1
was "drift" with KS D = 1 and exit 1: the -1 broke the contiguous-range rule. A ``row_id`` with one 999999999 was an
identifier, but its table row showed Wasserstein = 56800 reference stds (the std was the sentinel's). A few typical
sentinels (0, -1, all nines, the largest 8- to 64-bit integers) at a numbering's ends are now set aside, named in the
finding, and kept out of the moments shown; a real feature with an outlier stays a feature."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn import datasets

from gapcheck.cli.app import main
from gapcheck.data.api import drift
from gapcheck.data.identifiers import identifier_verdict
from gapcheck.data.sketches import column_stats
from gapcheck.engines import open_engine
from tests.data.conftest import validate


@pytest.fixture(scope="module")
def serial():
    with open_engine("serial") as engine:
        yield engine


def _numbered(folder, sentinels: dict[str, dict[int, int]]) -> tuple[str, str]:
    """breast_cancer shuffled, with ``sample`` (1000.., no id-like name) and ``row_id`` numberings; ``sentinels``:
    {column: {row: value}} written over the numbering (an export's "unknown"); split 426/143 in file order."""
    table = datasets.load_breast_cancer(as_frame=True).frame.sample(frac=1.0, random_state=0)
    table.insert(0, "sample", np.arange(len(table)) + 1000)
    table.insert(0, "row_id", np.arange(len(table)))
    for column, rows in sentinels.items():
        for row, value in rows.items():
            table.iloc[row, table.columns.get_loc(column)] = value
    table.iloc[:426].to_csv(folder / "train.csv", index=False)
    table.iloc[426:].to_csv(folder / "val.csv", index=False)
    return str(folder / "train.csv"), str(folder / "val.csv")


def test_a_numbering_with_minus_one_sentinels_is_an_identifier(tmp_path, serial):
    train, val = _numbered(tmp_path, {"sample": {7: -1, 100: -1, 500: -1}})
    result = drift(train, val, engine=serial)
    validate(result)
    said = {f.subject.output: f for f in result.findings if f.code == "identifier_column"}
    assert set(said) == {"row_id", "sample"} and not any(f.is_gap for f in result.findings)
    assert "contiguous range" in said["sample"].message and "sentinel value(s) -1" in said["sample"].message
    assert said["sample"].evidence["sentinels"] == [{"value": -1.0, "reference": 2, "current": 1, "unsampled": []}]
    assert main(["drift", "--reference", train, "--current", val, "--engine", "serial"]) == 0


def test_a_sentinel_is_kept_out_of_the_identifier_moments(tmp_path, serial):
    train, val = _numbered(tmp_path, {"row_id": {450: 999_999_999}})
    result = drift(train, val, engine=serial)
    document = validate(result)
    said = {f.subject.output: f for f in result.findings if f.code == "identifier_column"}["row_id"]
    assert said.evidence["sentinels"] == [{"value": 999_999_999.0, "reference": 0, "current": 1, "unsampled": []}]
    row_id = next(f for f in document["features"] if f["feature"] == "row_id")
    assert row_id["mean_current"] < 600 and row_id["std_current"] < 50  # 0..568 without the 999999999
    assert row_id["wasserstein_std"] < 3  # was 56800.6: the sentinel's std
    assert row_id["n_current"] == 142


def test_a_numbering_read_from_a_sample_with_a_rare_sentinel():
    """A side larger than its row sample: the count is estimated and the range's ends come from the sample where
    the exact min/max is a sentinel; an INT32_MAX the sample missed is still seen as the exact max."""
    rng = np.random.default_rng(0)
    ids = np.arange(100_000, dtype=np.float64)
    ids[[0, 7, 5, 10]] = 999_999_999  # rows 0, 5 and 10 in the sample (every fifth row), row 7 not
    ids[12_346] = 2_147_483_647  # not in the sample
    names = [f"row {i}" for i in range(len(ids))]
    stats = column_stats(pd.Series(ids), names)
    sample = ids[::5]
    verdict = identifier_verdict("sample", stats, stats, sample, sample)
    assert verdict is not None and "contiguous range" in verdict.reason
    assert [(s.value, s.reference) for s in verdict.sentinels] == [(999_999_999.0, 3), (2_147_483_647.0, 0)]
    assert verdict.sentinels[1].unsampled == ("reference", "current") and verdict.sentinels[0].unsampled == ()
    assert "2147483647 (in 0 reference and 0 current sampled row(s); the reference's exact min/max" in verdict.reason
    plain = np.arange(100_000, dtype=np.float64)  # no sentinel: the sample's missing the exact 0 makes none
    stats = column_stats(pd.Series(plain), names)
    sample = plain[rng.choice(len(plain), 20_000, replace=False)]
    sample = sample[sample != 0]
    verdict = identifier_verdict("sample", stats, stats, sample, sample)
    assert verdict is not None and verdict.sentinels == ()
    sparse = np.sort(rng.choice(10_000_000, 100_000, replace=False)).astype(np.float64)  # unique, not a range
    sparse[:3] = -1
    stats = column_stats(pd.Series(sparse), names)
    assert identifier_verdict("amount", stats, stats, sparse[:20_000], sparse[:20_000]) is None


def _verdict(name: str, reference: np.ndarray, current: np.ndarray):
    ref, cur = pd.Series(reference), pd.Series(current)
    return identifier_verdict(name, column_stats(ref, [f"r{i}" for i in range(len(ref))]),
                              column_stats(cur, [f"c{i}" for i in range(len(cur))]),
                              ref.to_numpy(np.float64), cur.to_numpy(np.float64))


def test_real_features_with_outliers_stay_features():
    rng = np.random.default_rng(3)
    numbered = np.arange(600)
    assert _verdict("n", np.append(numbered[:300], -1), np.append(numbered[300:], 999)) is not None
    # an outlier that is no sentinel code (12345, -7) never makes a range
    assert _verdict("n", np.append(numbered[:300], 12_345), numbered[300:]) is None
    assert _verdict("n", np.append(numbered[:300], -7), numbered[300:]) is None
    # sentinels in more than a handful of rows (and over 1%): a feature with a code, not a numbering
    assert _verdict("n", np.append(numbered[:300], [-1] * 10), numbered[300:]) is None
    # unique integers that are no range, with a -1: a feature unless named like an identifier
    sparse = rng.choice(1_000_000, 600, replace=False)
    assert _verdict("income", np.append(sparse[:300], -1), sparse[300:]) is None
    # repeats are never an identifier, sentinel or not (the 64-bit sentinel rule of attacker D5a)
    ages = rng.integers(18, 90, 600)
    assert _verdict("age_id", np.append(ages[:300], 2 ** 63 - 1), ages[300:]) is None
    # the end of a range that is a sentinel-like number but continues it is part of it, never called a sentinel
    ones = _verdict("n", np.arange(1, 600), np.arange(600, 1000))  # 999 ends the range
    assert ones is not None and ones.sentinels == ()

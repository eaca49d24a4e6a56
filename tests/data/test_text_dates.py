"""Dates stored as text are dates (a new user's time-ordered split of a CSV).

A CSV has no date type: diabetes with a ``visit_date`` ("2024-03-01"), a ``recorded_at`` ("2024-03-01T10:00:00")
and an ``updated`` ("2024-03-01 10:00") split by time (train the older 80%, validation the newer 20%: the honest
split of a time series) gave ``visit_date`` as a categorical "drift" (Cramér's V = 1, exit 1) and the two
timestamps as "identifiers", where the same columns as parquet datetimes are a ``time_ordered_split``. Columns of ISO
date text are now read as dates on the workers: the same time_ordered_split (whatever their name), a KS test when
the split is not by time, and cells that are no date counted and reported (bad_input), never read as numbers."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn import datasets

from gapcheck.cli.app import main
from gapcheck.data.api import drift
from gapcheck.data.columns import text_dates
from gapcheck.engines import open_engine
from tests.data.conftest import validate

DATED = ("visit_date", "recorded_at", "updated")


@pytest.fixture(scope="module")
def serial():
    with open_engine("serial") as engine:
        yield engine


def _visits(seed: int = 0) -> pd.DataFrame:
    """diabetes (442 patients) with the visit's day and time as text, in time order (a few visits a day)."""
    table = datasets.load_diabetes(as_frame=True).frame
    rng = np.random.default_rng(seed)
    stamps = pd.Timestamp("2024-01-01") + pd.to_timedelta(np.sort(rng.integers(0, 300 * 86_400, len(table))), "s")
    table.insert(0, "visit_date", stamps.strftime("%Y-%m-%d"))
    table.insert(1, "recorded_at", stamps.strftime("%Y-%m-%dT%H:%M:%S"))
    table.insert(2, "updated", stamps.strftime("%Y-%m-%d %H:%M"))
    return table


def _by_time(folder, table: pd.DataFrame, fmt: str = "csv") -> tuple[str, str]:
    cut = int(len(table) * 0.8)
    paths = (folder / f"older.{fmt}", folder / f"newer.{fmt}")
    for path, part in zip(paths, (table.iloc[:cut], table.iloc[cut:]), strict=True):
        part.to_csv(path, index=False) if fmt == "csv" else part.to_parquet(path, index=False)
    return str(paths[0]), str(paths[1])


def _codes(result) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in result.findings:
        out.setdefault(f.code, set()).add(f.subject.output or "")
    return out


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_time_ordered_split_of_text_dates_is_said_not_drift(tmp_path, serial, fmt):
    older, newer = _by_time(tmp_path, _visits(), fmt)
    result = drift(older, newer, engine=serial)
    document = validate(result)
    codes = _codes(result)
    assert codes["time_ordered_split"] == set(DATED)  # recorded_at and updated: no time word needed, the values are
    assert "drift" not in codes and "identifier_column" not in codes and not any(f.is_gap for f in result.findings)
    said = {f.subject.output: f for f in result.findings if f.code == "time_ordered_split"}
    assert "after every reference value (2024-01-01" in said["visit_date"].message  # the ranges said as dates
    assert said["recorded_at"].evidence["dates"] is True
    tested = {f["feature"]: f for f in document["features"]}
    assert tested["visit_date"]["test"] == "ks" and tested["visit_date"]["ks_d"] == 1.0
    assert main(["drift", "--reference", older, "--current", newer, "--engine", "serial"]) == 0


def test_text_dates_of_a_random_split_are_tested_as_dates(tmp_path, serial):
    """Not time-ordered: a KS test on the dates (no drift on a random split); dates that moved later drift."""
    table = _visits().sample(frac=1.0, random_state=1)
    table.iloc[:350].to_csv(tmp_path / "train.csv", index=False)
    table.iloc[350:].to_csv(tmp_path / "val.csv", index=False)
    clean = drift(str(tmp_path / "train.csv"), str(tmp_path / "val.csv"), engine=serial)
    features = {f.feature: f for f in clean.features}
    assert all(features[name].test == "ks" and not features[name].drift for name in DATED)
    assert not any(f.is_gap for f in clean.findings) and "time_ordered_split" not in _codes(clean)
    later = table.iloc[350:].copy()  # the same days, half of them moved 100 days on: overlapping, not a time split
    moved = pd.to_datetime(later["visit_date"]) + pd.to_timedelta(np.arange(len(later)) % 2 * 100, "D")
    later["visit_date"] = moved.dt.strftime("%Y-%m-%d")
    later.to_csv(tmp_path / "val.csv", index=False)
    shifted = drift(str(tmp_path / "train.csv"), str(tmp_path / "val.csv"), engine=serial)
    (drifted,) = [f for f in shifted.features if f.drift]
    assert drifted.feature == "visit_date" and drifted.test == "ks" and not drifted.time_order


def test_cells_that_are_no_dates_are_counted_and_reported(tmp_path, serial):
    """'unknown', an impossible day and a date without dashes (which would read as the number 20240301) are kept
    out of the tests and listed; the column is still read as dates."""
    table = _visits()
    for row, cell in ((3, "unknown"), (10, "2024-02-30"), (20, "20240301")):
        table.loc[row, "visit_date"] = cell
    older, newer = _by_time(tmp_path, table)
    result = drift(older, newer, engine=serial)
    (bad,) = [f for f in result.findings if f.code == "bad_input"]
    (item,) = bad.evidence["items"]
    assert item.startswith("reference:visit_date: unparseable dates: 3 of 353 cell(s)")
    assert "'unknown'" in item and "'2024-02-30'" in item and "'20240301'" in item
    feature = next(f for f in result.features if f.feature == "visit_date")
    assert feature.n_reference == 350 and feature.time_order  # 3 cells set aside, none read as a number
    assert "drift" not in _codes(result)
    newer_rows = pd.read_csv(newer).assign(visit_date="unknown")  # no date left on one side: a gap, not tested
    newer_rows.to_csv(newer, index=False)
    result = drift(older, newer, engine=serial)
    (gap,) = [f for f in result.findings if f.code == "drift"]
    assert gap.subject.output == "visit_date" and gap.evidence["examples"] == ["unknown"]
    assert gap.message.startswith("visit_date: dates in the reference, text in the current split (89 of the current split's 89")


def test_the_dates_do_not_depend_on_how_a_csv_is_chunked(tmp_path, serial, monkeypatch):
    """Each CSV chunk is read on its own (a worker never holds a whole file): 50-row chunks, one of them holding all
    the bad cells, give the same statistics as one chunk."""
    table = _visits()
    table.loc[[3, 10, 20], "visit_date"] = "unknown"
    older, newer = _by_time(tmp_path, table)
    whole = validate(drift(older, newer, engine=serial))
    monkeypatch.setattr("gapcheck.data.readers.CSV_CHUNK_ROWS", 50)
    chunked = validate(drift(older, newer, engine=serial))
    assert chunked["findings"] == whole["findings"]
    for one, other in zip(chunked["features"], whole["features"], strict=True):  # sums added in another order
        assert one == {k: pytest.approx(v, rel=1e-9) if isinstance(v, float) else v for k, v in other.items()}


def test_only_iso_date_text_is_dates():
    frame = pd.DataFrame({
        "iso": ["2024-03-01", "2024-03-01T10:00:00Z", "2024-03-01 10:00", "2024-03-01T10:00:00.5+02:00", None],
        "numbers_as_text": ["1", "2", "3", "4", "5"],
        "free_text": ["shipped 2024-03-01", "late", "2024-03-02 by noon", "n/a", "ok"],
        "us_dates": ["03/01/2024", "03/02/2024", "03/03/2024", "03/04/2024", "03/05/2024"],
        "half_dates": ["2024-03-01", "2024-03-02", "soon", "later", "never"],  # its dates read; the side decides
        "open_end": ["2024-03-01", "9999-12-31", "2024-03-03", "2024-03-04", "2024-03-05"],
    })
    read, parsed = text_dates(frame.copy())
    assert parsed == {"iso": 4, "open_end": 5, "half_dates": 2}  # 9999-12-31 is past pandas' ns: read by numpy
    assert read["iso"].tolist()[:4] == [1_709_251_200e6, 1_709_287_200e6, 1_709_287_200e6, 1_709_280_000.5e6]
    assert np.isnan(read["iso"].iloc[4])  # missing stays missing
    assert read["open_end"].iloc[1] == float(np.datetime64("9999-12-31", "us").astype(np.int64))
    for name in ("numbers_as_text", "free_text", "us_dates"):
        assert read[name].tolist() == frame[name].tolist(), name
    assert read["half_dates"].tolist()[2:] == ["not a date: soon", "not a date: later", "not a date: never"]
    # MySQL's zero date, an impossible day: no date, kept as text (never NaN, never a number)
    read, parsed = text_dates(pd.DataFrame({"shipped": ["2024-03-01"] * 9 + ["0000-00-00"]}))
    assert parsed == {"shipped": 9} and read["shipped"].iloc[9] == "not a date: 0000-00-00"

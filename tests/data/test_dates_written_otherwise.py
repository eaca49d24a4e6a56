"""Dates stored as text, the cases a review found passing unseen or alarming falsely (diabetes and breast_cancer).

- The serving side writes the dates another way (03/14/2024 where the reference has 2024-03-14): the column was
  untested with a bad_input warning and counted in "no drift in N feature(s)", exit 0; it is a ``drift`` gap now,
  and so is a share of cells that are no ISO date that moved (8% of the current split written so).
- A zone written as hours only (PostgreSQL's text of a timestamptz, ``2024-03-01 10:00:00+00``) is a date.
- A side's 6% of 'unknown' cells all inside one CSV chunk made the column "mixed column types", untested: the date
  decision is the side's now, whatever the chunking.
- A split by time cut inside one day, or with one placeholder date on the wrong side, was drift (KS D = 0.998).
- "0000-01-01" was read as a date of year 0.
"""
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


@pytest.fixture(scope="module")
def serial():
    with open_engine("serial") as engine:
        yield engine


def _stamps(size: int, seed: int, days: int = 200) -> pd.DatetimeIndex:
    rng = np.random.default_rng(seed)
    return pd.Timestamp("2024-01-01") + pd.to_timedelta(rng.integers(0, days * 86_400, size), "s")


def _diabetes_with(column: str, reference: list[str], current: list[str], folder) -> tuple[str, str]:
    """diabetes shuffled and split 70/30 (a random split: no feature drifts), ``column`` holding the given text."""
    table = datasets.load_diabetes(as_frame=True).frame.sample(frac=1.0, random_state=2).reset_index(drop=True)
    cut = int(len(table) * 0.7)
    paths = (str(folder / "reference.csv"), str(folder / "current.csv"))
    for path, part, cells in zip(paths, (table.iloc[:cut], table.iloc[cut:]), (reference, current), strict=True):
        part.assign(**{column: cells}).to_csv(path, index=False)
    return paths


def _gaps(result) -> list:
    return [f for f in result.findings if f.is_gap]


@pytest.mark.parametrize("share", [1.0, 0.2])
def test_dates_written_another_way_in_the_current_split_are_a_gap(tmp_path, serial, share):
    """All of the current split's dates, or a fifth of them, written MM/DD/YYYY: a drift gap naming the cells,
    exit 1 (was: test 'none', a bad_input warning, "PASS no drift in 12 feature(s)", exit 0)."""
    when = _stamps(442, seed=3)
    iso, us = list(when.strftime("%Y-%m-%d")), list(when.strftime("%m/%d/%Y"))
    current = [u if i < share * 133 else d for i, (u, d) in enumerate(zip(us[309:], iso[309:], strict=True))]
    reference, current_path = _diabetes_with("visit", iso[:309], current, tmp_path)
    result = drift(reference, current_path, engine=serial)
    validate(result)
    (gap,) = _gaps(result)
    assert gap.code == "drift" and gap.subject.output == "visit"
    assert gap.message.startswith(f"visit: dates in the reference, text in the current split ({round(share * 133)} "
                                  f"of the current split's 133 cell(s) are no ISO date, e.g. '")
    assert gap.evidence["examples"][0] in us[309:]
    assert result.headline.startswith("1 of 12 feature(s) drifted: visit")
    assert not [f for f in result.findings if f.code == "bad_input"]  # said once, as the gap
    assert main(["drift", "--reference", reference, "--current", current_path, "--engine", "serial"]) == 1
    (swapped,) = _gaps(drift(current_path, reference, engine=serial))  # the text on the reference's side
    assert swapped.message.startswith(f"visit: text in the reference, dates in the current split "
                                      f"({round(share * 133)} of the reference's 133 cell(s) are no ISO date")


def test_too_many_distinct_cells_written_another_way_name_their_rows(tmp_path, serial):
    """Over 1,000 distinct cells that are no date keep no examples (the categories overflow): the rows are named."""
    when = _stamps(3_000, seed=12)
    frames = (pd.DataFrame({"at": when[:1_500].strftime("%Y-%m-%d %H:%M:%S")}),
              pd.DataFrame({"at": when[1_500:].strftime("%m/%d/%Y %H:%M:%S")}))
    for name, frame in zip(("reference", "current"), frames, strict=True):
        frame.to_csv(tmp_path / f"{name}.csv", index=False)
    result = drift(str(tmp_path / "reference.csv"), str(tmp_path / "current.csv"), engine=serial)
    (gap,) = _gaps(result)
    assert gap.message.startswith("at: dates in the reference, text in the current split (over 1,000 distinct cells, "
                                  "first at rows current.csv:2, current.csv:3, current.csv:4)")


def test_a_moved_share_of_cells_that_are_no_dates_is_a_gap(tmp_path, serial):
    """8% of the current split written MM/DD/YYYY keeps it a date column (≥ 90% ISO dates) whose KS test on the rest
    is quiet: the share of cells that are no date moved from 0% to 8%, a drift gap."""
    when = _stamps(442, seed=4)
    iso, us = list(when.strftime("%Y-%m-%d")), list(when.strftime("%m/%d/%Y"))
    current = [u if i % 12 == 0 else d for i, (u, d) in enumerate(zip(us[309:], iso[309:], strict=True))]
    result = drift(*_diabetes_with("visit", iso[:309], current, tmp_path), engine=serial)
    (gap,) = _gaps(result)
    assert gap.message.startswith("visit: cells that are no ISO date 0.0% of the reference's (0 of 309), 9.0% of the "
                                  "current split's (12 of 133), e.g. '")
    visit = next(f for f in result.features if f.feature == "visit")
    assert visit.test == "ks" and visit.drift and result.headline.startswith("1 of 12 feature(s) drifted: visit")


def test_a_column_no_test_compares_is_not_counted_as_passing(tmp_path, serial):
    """Numbers in the reference, text in the current split: untested (bad_input), said apart in the headline,
    never one of the features without drift."""
    reference, current = _diabetes_with("dose", [str(i % 7) for i in range(309)],
                                        [f"{i % 7} mg" for i in range(133)], tmp_path)
    result = drift(reference, current, engine=serial)
    assert next(f for f in result.features if f.feature == "dose").test == "none"
    assert result.headline.startswith("no drift in 11 feature(s); 1 column(s) not tested: dose")


def test_a_zone_of_hours_only_is_a_date(tmp_path, serial):
    """PostgreSQL writes a timestamptz as '2024-03-01 10:00:00+00': read as a date (was an identifier, PASS), the
    same drift as '+00:00' gives."""
    read, parsed = text_dates(pd.DataFrame({"at": ["2024-03-01 10:00:00+00", "2024-03-01 10:00:00+05",
                                                   "2024-03-01T10:00-03"]}))
    assert parsed == {"at": 3}
    assert read["at"].tolist() == [1_709_287_200e6, 1_709_269_200e6, 1_709_298_000e6]
    ref, cur = _stamps(309, seed=5, days=180), _stamps(133, seed=6, days=180) + pd.Timedelta(days=60)
    results = []
    for zone in ("+00", "+00:00"):
        folder = tmp_path / zone.replace(":", "")
        folder.mkdir()
        paths = _diabetes_with("last_login", [t.strftime("%Y-%m-%d %H:%M:%S") + zone for t in ref],
                               [t.strftime("%Y-%m-%d %H:%M:%S") + zone for t in cur], folder)
        results.append(validate(drift(*paths, engine=serial)))
    hours, minutes = ({f["feature"]: f for f in r["features"]}["last_login"] for r in results)
    assert hours["test"] == "ks" and hours["drift"] and hours["identifier"] is None
    assert hours["ks_d"] == minutes["ks_d"]


def test_the_date_decision_is_the_sides_whatever_the_chunking(tmp_path, serial, monkeypatch):
    """6% of 'unknown' cells all inside one CSV chunk (15% of it) made the column text in that chunk and "mixed
    column types" on the side, untested, exit 0; spread evenly they were tested and reported. Both are now a date
    column with the cells reported, and the moved share of cells that are no date is a gap."""
    monkeypatch.setattr("gapcheck.data.readers.CSV_CHUNK_ROWS", 1_000)
    rng = np.random.default_rng(7)
    seen = np.array(_stamps(5_000, seed=8).strftime("%Y-%m-%dT%H:%M:%S"), dtype=object)
    bunched, spread = seen.copy(), seen.copy()
    bunched[2_000 + np.flatnonzero(rng.random(1_000) < 0.3)] = "unknown"
    spread[rng.permutation(5_000)[:int((bunched == "unknown").sum())]] = "unknown"
    current = pd.DataFrame({"x": rng.normal(size=1_200), "seen": _stamps(1_200, seed=9).strftime("%Y-%m-%dT%H:%M:%S")})
    current.to_csv(tmp_path / "current.csv", index=False)
    documents = []
    for name, cells in (("bunched", bunched), ("spread", spread)):
        pd.DataFrame({"x": rng.normal(size=5_000), "seen": cells}).to_csv(tmp_path / f"{name}.csv", index=False)
        result = drift(str(tmp_path / f"{name}.csv"), str(tmp_path / "current.csv"), engine=serial)
        documents.append(validate(result))
        items = [i for f in result.findings if f.code == "bad_input" for i in f.evidence["items"]]
        assert len(items) == 1 and items[0].startswith("reference:seen: unparseable dates: ")
        assert "e.g. 'unknown'" in items[0]
        (gap,) = _gaps(result)
        assert gap.subject.output == "seen" and gap.evidence["test"] == "not_dates_share"
    tested = [{f["feature"]: f for f in d["features"]}["seen"] for d in documents]
    assert [t["test"] for t in tested] == ["ks", "ks"] and tested[0]["n_reference"] == tested[1]["n_reference"]


def _breast_cancer_by_day(cut_inside_a_day: bool) -> pd.DataFrame:
    table = datasets.load_breast_cancer(as_frame=True).frame.drop(columns="target")
    table = table.sample(frac=1.0, random_state=1).reset_index(drop=True)
    days = _stamps(len(table), seed=10, days=300).sort_values().strftime("%Y-%m-%d")
    table["visit"] = list(days)
    if cut_inside_a_day:
        cut = int(len(table) * 0.8)
        table.loc[cut, "visit"] = table.loc[cut - 1, "visit"]
    return table


def _split(table: pd.DataFrame, folder, cut: int) -> tuple[str, str]:
    paths = (str(folder / "older.csv"), str(folder / "newer.csv"))
    table.iloc[:cut].to_csv(paths[0], index=False)
    table.iloc[cut:].to_csv(paths[1], index=False)
    return paths


def test_a_time_split_cut_inside_a_day_is_a_time_ordered_split(tmp_path, serial):
    """Day-resolution dates with the cut inside one day (that day on both sides): was drift (KS D = 0.998, exit 1),
    now time_ordered_split naming the tie."""
    table = _breast_cancer_by_day(cut_inside_a_day=True)
    cut = int(len(table) * 0.8)
    older, newer = _split(table, tmp_path, cut)
    result = drift(older, newer, engine=serial)
    validate(result)
    (said,) = [f for f in result.findings if f.code == "time_ordered_split"]
    day = table.loc[cut, "visit"]
    tied = {"reference": int((table["visit"].iloc[:cut] == day).sum()), "current": int((table["visit"].iloc[cut:] == day).sum())}
    assert said.evidence["tied"] == tied and min(tied.values()) >= 1
    assert said.evidence["out_of_order"] == {"reference": 0, "current": 0}
    assert f"{tied['reference']} reference and {tied['current']} current value(s) tied at the cut ({day})" in said.message
    assert not _gaps(result)
    assert main(["drift", "--reference", older, "--current", newer, "--engine", "serial"]) == 0


def test_one_placeholder_date_on_the_wrong_side_is_said_not_drift(tmp_path, serial):
    """One 1900-01-01 placeholder in the current split: time_ordered_split with the stray counted (was drift);
    2% of the current split before the cut is no time split any more."""
    table = _breast_cancer_by_day(cut_inside_a_day=False)
    cut = int(len(table) * 0.8)
    table.loc[cut + 5, "visit"] = "1900-01-01"
    result = drift(*_split(table, tmp_path, cut), engine=serial)
    (said,) = [f for f in result.findings if f.code == "time_ordered_split"]
    assert said.evidence["out_of_order"] == {"reference": 0, "current": 1}
    assert "1 current value(s) before it (the earliest 1900-01-01)" in said.message and not _gaps(result)
    early = table["visit"].iloc[:cut].sample(3, random_state=0).tolist()
    table.loc[[cut + 1, cut + 2, cut + 3], "visit"] = early  # 4 of 114 (3.5%) before the cut: drift again
    result = drift(*_split(table, tmp_path, cut), engine=serial)
    assert not [f for f in result.findings if f.code == "time_ordered_split"]
    assert [f.subject.output for f in _gaps(result)] == ["visit"]


def test_a_day_most_rows_share_is_no_cut(tmp_path, serial):
    """Ties are tolerated at the cut only while they are few: a column that is one day on 90% of the rows, split in
    date order, shares that day because it is the column's, not a cut's (no time_ordered_split)."""
    table = datasets.load_breast_cancer(as_frame=True).frame.drop(columns="target")
    rng = np.random.default_rng(11)
    table["visit"] = np.where(rng.random(len(table)) < 0.9, "2024-05-01",
                              np.where(rng.random(len(table)) < 0.5, "2024-04-01", "2024-06-01"))
    table = table.sort_values("visit", kind="stable").reset_index(drop=True)
    result = drift(*_split(table, tmp_path, int(len(table) * 0.8)), engine=serial)
    assert not [f for f in result.findings if f.code == "time_ordered_split"]
    assert next(f for f in result.features if f.feature == "visit").test == "ks"


def test_year_zero_is_no_date():
    read, parsed = text_dates(pd.DataFrame({"shipped": ["2024-03-01"] * 9 + ["0000-01-01"]}))
    assert parsed == {"shipped": 9} and read["shipped"].iloc[9] == "not a date: 0000-01-01"

"""Which columns leakage compares table rows on: the ones every table split holds.

A row hash covers the columns it is given, so two tables with different columns never share a row hash: a new
user's ``wine_train.csv`` against ``iris_val.csv`` (no column in common) passed with exit 0, and a training table
with two extra id columns hid every planted copy. The driver reads each table file's header (a CSV's first line
through pandas, a parquet footer's schema: what planning already touches), and the job hashes rows over the
columns all splits share. No column in common is bad input (exit 2), and so is an overlap under half of a split's
columns without ``--key`` (wine against iris share only ``target``: every row would "equal" one on it alone); a
partial overlap is compared on the common columns with a ``columns_differ`` warning naming the others. Splits
whose columns are only known once read (a ``.npy``/``.npz`` matrix, a Dataset) are compared as before, on all
their columns.

And which table columns hold dates written as text (drift; the section at the end): a CSV has no date type.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from gapcheck.data.sketches import ColumnStats
from gapcheck.data.sources import SourceKind, SourcePlan

if TYPE_CHECKING:
    from gapcheck.data.features import SidePartial

MAX_LISTED = 20  # column names listed in a message (the evidence holds up to 200)
MIN_SHARED = 0.5  # the common columns must be at least this share of every split's: else not the same table


@dataclass(frozen=True)
class ColumnPlan:
    """The columns rows are compared on (None: every column, as read) and what each split holds beyond them."""

    compared: tuple[str, ...] | None
    only_in: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def partial(self) -> bool:
        return any(self.only_in.values())


def file_columns(payload: dict[str, Any]) -> tuple[str, ...] | None:
    """The column names a table shard's file holds, as the workers will read them (None: not known before)."""
    from gapcheck.data.remote import RemoteReadError

    fmt = payload.get("format")
    try:
        if fmt == "csv":
            return _csv_header(payload["url"])
        if fmt in ("parquet", "pq"):
            return _parquet_columns(payload["url"])
    except RemoteReadError:
        raise  # the server, not the table: exit 3 with its one line, as at listing
    except Exception:  # noqa: BLE001 - an unreadable header is the workers' to report (bad_input, exit 2)
        return None
    return None


def _csv_header(url: str) -> tuple[str, ...]:
    import pandas as pd

    from gapcheck.data.remote import open_file
    from gapcheck.reading import MAX_CSV_LINE, LineGuard

    with open_file(url) as handle:  # pandas' own header rules (duplicates renamed a.1, BOM dropped, quotes)
        header = pd.read_csv(LineGuard(handle, MAX_CSV_LINE), nrows=0, index_col=False, encoding_errors="replace")
    return tuple(str(c) for c in header.columns)


def _parquet_columns(url: str) -> tuple[str, ...]:
    from gapcheck.data.readers import parquet_file

    with parquet_file(url) as handle:
        schema = handle.schema_arrow
    index = {c for c in (schema.pandas_metadata or {}).get("index_columns", []) if isinstance(c, str)}
    return tuple(name for name in schema.names if name not in index)  # a pandas index is not a column to_pandas gives


def column_plan(plans: Sequence[SourcePlan], skip: Sequence[str | None] = (), keyed: bool = False,
                min_shared: float = MIN_SHARED) -> ColumnPlan:
    """The common columns of the table splits (``skip``: label and group columns, never hashed), or refuse: none in
    common, or (without key columns, ``keyed``) under ``min_shared`` of some split's columns."""
    from gapcheck.errors import InputError

    per_split: dict[str, set[str]] = {}
    every_file: list[set[str]] = []
    order: list[str] = []  # the first file's header order: the message reads like the user's header
    for p in plans:
        if p.kind is not SourceKind.table:
            continue
        files = {payload.get("url"): payload for payload in p.payloads}
        found = [file_columns(payload) if url else None for url, payload in files.items()]
        if not found or any(columns is None for columns in found):
            return ColumnPlan(None)  # a split known only once read: compared on everything, as before
        order = order or list(found[0] or ())
        per_split[p.spec.name] = set().union(*found) - {s for s in skip if s}  # type: ignore[arg-type]
        every_file.append(set.intersection(*(set(c or ()) for c in found)))  # files of one split may differ too
    if len(per_split) < 2:
        return ColumnPlan(None)
    common = set.intersection(*every_file) - {s for s in skip if s}
    listed = "; ".join(f"{name}: {_names(columns)}" for name, columns in per_split.items())
    if not common:
        raise InputError(f"the table splits have no column in common ({listed}): their rows cannot be compared")
    if not keyed and any(len(common) < min_shared * len(columns) for columns in per_split.values()):
        # wine against iris share only `target`: rows "equal" on it alone would be a flood of false duplicates
        raise InputError(f"the table splits share only {_names(common)} of their columns ({listed}): not the same "
                         f"table; compare the same columns, or name the key columns with --key")
    ordered = [c for c in order if c in common] + sorted(common - set(order))
    return ColumnPlan(tuple(ordered), {name: tuple(sorted(columns - common)) for name, columns in per_split.items()})


def _names(columns: Sequence[str] | set[str]) -> str:
    ordered = sorted(columns)
    more = f" and {len(ordered) - MAX_LISTED} more" if len(ordered) > MAX_LISTED else ""
    return ", ".join(ordered[:MAX_LISTED]) + more


def columns_finding(plan: ColumnPlan) -> list[Any]:
    """A ``columns_differ`` warning when some split holds columns the others lack (none when all agree)."""
    from gapcheck.codes import data as codes

    if not plan.partial or plan.compared is None:
        return []
    where = "; ".join(f"only in {name}: {_names(extra)}" for name, extra in plan.only_in.items() if extra)
    return [codes.COLUMNS_DIFFER.finding(
        f"rows compared on the {len(plan.compared)} column(s) every split holds ({_names(plan.compared)}); "
        f"not compared: {where}",
        evidence={"compared": list(plan.compared)[:200],
                  "only_in": {name: list(extra)[:200] for name, extra in plan.only_in.items() if extra}})]


def identifier_columns(plan: ColumnPlan, keyed: bool) -> tuple[str, ...]:
    """The compared columns named like a row identifier, set aside for a second row hash (none with ``--key``: the
    user chose the columns; none when nothing else would be left to compare)."""
    from gapcheck.data.identifiers import named_like_row_id

    if keyed or plan.compared is None:
        return ()
    ids = tuple(c for c in plan.compared if named_like_row_id(c))
    return ids if len(ids) < len(plan.compared) else ()


def identifier_finding(ids: Sequence[str]) -> list[Any]:
    """An ``identifier_in_rows`` note when rows are hashed over a column named like a row identifier: rows are then
    compared twice, with it (a copy that kept its id) and without it (a copy renumbered in its new split, which no
    hash over the id can find: attacker D7); copies found only without it are ``exact_duplicate`` gaps too."""
    from gapcheck.codes import data as codes

    if not ids:
        return []
    return [codes.IDENTIFIER_IN_ROWS.finding(
        f"rows are compared with and without {_names(ids)}, named like an identifier: a row copied into another "
        f"split and given a new id there is found by the comparison without it (match "
        f"'row_without_identifiers'); --key names the compared columns explicitly",
        evidence={"columns": list(ids)[:200]})]


# ---- dates stored as text (drift) -------------------------------------------------------------------------------
# A CSV has no date type: a column of "2024-03-01" or "2024-03-01T10:00:00" is read as text, so a split by time
# was a categorical "drift" (Cramér's V = 1) or, all values distinct, an "identifier", where the same column as a
# parquet datetime is a time_ordered_split. Text columns whose cells are ISO dates are read as points in time here,
# on the workers (the values are gone once a column's 1,000 categories overflow): as microseconds since 1970-01-01
# UTC, numbers, so the numeric tests, coverage and time_ordered_split apply.

#: an ISO 8601 date, optionally with a time (``T`` or a space), fractions and a zone: "1" or "3/1/2024" never are
#: (the zone as ``+02:00``, ``+0200`` or hours alone, ``+02``: PostgreSQL's text of a timestamptz, ``... 10:00:00+00``)
ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}(?::?\d{2})?)?)?")
# A text column is dates when ≥ 90% of its cells over the whole side are (ColumnStats.is_numeric: the dates are its
# numbers, MIXED_NUMERIC_SHARE): decided on the merged statistics, never per chunk. A chunk reads its date cells as
# dates as soon as it shows one among the cells probed (DATE_PROBE first and DATE_PROBE spread over it), so a chunk
# that is mostly 'unknown' counts the same cells as one where they are spread thin (a chunk that was under 90%
# dates stayed text, and its 6% of the side made the whole column "mixed column types", untested).
DATE_PROBE = 100
DATE_CELLS = "<date>"  # the category counting a column's cells read as dates (as "<number>" counts numbers in text)
NOT_A_DATE = "not a date: "  # the text an unparseable cell of a date column is kept as (never read as a number)


def date_cells(stats: ColumnStats) -> int:
    """How many cells of a numeric column were read from ISO date text (0: not a date column)."""
    return stats.categories.get(DATE_CELLS, 0) if stats.is_numeric else 0


def text_dates(frame: Any, wanted: Sequence[str] | None = None) -> tuple[Any, dict[str, int]]:
    """``frame`` with its text columns of ISO dates as microseconds since the epoch, and how many cells of each
    were dates. A cell that is not a date (``unknown``, ``2024-02-30``, ``20240301``) stays text, marked with
    :data:`NOT_A_DATE` so it is never read as a number: counted and reported, never silently dropped."""
    parsed: dict[str, int] = {}
    for name in [c for c in frame.columns if wanted is None or str(c) in wanted]:
        column = frame[name]
        if column.dtype.kind in "biufcmM":
            continue
        read = _as_dates(column)
        if read is not None:
            frame[name], parsed[str(name)] = read
    return frame, parsed


def _as_dates(column: Any) -> tuple[Any, int] | None:
    import pandas as pd

    filled = column.dropna()
    if not len(filled) or not _probe(filled).astype(str).str.strip().str.fullmatch(ISO_DATE).any():
        return None  # the cheap look first: most text columns are no dates
    present = column.notna().to_numpy(bool)
    values = filled.astype(str).str.strip()
    shaped = values.str.fullmatch(ISO_DATE).to_numpy(bool)
    micros = np.full(len(values), np.nan)
    micros[shaped] = _microseconds(values[shaped])
    dated = ~np.isnan(micros)
    if not dated.any():
        return None
    if dated.all():
        cells = np.full(len(column), np.nan)
        cells[present] = micros
    else:
        cells = np.full(len(column), np.nan, dtype=object)
        cells[present] = np.where(dated, micros, (NOT_A_DATE + values).to_numpy(object))
    return pd.Series(cells, index=column.index), int(dated.sum())


def _probe(filled: Any) -> Any:
    """The cells a column must show one date among before all are parsed: the first and some spread over it."""
    step = max(1, len(filled) // DATE_PROBE)
    return filled.iloc[np.unique(np.concatenate([np.arange(min(DATE_PROBE, len(filled))),
                                                 np.arange(0, len(filled), step)[:DATE_PROBE]]))]


def _microseconds(values: Any) -> np.ndarray:
    """ISO date text as microseconds since 1970-01-01 UTC (a naive time taken as UTC; NaN where it is no date).
    Dates pandas' nanoseconds cannot hold (before 1677, after 2262: an open end written 9999-12-31) are read by
    numpy at microsecond resolution instead (with no zone: numpy reads none)."""
    import pandas as pd

    when = pd.to_datetime(values, format="ISO8601", utc=True, errors="coerce")
    stamps = when.dt.tz_convert(None).dt.as_unit("us").to_numpy()  # datetime64[us]; pandas may read ns or us
    # year 0 is ISO 8601's only by agreement and an export's "no date" (0000-01-01): pandas' microseconds read it
    micros = np.where(np.isnat(stamps) | (values.str.slice(0, 4) == "0000").to_numpy(bool), np.nan,
                      stamps.astype(np.int64).astype(np.float64))
    missed = np.flatnonzero(np.isnan(micros))
    year, month, day = (values.iloc[missed].str.slice(*span).astype(int).to_numpy() for span in ((0, 4), (5, 7),
                                                                                                  (8, 10)))
    # only a plausible day of a year outside pandas' range is worth numpy's look (one at a time): the others are
    # no date at all (2024-02-30, MySQL's 0000-00-00)
    # (year 0 neither: ISO 8601 has it only by agreement, numpy reads it, and "0000-01-01" is an export's "no date")
    plausible = (year >= 1) & ((year <= 1677) | (year >= 2262)) & (month >= 1) & (month <= 12) & (day >= 1) & (day <= 31)
    for i in missed[plausible]:
        try:
            micros[i] = float(np.datetime64(values.iloc[i].replace(" ", "T"), "us").astype(np.int64))
        except ValueError:
            continue
    return micros


def mark_dates(partial: SidePartial, parsed: dict[str, int]) -> SidePartial:
    """``partial`` with each date column's count of date cells as its :data:`DATE_CELLS` category (its other
    categories are the cells that were no date, under their own text, as a chunk holding no date counts them; the
    dates replace the "<number>" count they would repeat)."""
    for name, count in parsed.items():
        stats = partial.columns.get(name)
        if stats is None or not count:
            continue
        categories: dict[str, int] = {}
        for key, cells in stats.categories.items():
            if key != "<number>":
                text = key[len(NOT_A_DATE):] if key.startswith(NOT_A_DATE) else key
                categories[text] = categories.get(text, 0) + cells
        partial.columns[name] = dataclasses.replace(stats, categories={**categories, DATE_CELLS: count})
    return partial


def date_csv_partial(source: dict[str, Any], columns: list[str] | None, seed: int, k: int) -> SidePartial:
    """A CSV shard's side partial (as :func:`gapcheck.data.features.side_partial` makes it, chunk by chunk) with its
    text date columns read as dates."""
    from gapcheck.data.features import SidePartial, _frame_partial
    from gapcheck.data.readers import iter_frames
    from gapcheck.data.sketches import Reservoir

    merged = SidePartial(reservoir=Reservoir(k=k))
    for shard in iter_frames(source):
        frame, parsed = text_dates(shard.data, columns)
        merged = merged.merge(mark_dates(_frame_partial(frame, shard.names, list(shard.bad), columns, seed, k, ()),
                                         parsed))
    return merged


def parquet_dates(partial: SidePartial, source: dict[str, Any], seed: int, k: int) -> SidePartial:
    """A parquet row group's side partial with its text date columns read again, as dates: only text columns that
    may hold dates (an ISO date among their categories, or too many to count) are read a second time (one column
    of a parquet file is read alone), and their sample rows are the partial's own (the same seeded row names)."""
    from gapcheck.data.features import _frame_partial
    from gapcheck.data.readers import parquet_file, row_names

    maybe = [n for n in partial.order if _may_hold_dates(partial.columns[n])]
    if not maybe:
        return partial
    with parquet_file(source["url"]) as handle:
        frame = handle.read_row_group(source["row_group"], columns=maybe).to_pandas()
    frame, parsed = text_dates(frame.rename(columns=str))
    if not parsed:
        return partial
    dated = _frame_partial(frame[list(parsed)], row_names(source, len(frame)), [], list(parsed), seed, k, ())
    if not np.array_equal(dated.reservoir.priorities, partial.reservoir.priorities):
        return partial  # never splice a sample of other rows (both are the k smallest of the same names)
    for name in parsed:
        partial.columns[name] = dated.columns[name]
        partial.reservoir.columns[name] = dated.reservoir.columns[name]
    return mark_dates(partial, parsed)


def _may_hold_dates(stats: ColumnStats) -> bool:
    return not stats.is_numeric and stats.text > 0 and (
        stats.overflow or any(ISO_DATE.fullmatch(key.strip()) for key in stats.categories))

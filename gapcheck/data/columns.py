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
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gapcheck.data.sources import SourceKind, SourcePlan

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

"""Columns that name rows rather than measure them: left out of the drift verdict, said so as info.

An identifier's distribution says how the rows were numbered, not what they hold: a ``row_id`` of 0..n-1 in
the reference and n..m in the current split has KS D = 1, a "drift" that is only the split (a new user's first
table). A column is taken for an identifier when its values are unique and, for numbers, integers, and either
its name says so by a whole word (``id``, ``uuid``, ``key``, ``index``, ``row``, ``record``, ``PatientID``,
``ID_code``; ``no``/``num``/``number`` only as the last word: ``order_no``, not ``price_no_tax``) or its numbers
fill a contiguous range (on each side, or both sides together: a sequential numbering split in two). How large the
numbers are never decides (a 64-bit id is an id by these rules; an INT64_MAX sentinel makes nothing one).
Text is an identifier when every value of each side is distinct. Judged on what each side's merged statistics
hold: the exact counts, min/max and categories, and the seeded row sample (≤ 20k rows) for uniqueness and integrality of numbers.
A column the user names with ``--columns`` is always tested.
"""
from __future__ import annotations

import re

import numpy as np

from gapcheck.data.sketches import ColumnStats

# a whole word of the name anywhere in it (``PatientID``, ``ID_code``, ``Unnamed: 0``, ``record``); the values must
# still be unique integers. Words only, never substrings: ``valid`` holds no ``id``
ID_WORDS = frozenset({"id", "ids", "uid", "uuid", "guid", "idx", "index", "key", "pk", "rowid", "row", "record",
                      "unnamed"})
# words that name a numbering only as the name's last word (``order_no``, ``invoice_number``, ``No``): elsewhere they
# are a count or a negation (``num_bytes``, ``price_no_tax``, ``number_of_rooms``: features, attacker D5c)
NUMBERING_WORDS = frozenset({"no", "nr", "num", "number", "seq", "serial"})
MIN_ROWS = 20  # fewer values per side: a real integer feature can be unique by chance
UNIQUE_SHARE = 0.99  # near-unique: at most 1% repeated values in the sample (64-bit ids may collide as float64)


def name_tokens(name: str) -> list[str]:
    """Words of a column name: split at non-letters/digits and camelCase (``PatientID`` → patient, id)."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return [t for t in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if t]


def named_like_id(name: str) -> bool:
    tokens = name_tokens(name)
    return bool(ID_WORDS & set(tokens)) or bool(tokens and tokens[-1] in NUMBERING_WORDS)


#: a name that ends in one of these words (``row_id``, ``PatientID``, ``index``), starts with ``id`` (``ID_code``),
#: or pandas' saved index (``Unnamed: 0``)
ROW_ID_ENDINGS = frozenset({"id", "uid", "uuid", "guid", "idx", "index", "rowid", "pk"})


def named_like_row_id(name: str) -> bool:
    """Stricter than :func:`named_like_id`, for a judgement on the name alone (no values): ``num_rooms`` or
    ``key_length`` are no identifiers."""
    tokens = name_tokens(name)
    return bool(tokens) and (tokens[-1] in ROW_ID_ENDINGS or tokens[0] in ("unnamed", "id", "uuid", "guid"))


def identifier_reason(name: str, ref: ColumnStats, cur: ColumnStats, ref_sample: np.ndarray,
                      cur_sample: np.ndarray) -> str | None:
    """Why ``name`` looks like an identifier (a short phrase for the finding), or None."""
    if ref.is_numeric and cur.is_numeric:
        return _numeric_reason(name, ref, cur, ref_sample, cur_sample)
    if ref.is_numeric or cur.is_numeric or ref.text + cur.text == 0:
        return None
    if ref.overflow or cur.overflow:  # over 1,000 distinct values (never tested): said so when named like an id
        return "over 1,000 distinct values and named like an identifier" if named_like_id(name) else None
    if all(_unique_text(s) for s in (ref, cur)):
        return "every value is distinct on both sides"
    return None


def _unique_text(stats: ColumnStats) -> bool:
    count = stats.rows - stats.nulls
    return count >= MIN_ROWS and len(stats.categories) >= UNIQUE_SHARE * count


def _numeric_reason(name: str, ref: ColumnStats, cur: ColumnStats, ref_sample: np.ndarray,
                    cur_sample: np.ndarray) -> str | None:
    """Unique integers on each side, AND named like an identifier or numbering a contiguous range. Magnitude never
    decides: one INT64_MAX "missing" sentinel per side, or rounded byte counts near 1e16, once made any column a
    "64-bit identifier" and hid a KS D of 1 (attacker D5). A sentinel is one value: it cannot make a column unique,
    and it breaks a contiguous range rather than making one."""
    samples = [s[np.isfinite(s)] for s in (ref_sample, cur_sample)]
    if any(len(s) < MIN_ROWS or not np.array_equal(s, np.round(s)) for s in samples):
        return None
    if any(len(np.unique(s)) < UNIQUE_SHARE * len(s) for s in samples):
        return None
    if named_like_id(name):
        return "unique integers, named like an identifier"
    if all(_contiguous(s.numeric, s.low, s.high) for s in (ref, cur)):
        return "unique integers filling a contiguous range on each side"
    together = _contiguous(ref.numeric + cur.numeric, min(ref.low, cur.low), max(ref.high, cur.high))
    if together and len(np.unique(np.concatenate(samples))) >= UNIQUE_SHARE * sum(len(s) for s in samples):
        return "unique integers numbering both sides from one contiguous range"
    return None


def _contiguous(count: int, low: float, high: float) -> bool:
    """``count`` distinct integers in [low, high] fill it: high − low + 1 == count."""
    return bool(np.isfinite(low) and np.isfinite(high) and count > 0 and high - low + 1 == count)


# words of a column that holds a point in time (``timestamp``, ``event_time``, ``created_at``, ``date``), and words
# of one that holds an amount of time (``time_on_site``, ``duration_s``): an amount that moved is real drift
TIME_WORDS = frozenset({"time", "timestamp", "ts", "date", "datetime", "dt", "epoch", "created", "updated",
                        "modified", "when"})
DURATION_WORDS = frozenset({"duration", "elapsed", "spent", "since", "until", "to", "delta", "span", "length",
                            "sec", "secs", "seconds", "ms", "min", "mins", "minutes", "hours", "hrs", "days", "age",
                            "per", "avg", "mean", "total", "diff"})


def time_order_reason(name: str, ref: ColumnStats, cur: ColumnStats) -> str | None:
    """Why ``name`` is the clock of a time-ordered split (a short phrase for the finding), or None.

    A column named for a point in time (and not for an amount of time) whose every current value comes after every
    reference value: a split by time makes that so whatever the data, so its KS D = 1 says how the split was made,
    not that the data moved. Only this column is set apart (the others are tested as before), and it is said."""
    tokens = set(name_tokens(name))
    if not (tokens & TIME_WORDS) or tokens & DURATION_WORDS or not (ref.is_numeric and cur.is_numeric):
        return None
    if not all(np.isfinite([ref.low, ref.high, cur.low, cur.high])) or cur.low <= ref.high:
        return None
    return (f"every current value ({cur.low:.10g} to {cur.high:.10g}) is after every reference value "
            f"({ref.low:.10g} to {ref.high:.10g})")

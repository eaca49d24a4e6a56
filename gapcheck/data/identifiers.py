"""Columns that name rows rather than measure them: left out of the drift verdict, said so as info.

An identifier's distribution says how the rows were numbered, not what they hold: a ``row_id`` of 0..n-1 in
the reference and n..m in the current split has KS D = 1, a "drift" that is only the split (a new user's first
table). A column is taken for an identifier when its values are unique and, for numbers, integers, and either
its name says so by a whole word (``id``, ``uuid``, ``key``, ``index``, ``row``, ``record``, ``PatientID``,
``ID_code``; ``no``/``num``/``number`` only as the last word: ``order_no``, not ``price_no_tax``) or its numbers
fill a contiguous range (on each side, or both sides together: a sequential numbering split in two). How large the
numbers are never decides (a 64-bit id is an id by these rules; an INT64_MAX sentinel makes nothing one), and a few
typical sentinel codes at a numbering's ends (-1, 999999999, INT32_MAX "unknown") are set aside and said, so they
do not unmake one either.
Text is an identifier when every value of each side is distinct. Judged on what each side's merged statistics
hold: the exact counts, min/max and categories, and the seeded row sample (≤ 20k rows) for uniqueness and integrality of numbers.
A column the user names with ``--columns`` is always tested.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gapcheck.data.sketches import ColumnStats

# a whole word of the name anywhere in it (``PatientID``, ``ID_code``, ``Unnamed: 0``, ``record``); the values must
# still be unique integers. Words only, never substrings: ``valid`` holds no ``id``
ID_WORDS = frozenset({"id", "ids", "uid", "uuid", "guid", "idx", "index", "key", "pk", "rowid", "row", "record",
                      "unnamed"})
# words that name a numbering only as the name's last word (``order_no``, ``invoice_number``, ``No``): elsewhere they
# are a count or a negation (``num_bytes``, ``price_no_tax``, ``number_of_rooms``: features, attacker D5c)
NUMBERING_WORDS = frozenset({"no", "nr", "num", "number", "seq", "serial"})
SIDES = ("reference", "current")
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
    verdict = identifier_verdict(name, ref, cur, ref_sample, cur_sample)
    return verdict.reason if verdict else None


@dataclass(frozen=True)
class Sentinel:
    """A value set aside from an identifier's numbering (``-1`` "unknown", ``999999999``, INT32_MAX): how many rows
    of each side's row sample hold it, and the sides whose exact min or max it is though no sampled row holds it
    (a side larger than its sample)."""

    value: float
    reference: int
    current: int
    unsampled: tuple[str, ...] = ()

    def said(self) -> str:
        extreme = "".join(f"; the {side}'s exact min/max, in no sampled row" for side in self.unsampled)
        return f"{self.value:.10g} (in {self.reference} reference and {self.current} current sampled row(s){extreme})"


@dataclass(frozen=True)
class IdentifierVerdict:
    reason: str
    sentinels: tuple[Sentinel, ...] = ()


def identifier_verdict(name: str, ref: ColumnStats, cur: ColumnStats, ref_sample: np.ndarray,
                       cur_sample: np.ndarray) -> IdentifierVerdict | None:
    """Why ``name`` looks like an identifier and the sentinel values its numbering holds, or None."""
    if ref.is_numeric and cur.is_numeric:
        return _numeric_verdict(name, ref, cur, ref_sample, cur_sample)
    if ref.is_numeric or cur.is_numeric or ref.text + cur.text == 0:
        return None
    if ref.overflow or cur.overflow:  # over 1,000 distinct values (never tested): said so when named like an id
        return IdentifierVerdict("over 1,000 distinct values and named like an identifier") if named_like_id(name) \
            else None
    if all(_unique_text(s) for s in (ref, cur)):
        return IdentifierVerdict("every value is distinct on both sides")
    return None


def _unique_text(stats: ColumnStats) -> bool:
    count = stats.rows - stats.nulls
    return count >= MIN_ROWS and len(stats.categories) >= UNIQUE_SHARE * count


@dataclass(frozen=True)
class _Numbering:
    """What the rules read of one side: its finite sampled values and the range they would number (``count`` values
    in [low, high]; ``slack``: how far the count may miss ``high - low + 1`` when it is an estimate)."""

    values: np.ndarray
    count: float
    low: float
    high: float
    slack: float = 0.0
    sentinels: dict[float, int] = field(default_factory=dict)  # value: rows of the sample holding it
    unsampled: frozenset[float] = frozenset()  # sentinels seen only as the side's exact min/max


def _numeric_verdict(name: str, ref: ColumnStats, cur: ColumnStats, ref_sample: np.ndarray,
                     cur_sample: np.ndarray) -> IdentifierVerdict | None:
    """Unique integers on each side, AND named like an identifier or numbering a contiguous range. Magnitude never
    decides: one INT64_MAX "missing" sentinel per side, or rounded byte counts near 1e16, once made any column a
    "64-bit identifier" and hid a KS D of 1 (attacker D5). A sentinel is one value: it cannot make a column unique,
    and it breaks a contiguous range rather than making one. So the rules are asked first with a few typical
    sentinels at the column's ends set aside (:func:`_without_sentinels`), then of the column as it is: row ids
    0..N-1 plus one -1 or 999999999 "unknown" are an identifier again, and the sentinels are said (and kept out of
    the moments it shows)."""
    samples = [s[np.isfinite(s)] for s in (ref_sample, cur_sample)]
    if any(len(s) < MIN_ROWS or not np.array_equal(s, np.round(s)) for s in samples):
        return None
    cores = [_without_sentinels(stats, s) for s, stats in zip(samples, (ref, cur), strict=True)]
    reason = _numbering_reason(name, cores) if any(c.sentinels for c in cores) else None
    if not reason:
        sides = [_Numbering(s, stats.numeric, stats.low, stats.high) for s, stats in zip(samples, (ref, cur),
                                                                                          strict=True)]
        reason = _numbering_reason(name, sides)
        return IdentifierVerdict(reason) if reason else None
    values = sorted(set(cores[0].sentinels) | set(cores[1].sentinels))
    sentinels = tuple(Sentinel(v, cores[0].sentinels.get(v, 0), cores[1].sentinels.get(v, 0),
                               tuple(side for side, c in zip(SIDES, cores, strict=True) if v in c.unsampled))
                      for v in values)
    said = ", ".join(s.said() for s in sentinels)
    return IdentifierVerdict(f"{reason}, apart from sentinel value(s) {said}", sentinels)


def _numbering_reason(name: str, sides: list[_Numbering]) -> str | None:
    if any(len(np.unique(s.values)) < UNIQUE_SHARE * len(s.values) for s in sides):
        return None
    if named_like_id(name):
        return "unique integers, named like an identifier"
    if all(_contiguous(s) for s in sides):
        return "unique integers filling a contiguous range on each side"
    together = _Numbering(np.concatenate([s.values for s in sides]), sum(s.count for s in sides),
                          min(s.low for s in sides), max(s.high for s in sides), sum(s.slack for s in sides))
    if _contiguous(together) and len(np.unique(together.values)) >= UNIQUE_SHARE * len(together.values):
        return "unique integers numbering both sides from one contiguous range"
    return None


def _contiguous(side: _Numbering) -> bool:
    """``count`` distinct integers in [low, high] fill it: high − low + 1 == count (within ``slack``)."""
    return bool(np.isfinite(side.low) and np.isfinite(side.high) and side.count > 0
                and abs(side.high - side.low + 1 - side.count) <= side.slack)


MAX_SENTINELS = 3  # distinct sentinel values a side may hold at its ends
SENTINEL_ROWS = 5  # ...in at most this many rows, or SENTINEL_SHARE of the side's values when that is more
SENTINEL_SHARE = 0.01
# a side the row sample does not hold whole: its numbering's count is estimated from the sample, and its range's
# ends are the sample's where the exact min/max was a sentinel; a 20k-row sample misses each end by ~1/20k of the
# range and the count by well under this share
SAMPLED_SLACK = 0.005
# a sample of n of N values misses a range's end by N/n values on average (geometric): an exact min/max this many
# times farther from the sample's is no end of the range it missed (e^-20), but a value set apart
MISSED_END = 20


def sentinel_like(value: float) -> bool:
    """The codes exports write for "unknown": 0, -1, all nines (-99, 999999999), and the largest integers of 8- to
    64-bit types (INT32_MAX, UINT16_MAX, INT64_MAX as float64). Only these are set aside, never any outlier: a real
    feature with an extreme value stays a feature."""
    magnitude = abs(value)
    if value in (0.0, -1.0) or magnitude in _MAX_INTEGERS:
        return True
    return 99 <= magnitude < 1e19 and set(str(int(magnitude))) == {"9"}


_MAX_INTEGERS = frozenset(float(2 ** bits + d) for bits in (7, 8, 15, 16, 31, 32, 63, 64) for d in (-1, 0))


def _without_sentinels(stats: ColumnStats, values: np.ndarray) -> _Numbering:
    """One side's numbering with the typical sentinels at its ends set aside (a sentinel: :func:`sentinel_like`,
    and apart from the rest by a gap or repeated; at most :data:`MAX_SENTINELS` values in a handful of rows), or
    the side as it is (no ``sentinels``) when it holds none or too many."""
    unique, counts = np.unique(values, return_counts=True)
    found = _end_sentinels(unique, counts)
    whole = len(values) == stats.numeric  # the row sample holds every finite value of the side
    if not whole and len(unique):  # a rare sentinel the sample missed is still the side's exact min or max
        reach = MISSED_END * stats.numeric / len(values)  # ...when farther out than a sample's ends fall short
        found.update({float(v): 0 for v in (stats.low, stats.high) if np.isfinite(v) and sentinel_like(v)
                      and min(abs(v - unique[0]), abs(v - unique[-1])) > reach})
    unsampled = frozenset(v for v, rows in found.items() if not rows)
    core = values[~np.isin(values, list(found))]
    as_is = _Numbering(values, stats.numeric, stats.low, stats.high)
    if not found or len(found) > MAX_SENTINELS or len(core) < MIN_ROWS \
            or sum(found.values()) > max(SENTINEL_ROWS, SENTINEL_SHARE * len(values)):
        return as_is
    # a row holding a sentinel would have held a number of the range: the range may miss as many as they are
    holes = sum(found.values())
    if whole:
        return _Numbering(core, len(core), float(core.min()), float(core.max()), holes, found)
    count = stats.numeric * len(core) / len(values)
    low = float(core.min()) if stats.low in found else stats.low
    high = float(core.max()) if stats.high in found else stats.high
    return _Numbering(core, count, low, high, SAMPLED_SLACK * count + holes * stats.numeric / len(values), found,
                      unsampled)


def _end_sentinels(unique: np.ndarray, counts: np.ndarray) -> dict[float, int]:
    """Sentinel-like values at either end of the sorted ``unique`` values, each apart from the next by a gap or
    repeated (the -1 before a 0..N-1 numbering counts only when repeated: once, it continues the range)."""
    found: dict[float, int] = {}
    low, high = 0, len(unique) - 1
    while low < high and len(found) <= MAX_SENTINELS and sentinel_like(unique[low]) \
            and (unique[low + 1] - unique[low] > 1 or counts[low] > 1):
        found[float(unique[low])] = int(counts[low])
        low += 1
    while high > low and len(found) <= MAX_SENTINELS and sentinel_like(unique[high]) \
            and (unique[high] - unique[high - 1] > 1 or counts[high] > 1):
        found[float(unique[high])] = int(counts[high])
        high -= 1
    return found


def without_sentinels(stats: ColumnStats, sample: np.ndarray,
                      sentinels: tuple[Sentinel, ...]) -> tuple[ColumnStats, np.ndarray]:
    """``stats`` and ``sample`` with the sentinel values set aside (NaN in the sample; the moments and range from the
    sample's other values, exact when the sample holds the whole side): an identifier's 999999999 "unknown" no
    longer inflates the reference std its table row shows."""
    sample = np.where(np.isin(sample, [s.value for s in sentinels]), np.nan, sample)
    kept = sample[np.isfinite(sample)]
    if not len(kept):
        return stats, sample
    return dataclasses.replace(stats, numeric=len(kept), total=float(kept.sum()),
                               total_sq=float(np.square(kept).sum()), low=float(kept.min()),
                               high=float(kept.max())), sample


# words of a column that holds a point in time (``timestamp``, ``event_time``, ``created_at``, ``date``), and words
# of one that holds an amount of time (``time_on_site``, ``duration_s``): an amount that moved is real drift
TIME_WORDS = frozenset({"time", "timestamp", "ts", "date", "datetime", "dt", "epoch", "created", "updated",
                        "modified", "when"})
DURATION_WORDS = frozenset({"duration", "elapsed", "spent", "since", "until", "to", "delta", "span", "length",
                            "sec", "secs", "seconds", "ms", "min", "mins", "minutes", "hours", "hrs", "days", "age",
                            "per", "avg", "mean", "total", "diff"})


# a time split is rarely clean: a cut inside one day of a day-resolution date puts that day on both sides, and a
# placeholder (1900-01-01) or a late correction puts a value on the wrong side. Ties at the cut are tolerated, and so
# are up to this share of either side's values on the wrong side of it (said with their count)
OUT_OF_ORDER_SHARE = 0.01
# ...while the value at the cut holds at most this share of the two sides' values together: a random split of a
# column that is mostly one value shares that value too, and is no split by time
TIED_SHARE = 0.1


@dataclass(frozen=True)
class TimeOrder:
    """How a time column orders the split: the cut, and the values (of each side's row sample) tied at it or on the
    wrong side of it (a reference value after it, a current value before it)."""

    reason: str
    cut: float
    tied: tuple[int, int] = (0, 0)
    out_of_order: tuple[int, int] = (0, 0)
    sampled: tuple[int, int] = (0, 0)  # the values each side's counts are of (its finite sampled values)


def time_order(name: str, ref: ColumnStats, cur: ColumnStats, dates: bool = False,
               samples: tuple[np.ndarray, np.ndarray] | None = None) -> TimeOrder | None:
    """How ``name`` is the clock of a time-ordered split, or None.

    A column named for a point in time (and not for an amount of time) whose current values come after the
    reference values: a split by time makes that so whatever the data, so its KS D = 1 says how the split was made,
    not that the data moved. Only this column is set apart (the others are tested as before), and it is said.
    ``dates``: the column was ISO date text (microseconds since the epoch here): a point in time by its values,
    whatever its name (``recorded_at``, ``visit``), and its ranges are said as dates. ``samples``: each side's row
    sample, which tolerates ties at the cut and a few values on the wrong side of it (:func:`_loose_order`)."""
    tokens = set(name_tokens(name))
    named = bool(tokens & TIME_WORDS) and not tokens & DURATION_WORDS
    if not (named or dates) or not (ref.is_numeric and cur.is_numeric):
        return None
    if not all(np.isfinite([ref.low, ref.high, cur.low, cur.high])):
        return None
    shown = _iso if dates else (lambda value: f"{value:.10g}")
    if cur.low > ref.high:
        return TimeOrder(f"every current value ({shown(cur.low)} to {shown(cur.high)}) is after every reference "
                         f"value ({shown(ref.low)} to {shown(ref.high)})", ref.high)
    return _loose_order(samples, shown) if samples is not None else None


def _loose_order(samples: tuple[np.ndarray, np.ndarray], shown: Any) -> TimeOrder | None:
    """A cut with at most :data:`OUT_OF_ORDER_SHARE` of either side's sampled values on its wrong side, values at
    the cut itself tied (at most :data:`TIED_SHARE` of all), and each side holding values strictly on its own side
    of it; None when there is none."""
    a, b = (np.sort(s[np.isfinite(s)]) for s in samples)
    if not len(a) or not len(b):
        return None
    # the cut: the value with the fewest values on its wrong side (reference after it, current before it); ties at
    # it are on neither
    candidates = np.unique(np.concatenate([a, b]))
    wrong = (len(a) - np.searchsorted(a, candidates, side="right")) + np.searchsorted(b, candidates, side="left")
    cut = float(candidates[int(np.argmin(wrong))])
    late = int(np.count_nonzero(a > cut))
    early = int(np.count_nonzero(b < cut))
    if late > OUT_OF_ORDER_SHARE * len(a) or early > OUT_OF_ORDER_SHARE * len(b):
        return None
    tied = (int(np.count_nonzero(a == cut)), int(np.count_nonzero(b == cut)))
    if sum(tied) > TIED_SHARE * (len(a) + len(b)) or not (a[0] < cut < b[-1]):
        return None
    strays = ([f"{tied[0]} reference and {tied[1]} current value(s) tied at the cut ({shown(cut)})"]
              if tied[0] and tied[1] else [])
    strays += [f"{late} reference value(s) after it (the latest {shown(float(a[-1]))})"] if late else []
    strays += [f"{early} current value(s) before it (the earliest {shown(float(b[0]))})"] if early else []
    said = ("; apart from " + ", ".join(strays)) if strays else ""
    first, last = float(b[b >= cut][0]), float(a[a <= cut][-1])  # the ranges in order, strays said apart
    return TimeOrder(f"the current values ({shown(first)} to {shown(float(b[-1]))}) come after the reference values "
                     f"({shown(float(a[0]))} to {shown(last)}){said} (counted in the row samples: {len(a)} reference "
                     f"and {len(b)} current value(s))", cut, tied, (late, early), (len(a), len(b)))


def _iso(micros: float) -> str:
    """Microseconds since 1970-01-01 UTC as ISO text, as short as the value allows (2024-03-01, 2024-03-01T10:00)."""
    when = np.datetime64(int(round(micros)), "us")
    text = str(np.datetime_as_string(when, unit="auto"))
    return text[:10] if text.endswith("T00:00") or text.endswith("T00:00:00") else text

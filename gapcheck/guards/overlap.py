"""assert_no_overlap: no item of one dataset split is also in another, by what the Datasets actually yield.

Each item is reduced to the part that identifies the sample (by default the input: the first element of
a tuple/list, the first value of a dict; ``field=`` or ``key=`` choose otherwise) and hashed with the
canonical tensor fingerprint of :mod:`gapcheck.tensors` (dtype, shape and values), so the hashes are
the ones every other gapcheck command prints. Labels are left out on purpose: the same image with two
labels is still the same sample in both splits. Only exact copies are found here; near-duplicates
(re-encoded, resized) are the data checks' job (``gapcheck leakage``).
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gapcheck.codes.guards import SPLIT_OVERLAP
from gapcheck.errors import UsageError
from gapcheck.findings import Subject
from gapcheck.guards.base import Ledger, Mode, OverlapError


@dataclass(frozen=True)
class OverlapReport:
    first_items: int
    second_items: int
    overlaps: tuple[tuple[int, int], ...]  # (index in first, index in second), up to max_report
    overlap_count: int

    @property
    def ok(self) -> bool:
        return self.overlap_count == 0

    def __bool__(self) -> bool:
        return self.ok


def _identity(item: Any, field: int | str | None) -> Any:
    if field is not None:
        return item[field]
    if isinstance(item, (tuple, list)) and item:
        return item[0]
    if isinstance(item, dict) and item:
        return next(iter(item.values()))
    return item


def item_fingerprint(value: Any) -> str:
    """SHA256 of a sample: the canonical tensor fingerprint for arrays/tensors/images, the bytes for str/bytes."""
    from gapcheck.tensors import fingerprint

    if isinstance(value, (bytes, bytearray, memoryview)):
        return hashlib.sha256(bytes(value)).hexdigest()
    if isinstance(value, str):
        return hashlib.sha256(value.encode("utf-8")).hexdigest()
    return fingerprint(value)  # torch tensors, numpy arrays, PIL images (np.asarray), numbers


def _items(dataset: Any, limit: int | None) -> Iterable[Any]:
    if hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__"):
        count = len(dataset) if limit is None else min(limit, len(dataset))
        return (dataset[i] for i in range(count))
    iterator = iter(dataset)
    return iterator if limit is None else (item for _, item in zip(range(limit), iterator, strict=False))


def assert_no_overlap(first: Any, second: Any, *, field: int | str | None = None,
                      key: Callable[[Any], Any] | None = None, limit: int | None = None, max_report: int = 20,
                      names: tuple[str, str] = ("train", "val"), mode: Mode | str = Mode.RAISE) -> OverlapReport:
    """Hash every item of ``first`` and ``second``; raise :class:`OverlapError` (or warn) when any is in both.

    ``key(item)`` picks what identifies an item (default: see the module docstring); ``limit`` caps the items
    read from each dataset.
    """
    if limit is not None and limit < 1:
        raise UsageError(f"limit must be >= 1, got {limit}")
    pick = key or (lambda item: _identity(item, field))
    seen: dict[str, int] = {}
    first_count = 0
    for index, item in enumerate(_items(first, limit)):
        seen.setdefault(item_fingerprint(pick(item)), index)
        first_count += 1
    overlaps: list[tuple[int, int]] = []
    count = second_count = 0
    for index, item in enumerate(_items(second, limit)):
        second_count += 1
        match = seen.get(item_fingerprint(pick(item)))
        if match is not None:
            count += 1
            if len(overlaps) < max_report:
                overlaps.append((match, index))
    report = OverlapReport(first_items=first_count, second_items=second_count, overlaps=tuple(overlaps),
                           overlap_count=count)
    if count:
        a, b = names
        shown = ", ".join(f"{a}[{i}]={b}[{j}]" for i, j in overlaps[:5])
        Ledger(Mode.parse(mode), OverlapError).report(SPLIT_OVERLAP.finding(
            f"{count} of {second_count} {b} items are also in {a} ({first_count} items), e.g. {shown}; "
            "deduplicate before splitting, or split by a group key",
            subject=Subject(stage=f"{a}↔{b}"),
            evidence={"overlap_count": count, "first_items": first_count, "second_items": second_count,
                      "pairs": [list(pair) for pair in overlaps]}))
    return report

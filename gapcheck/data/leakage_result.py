"""The leakage report: the contract's head, the pairs, group/label/target tables, and near-duplicate thumbnails."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gapcheck.data.common import SideSummary, TimedRun, bad_items_section
from gapcheck.data.leakage import LeakageOptions
from gapcheck.data.leakage_checks import MAX_PAIRS, Pair, across_pairs, within_pairs
from gapcheck.findings import Finding
from gapcheck.report.contract import Chart, ResultBase, Table


@dataclass(frozen=True)
class LeakageResult(TimedRun, ResultBase):
    splits: tuple[SideSummary, ...]
    options: LeakageOptions
    exact: tuple[Pair, ...]
    near: tuple[Pair, ...]
    findings: tuple[Finding, ...]
    auc: dict[str, dict[str, float | None]] = field(default_factory=dict)
    bad_items: tuple[tuple[str, str], ...] = ()
    decode_path: str = ""
    near_max_bits: int = 0
    thumbnails: tuple[tuple[str, str], ...] = ()  # (caption, base64 PNG) for the HTML; not in the JSON
    engine: str = ""
    shards: int = 0
    run_timings: dict[str, float] = field(default_factory=dict)
    # table rows compared on these: the key columns with --key, else the common ones (None: images, or every column)
    compared_columns: tuple[str, ...] | None = None
    # identifier-like columns among them, left out of a second row comparison (row_without_identifiers pairs)
    set_aside_columns: tuple[str, ...] = ()
    command: str = "leakage"

    @property
    def headline(self) -> str:
        gaps = [f for f in self.findings if f.is_gap]
        if not gaps:
            return f"no leakage across {len(self.splits)} split(s) ({sum(s.used for s in self.splits)} items)"
        codes = sorted({f.code for f in gaps})
        within = len(within_pairs(self.exact + self.near))
        inside = f"; {within} duplicate pair(s) within splits" if within else ""
        return (f"leakage: {len(across_pairs(self.exact))} exact and {len(across_pairs(self.near))} near duplicate "
                f"pair(s) across splits{inside}; codes: {', '.join(codes)}")

    def sections(self) -> dict[str, Any]:
        options = dataclasses.asdict(self.options)
        options["key_columns"] = list(self.options.key_columns) if self.options.key_columns else None
        if isinstance(self.options.within, tuple):  # split names as a JSON list; within pairs: split == other_split
            options["within"] = list(self.options.within)
        return {
            "splits": [dataclasses.asdict(s) for s in self.splits],
            "options": options,
            "near_duplicates": {"hash": "phash", "bits": 64, "max_distance": self.near_max_bits,
                                "decode_path": self.decode_path},
            "pairs": [_pair_json(p) for p in (self.exact + self.near)[:MAX_PAIRS]],
            "pair_counts": {"exact": len(across_pairs(self.exact)), "near": len(across_pairs(self.near))},
            "compared_columns": list(self.compared_columns) if self.compared_columns is not None else None,
            "set_aside_columns": list(self.set_aside_columns),
            "target_auc": self.auc,
            "bad_items": bad_items_section(self.bad_items),
        }

    def views(self) -> Sequence[Table | Chart]:
        views: list[Table | Chart] = []  # findings are drawn by every format itself
        compared = self.compared_columns
        what = "the key column(s)" if self.options.key_columns else f"{len(compared or ())} column(s)"
        note = (f"table rows compared on {what}: {', '.join(compared[:20])}"
                + (f" and {len(compared) - 20} more" if len(compared) > 20 else "")) if compared else ""
        if self.set_aside_columns:
            note += (f"; and again without {', '.join(self.set_aside_columns[:20])} (named like an identifier: a "
                     f"renumbered copy is found)")
        views.append(Table(title="Splits", columns=("split", "kind", "items", "used", "bad", "skipped files"),
                           rows=tuple((s.name, s.kind, s.items, s.used, s.bad, s.skipped_files) for s in self.splits),
                           note=note))
        for title, pairs in (("Duplicate pairs across splits", across_pairs(self.exact + self.near)),
                             ("Duplicate pairs within splits", within_pairs(self.exact + self.near))):
            if pairs:
                views.append(Table(title=title, columns=("match", "item", "other", "pHash d"),
                                   rows=tuple((p.kind, p.item, p.other, p.distance) for p in pairs[:50])))
        if self.thumbnails:
            views.append(Chart(title="Near duplicates side by side", kind="images", images=self.thumbnails,
                               note=f"pHash Hamming distance ≤ {self.near_max_bits} of 64 bits"))
        if self.auc:
            names = sorted({s for v in self.auc.values() for s in v})
            views.append(Table(title="Single-feature AUC per split", columns=("feature", *names),
                               rows=tuple((f, *(_auc(v.get(s)) for s in names)) for f, v in self.auc.items())))
        views.append(Table(title="Run", columns=("engine", "shards", "decode path"),
                           rows=((self.engine, self.shards, self.decode_path),)))
        return views


def _pair_json(pair: Pair) -> dict[str, Any]:
    data = dataclasses.asdict(pair)
    for key in ("label", "other_label"):
        value = data[key]
        data[key] = None if value is None or value != value else (value if isinstance(value, (int, float, str)) else str(value))
    return data


def _auc(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"

"""What leakage and drift share: planning sources into engine shards, bad-input and shard-failure findings,
and the per-side summary both reports carry."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gapcheck.data.remote import shown
from gapcheck.data.sources import SourcePlan
from gapcheck.engines import Shard, ShardFailure
from gapcheck.findings import Finding, Subject

MAX_LISTED_ITEMS = 1_000  # bad items listed in the JSON (the count is always exact)


@dataclass(frozen=True)
class SideSummary:
    name: str
    location: str
    kind: str
    items: int
    used: int
    bad: int
    skipped_files: int


def empty_keyed() -> dict[str, Any]:
    """The engines' empty partial of both jobs: {split or side: partial}."""
    return {}


def merge_keyed(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Merge two {split or side: partial} maps, partials of the same key by their own ``merge`` (in shard order)."""
    merged = dict(a)
    for key, partial in b.items():
        merged[key] = merged[key].merge(partial) if key in merged else partial
    return merged


@dataclass(frozen=True)
class TimedRun:
    """Mixin of the data results: ``timings`` from the run's ``run_timings`` field."""

    @property
    def timings(self) -> dict[str, float]:
        return dict(getattr(self, "run_timings", {}))


def shard_items(payload: dict[str, Any]) -> tuple[str, ...]:
    """Human names of what a payload covers, for a shard that keeps failing."""
    if "urls" in payload:
        return tuple(f"{payload['split']}:{n}" for n in payload["names"])
    if payload.get("kind") == "dataset":
        return (f"{payload['split']}: samples {payload['start']}-{payload['stop'] - 1}",)
    where = payload.get("row_group")
    part = f" row group {where}" if where is not None else (f" rows {payload['start']}-{payload['stop'] - 1}"
                                                          if "start" in payload else "")
    return (f"{payload['split']}:{payload['name']}{part}",)


def make_shards(wrapped: Sequence[tuple[dict[str, Any], dict[str, Any]]]) -> list[Shard]:
    """(job payload, source payload) pairs → engine shards numbered in order."""
    return [Shard(index=i, payload=job, items=shard_items(source)) for i, (job, source) in enumerate(wrapped)]


REMOTE_FAILURE = "RemoteReadError: "  # how a worker's remote read failure reads in an item's reason or a shard's error


def raise_remote_failure(reasons: Sequence[str]) -> None:
    """A remote source that stopped answering in a worker ends the run like one that never answered on the driver:
    one line, exit 3 (an incomplete check is not a finding about the data)."""
    from gapcheck.data.remote import RemoteReadError

    for reason in reasons:
        if REMOTE_FAILURE in reason:
            raise RemoteReadError(reason[reason.index(REMOTE_FAILURE) + len(REMOTE_FAILURE):])


def bad_input_findings(label: str, bad: Sequence[tuple[str, str]]) -> list[Finding]:
    from gapcheck.codes import data as codes

    raise_remote_failure([reason for _, reason in bad])
    if not bad:
        return []
    reasons: dict[str, int] = {}
    for _, reason in bad:
        key = reason.split(":")[0]
        reasons[key] = reasons.get(key, 0) + 1
    summary = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
    return [codes.BAD_INPUT.finding(f"{len(bad)} item(s) of {label} could not be used ({summary})",
                                    subject=Subject(stage=label),
                                    evidence={"count": len(bad), "reasons": reasons,
                                              "items": [_safe(f"{item}: {reason}") for item, reason in bad[:20]]})]


def _safe(text: str) -> str:
    """A text naming a URL (an unreadable remote item, a shard's error) without its credentials."""
    return shown(text) if "://" in text else text


def shown_location(location: str) -> str:
    """A split's location as reports and messages print it: a URL without its credentials, a local path as given."""
    return _safe(location)


def shard_failure_findings(failures: Sequence[ShardFailure]) -> list[Finding]:
    from gapcheck.codes import data as codes

    raise_remote_failure([f.error for f in failures])
    return [codes.SHARD_FAILED.finding(
        f"shard {f.index} failed after {f.attempts} attempt(s): {_safe(f.error)}; {len(f.items)} item(s) not checked",
        subject=Subject(sample=f"shard {f.index}"), evidence={"error": _safe(f.error), "attempts": f.attempts,
                                                               "items": [_safe(i) for i in f.items[:50]]})
        for f in failures]


def listing_bad(plan: SourcePlan) -> list[tuple[str, str]]:
    return [(f"{plan.spec.name}:{b.item}", b.reason) for b in plan.bad]


def bad_items_section(bad: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"item": item, "reason": reason} for item, reason in list(bad)[:MAX_LISTED_ITEMS]]

"""The library entry points: :func:`drift` and :func:`leakage` (the CLI and the pytest plugin call these).

Each plans its sources on the driver (listing only), runs one job on the given engine (or a
local process pool), and turns the merged partial into findings and a result object.
"""
from __future__ import annotations

import time
from typing import Any, Sequence

from gapcheck.data.common import SideSummary, bad_input_findings, listing_bad, make_shards, shard_failure_findings
from gapcheck.data.drift import DriftOptions, compare_sides, drift_findings, drift_task, empty_partial, \
    merge_partials, unusable_columns
from gapcheck.data.drift_result import DriftResult
from gapcheck.data.features import SidePartial
from gapcheck.data.sketches import kll_rank_error
from gapcheck.data.sources import SourcePlan, SourceSpec, parse_split, plan
from gapcheck.engines import Engine, open_engine, run_job
from gapcheck.progress import ProgressReporter

DEFAULT_SHARD_SIZE = 256  # images per shard; tables shard by parquet row group / npy block / file


def as_spec(source: str | SourceSpec, name: str, columns: Sequence[str] | None = None) -> SourceSpec:
    if isinstance(source, SourceSpec):
        return source
    spec = parse_split(f"{name}={source}") if "=" not in str(source).split("://")[0] else parse_split(str(source))
    return SourceSpec(spec.name, spec.location, tuple(columns) if columns else None)


def _with_engine(engine: Engine | None, run: Any) -> Any:
    if engine is not None:
        return run(engine)
    with open_engine("local") as own:
        return run(own)


def summary(plan_: SourcePlan, used: int, bad: int) -> SideSummary:
    return SideSummary(name=plan_.spec.name, location=plan_.spec.location, kind=plan_.kind.value, items=plan_.items,
                       used=used, bad=bad, skipped_files=len(plan_.skipped))


def drift(reference: str | SourceSpec, current: str | SourceSpec, options: DriftOptions | None = None, *,
          engine: Engine | None = None, progress: ProgressReporter | None = None,
          shard_size: int = DEFAULT_SHARD_SIZE) -> DriftResult:
    """Compare ``current`` with ``reference`` (tables: per column; image sets: per image property)."""
    from gapcheck.codes import data as codes
    from gapcheck.errors import UsageError
    from gapcheck.findings import Subject

    options = options or DriftOptions()
    if not 0 < options.p_threshold < 1 or options.min_effect < 0:
        raise UsageError("the p threshold must be in (0, 1) and the minimum effect ≥ 0")
    started = time.perf_counter()
    plans = {"reference": plan(as_spec(reference, "reference", options.columns), shard_size),
             "current": plan(as_spec(current, "current", options.columns), shard_size)}
    if plans["reference"].kind is not plans["current"].kind:
        raise UsageError(f"cannot compare {plans['reference'].kind.value} with {plans['current'].kind.value}")
    wrapped = [({"side": side, "source": payload, "columns": list(options.columns) if options.columns else None,
                 "seed": options.seed, "k": options.sample_size}, payload)
               for side, p in plans.items() for payload in p.payloads]
    planned = time.perf_counter()
    shards = make_shards(wrapped)
    run = _with_engine(engine, lambda e: run_job(e, drift_task, shards, empty=empty_partial, merge=merge_partials,
                                                 progress=progress, description="drift"))
    merged = time.perf_counter()
    sides = {side: run.merged.get(side, SidePartial()) for side in plans}
    findings = shard_failure_findings(run.failures)
    bad: dict[str, list[tuple[str, str]]] = {}
    for side, partial in sides.items():
        bad[side] = listing_bad(plans[side]) + [(f"{side}:{item}", reason) for item, reason in partial.bad]
        findings += bad_input_findings(side, bad[side])
        if partial.rows == 0:
            findings.append(codes.EMPTY_SPLIT.finding(
                f"the {side} side ({plans[side].spec.location}) has no usable items", subject=Subject(stage=side),
                evidence={"listed": plans[side].items, "bad": len(bad[side])}))
    problems = unusable_columns(sides["reference"], sides["current"])
    findings += bad_input_findings("columns", problems)
    features = compare_sides(sides["reference"], sides["current"], options) if all(
        s.rows for s in sides.values()) else []
    findings += drift_findings(features, sides["reference"], sides["current"], options)
    return DriftResult(
        reference=summary(plans["reference"], sides["reference"].rows, len(bad["reference"])),
        current=summary(plans["current"], sides["current"].rows, len(bad["current"])),
        options=options, features=tuple(features), findings=tuple(findings),
        bad_items=tuple(bad["reference"] + bad["current"] + problems), engine=run.engine, shards=run.shards,
        sample_bound=max(s.reservoir.dkw_bound() for s in sides.values()), sketch_rank_error=kll_rank_error(),
        run_timings={"plan_s": planned - started, "job_s": merged - planned, "total_s": time.perf_counter() - started})

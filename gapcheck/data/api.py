"""The library entry points: :func:`drift` and :func:`leakage` (the CLI and the pytest plugin call these).

Each plans its sources on the driver (listing only), runs one job on the given engine (or a
local process pool), and turns the merged partial into findings and a result object.
"""
from __future__ import annotations

import contextlib
import io
import os
import stat
import time
from collections.abc import Iterator, Sequence
from typing import Any

from gapcheck.data.columns import column_plan
from gapcheck.data.common import (
    SideSummary,
    bad_input_findings,
    listing_bad,
    make_shards,
    raise_remote_failure,
    shard_failure_findings,
    shown_location,
)
from gapcheck.data.drift import (
    DriftOptions,
    compare_sides,
    drift_findings,
    drift_task,
    empty_partial,
    merge_partials,
    unusable_columns,
)
from gapcheck.data.drift_result import DriftResult
from gapcheck.data.features import SidePartial
from gapcheck.data.near import ENGINE_SEARCH_PAIRS
from gapcheck.data.sketches import kll_rank_error
from gapcheck.data.sources import SourcePlan, SourceSpec, parse_split, plan, refuse_unreadable
from gapcheck.engines import Engine, run_job
from gapcheck.engines.base import describe_error
from gapcheck.groups import EngineSpec
from gapcheck.progress import ProgressReporter

DEFAULT_SHARD_SIZE = 256  # images per shard; tables shard by parquet row group / npy block / file


def as_spec(source: str | SourceSpec, name: str, columns: Sequence[str] | None = None) -> SourceSpec:
    """A drift side: ``source`` is a location (never ``name=location``: paths like ``date=2024-01-01/`` stay whole)."""
    if isinstance(source, SourceSpec):
        return source
    return SourceSpec(name, str(source), tuple(columns) if columns else None)


@contextlib.contextmanager
def _engine_scope(engine: Engine | None) -> Iterator[Engine]:
    """The caller's engine, or a local process pool opened (and always closed) for this call."""
    if engine is not None:
        yield engine
        return
    with EngineSpec().open() as own:  # the engine group's default (a local process pool)
        yield own


def summary(plan_: SourcePlan, used: int, bad: int) -> SideSummary:
    """The side's counts; a CSV's rows are unknown when planned, so its items are what the workers read."""
    items = plan_.items if plan_.items_known else used + bad - len(plan_.bad)
    return SideSummary(name=plan_.spec.name, location=shown_location(plan_.spec.location), kind=plan_.kind.value,
                       items=items, used=used, bad=bad, skipped_files=len(plan_.skipped))


def refuse_mixed_kinds(plans: Sequence[SourcePlan]) -> None:
    """Images and tables cannot be compared (exit 2): drift has no common feature, and leakage would pass with
    nothing compared (a new user's photo folder against a CSV printed "no leakage", exit 0). Splits with nothing
    listed are left to the empty-split checks."""
    from gapcheck.errors import UsageError

    listed = [p for p in plans if p.payloads]
    kinds = list(dict.fromkeys(p.kind for p in listed))
    if len(kinds) > 1:
        named = "; ".join(f"{p.spec.name}: {p.kind.value}" for p in listed)
        raise UsageError(f"cannot compare {kinds[0].value} with {kinds[1].value} ({named})")


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
    refuse_mixed_kinds(list(plans.values()))
    if not options.columns:  # two tables sharing no column: exit 2 before work (one-sided columns are bad_input)
        column_plan(list(plans.values()), min_shared=0.0)
    wrapped = [({"side": side, "source": payload, "columns": list(options.columns) if options.columns else None,
                 "seed": options.seed, "k": options.sample_size}, payload)
               for side, p in plans.items() for payload in p.payloads]
    planned = time.perf_counter()
    shards = make_shards(wrapped)
    with _engine_scope(engine) as opened:
        run = run_job(opened, drift_task, shards, empty=empty_partial, merge=merge_partials, progress=progress,
                      description="drift")
    merged = time.perf_counter()
    sides = {side: run.merged.get(side, SidePartial()) for side in plans}
    findings = shard_failure_findings(run.failures)
    bad = {side: listing_bad(plans[side]) + [(f"{side}:{item}", reason) for item, reason in partial.bad]
           for side, partial in sides.items()}
    raise_remote_failure([reason for items in bad.values() for _, reason in items])  # exit 3 before exit 2
    for side, partial in sides.items():
        findings += bad_input_findings(side, bad[side])
        if partial.rows == 0:
            if bad[side]:
                refuse_unreadable(plans[side].spec, bad[side])
            findings.append(codes.EMPTY_SPLIT.finding(
                f"the {side} side ({shown_location(plans[side].spec.location)}) has no usable items",
                subject=Subject(stage=side),
                evidence={"listed": plans[side].items, "bad": len(bad[side])}))
    problems = unusable_columns(sides["reference"], sides["current"], options.columns)
    findings += bad_input_findings("columns", problems)
    features = compare_sides(sides["reference"], sides["current"], options) if all(
        s.rows for s in sides.values()) else []
    findings += drift_findings(features, sides["reference"], sides["current"], options,
                               images=plans["reference"].kind.value == "images")
    return DriftResult(
        reference=summary(plans["reference"], sides["reference"].rows, len(bad["reference"])),
        current=summary(plans["current"], sides["current"].rows, len(bad["current"])),
        options=options, features=tuple(features), findings=tuple(findings),
        bad_items=tuple(bad["reference"] + bad["current"] + problems), engine=run.engine, shards=run.shards,
        sample_bound=max(s.reservoir.dkw_bound() for s in sides.values()), sketch_rank_error=kll_rank_error(),
        run_timings={"plan_s": planned - started, "job_s": merged - planned, "total_s": time.perf_counter() - started})


def _labels_bytes(path: str) -> bytes:
    """The labels file's bytes, when it is a regular file within :data:`gapcheck.limits.MAX_FILE_BYTES`.

    Opened non-blocking and checked on the open descriptor: a FIFO would block ``open`` until a writer came (and a
    check by name could be raced), and a link to ``/dev/zero`` would be read forever."""
    from gapcheck.errors import InputError
    from gapcheck.limits import MAX_FILE_BYTES

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise InputError(f"cannot read the labels file {path}: {exc.strerror or type(exc).__name__}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FILE_BYTES:
        os.close(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"the labels file {path} is not a regular file (a FIFO, device or folder)")
        raise InputError(f"the labels file {path} is {info.st_size} bytes, over the {MAX_FILE_BYTES} byte limit")
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_FILE_BYTES + 1)  # bounded even if the file grows after the check
    if len(data) > MAX_FILE_BYTES:
        raise InputError(f"the labels file {path} grew past the {MAX_FILE_BYTES} byte limit while being read")
    return data


def _labels_file(path: str) -> dict[str, tuple[Any, Any]]:
    """labels.csv (columns ``path,label[,group]``) → {path: (label, group)}; paths match relative names or file names."""
    import pandas as pd

    from gapcheck.errors import InputError

    data = _labels_bytes(path)
    try:
        table = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False, na_values=[""])
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the labels file {path}: {describe_error(exc)}") from None
    if "path" not in table.columns or "label" not in table.columns:
        raise InputError(f"{path}: the labels file needs the columns path,label (optionally group)")
    groups = table["group"] if "group" in table.columns else [None] * len(table)
    return {str(p): (None if pd.isna(lab) else lab, None if g is None or pd.isna(g) else g)
            for p, lab, g in zip(table["path"], table["label"], groups, strict=True)}


def _lookup(names: list[str], split: str, table: dict[str, tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    out = []
    for name in names:
        for key in (f"{split}/{name}", name, name.rsplit("/", 1)[-1]):
            if key in table:
                out.append(table[key])
                break
        else:
            out.append((None, None))
    return out


def leakage(splits: Sequence[str | SourceSpec], options: Any = None, *, labels_file: str | None = None,
            engine: Engine | None = None, progress: ProgressReporter | None = None,
            shard_size: int = DEFAULT_SHARD_SIZE, thumbnails: int = 6,
            search_threshold: int = ENGINE_SEARCH_PAIRS) -> Any:
    """Check ``splits`` (two or more) for exact/near duplicates, group overlap, label problems and target leakage.

    The near-duplicate search runs on the driver, or as a second job on the engine once it compares more than
    ``search_threshold`` hash pairs (the same pairs either way)."""
    from gapcheck.data import leakage as job
    from gapcheck.data.columns import columns_finding, identifier_columns, identifier_finding
    from gapcheck.data.leakage_checks import (
        exact_pairs,
        group_findings,
        label_findings,
        near_pairs,
        pair_findings,
        repeat_findings,
        target_leakage,
    )
    from gapcheck.data.leakage_result import LeakageResult
    from gapcheck.data.near import engine_search, max_distance

    options = options or job.LeakageOptions()
    specs = _split_specs(splits, options)
    table = _labels_file(labels_file) if labels_file else None  # checked before any split is listed
    started = time.perf_counter()
    plans = [plan(spec, shard_size) for spec in specs]
    refuse_mixed_kinds(plans)
    columns = column_plan(plans, (options.label_column, options.group_column), bool(options.key_columns))
    set_aside = identifier_columns(columns, bool(options.key_columns))
    shards = make_shards(_leakage_payloads(plans, options, table, columns.compared, set_aside))
    planned = time.perf_counter()
    with _engine_scope(engine) as opened:
        run = run_job(opened, job.leakage_task, shards, empty=job.empty_partial, merge=job.merge_partials,
                      progress=progress, description="leakage")
        merged_at = time.perf_counter()
        records = {p.spec.name: run.merged.get(p.spec.name, job.SplitRecords(kind=p.kind.value)) for p in plans}
        exact = exact_pairs(records)
        near = near_pairs(records, options, exact, search=engine_search(opened, search_threshold))
    findings = shard_failure_findings(run.failures)
    summaries, bad_all, per_split = _split_checks(plans, records)
    files = _item_files(plans, records)
    keyed = bool(options.key_columns)
    # with --key the user chose the columns: rows are matched on those (a whole-row match is a key match too), so
    # neither the common columns nor a column only some splits hold are what was compared
    findings += per_split + ([] if keyed else columns_finding(columns)) + identifier_finding(set_aside)
    findings += pair_findings(exact, near, files, set_aside) + repeat_findings(records, exact) + group_findings(records)
    findings += label_findings(records, exact + near, files)
    target, auc = target_leakage(records)
    decoders = sorted(set().union(*(r.decode_paths for r in records.values())))
    return LeakageResult(
        splits=tuple(summaries), options=options, exact=tuple(exact), near=tuple(near),
        findings=tuple(findings + target), auc=auc, bad_items=tuple(bad_all),
        decode_path=" | ".join(decoders) if decoders else "", near_max_bits=max_distance(options.near),
        thumbnails=_thumbnails(records, near, thumbnails), engine=run.engine, shards=run.shards,
        compared_columns=tuple(options.key_columns) if keyed and _tables(plans) else columns.compared,
        set_aside_columns=set_aside,
        run_timings={"plan_s": planned - started, "job_s": merged_at - planned,
                     "checks_s": time.perf_counter() - merged_at, "total_s": time.perf_counter() - started})


def _split_specs(splits: Sequence[str | SourceSpec], options: Any) -> list[SourceSpec]:
    """The splits as specs: two or more, distinct names, and every split ``--within-split`` names among them."""
    from gapcheck.errors import UsageError

    specs = [s if isinstance(s, SourceSpec) else parse_split(s) for s in splits]
    if len(specs) < 2 or len({s.name for s in specs}) != len(specs):
        raise UsageError("leakage needs at least two splits with distinct names")
    unknown = sorted(set(options.within) - {s.name for s in specs}) if isinstance(options.within, (tuple, list)) else []
    if unknown:  # a typo must not turn the search off silently
        raise UsageError(f"--within-split names no split: {', '.join(unknown)} "
                         f"(splits: {', '.join(s.name for s in specs)})")
    return specs


def _tables(plans: Sequence[SourcePlan]) -> bool:
    return any(p.kind.value == "table" for p in plans)


def _item_files(plans: Sequence[SourcePlan], records: dict[str, Any]) -> Any:
    """Where the items are (a finding's path; SARIF's artifact): per table split, each file's item-name prefix →
    the file; per image, its item name → its file (a Dataset's samples have none and keep their names)."""
    from gapcheck.data.leakage_checks import Files
    from gapcheck.data.lines import shown_path

    tables = {p.spec.name: {payload["name"]: shown_path(payload["url"]) for payload in p.payloads if "url" in payload}
              for p in plans if p.kind.value == "table"}
    images = {name: shown_path(url) for r in records.values() if r.kind == "images"
              for name, url in zip(r.names, r.urls, strict=True) if url}
    return Files(tables=tables, images=images)


def _leakage_payloads(plans: Sequence[SourcePlan], options: Any, table: dict[str, tuple[Any, Any]] | None,
                      compared: tuple[str, ...] | None = None,
                      set_aside: tuple[str, ...] = ()) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(job payload, source payload) per planned shard, with the labels file's labels and groups for image shards;
    ``compared``: the columns table rows are hashed on (None: all); ``set_aside``: identifier-like ones among them,
    left out of a second row hash."""
    import dataclasses

    job_options = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(options).items()}
    job_options["compare_columns"] = list(compared) if compared is not None else None
    job_options["feature_columns"] = [c for c in compared if c not in set_aside] if compared and set_aside else None
    wrapped = []
    for p in plans:
        for payload in p.payloads:
            extra: dict[str, Any] = {}
            if table is not None and "names" in payload:
                found = _lookup(payload["names"], p.spec.name, table)
                extra = {"labels": [lab for lab, _ in found], "groups": [g for _, g in found]}
            wrapped.append(({"source": payload, "options": job_options, **extra}, payload))
    return wrapped


def _split_checks(plans: Sequence[SourcePlan], records: dict[str, Any]) -> tuple[list[SideSummary],
                                                                                list[tuple[str, str]], list[Any]]:
    """Per split: its summary, its bad items and their findings (a wholly unreadable split is refused here, exit 2;
    a remote failure in any first, exit 3), images too small to hash, an empty split; then mixed decoders."""
    from gapcheck.codes import data as codes
    from gapcheck.data.leakage import MIN_HASH_SIDE
    from gapcheck.findings import Subject

    findings: list[Any] = []
    bad_all: list[tuple[str, str]] = []
    summaries = []
    raise_remote_failure([reason for r in records.values() for _, reason in r.bad])  # exit 3 before exit 2
    for p in plans:
        rec = records[p.spec.name]
        bad = listing_bad(p) + rec.bad
        if not rec.names and bad:
            refuse_unreadable(p.spec, bad)
        bad_all += bad
        findings += bad_input_findings(p.spec.name, bad)
        small = [name for name, ok in zip(rec.names, rec.hashable.tolist(), strict=True) if not ok] \
            if rec.kind == "images" else []
        if small:
            findings.append(codes.NEAR_UNCHECKED.finding(
                f"split {p.spec.name}: {len(small)} image(s) under {MIN_HASH_SIDE} px on a side compared for exact "
                f"duplicates only (e.g. {', '.join(small[:3])})", subject=Subject(stage=p.spec.name),
                evidence={"count": len(small), "min_side": MIN_HASH_SIDE, "examples": small[:10]}))
        summaries.append(summary(p, len(rec.names), len(bad)))
        if not rec.names:
            findings.append(codes.EMPTY_SPLIT.finding(
                f"split {p.spec.name} ({shown_location(p.spec.location)}) has no usable items",
                subject=Subject(stage=p.spec.name), evidence={"listed": p.items, "bad": len(bad)}))
    decoders = sorted(set().union(*(r.decode_paths for r in records.values())))
    if len(decoders) > 1:
        findings.append(codes.MIXED_DECODERS.finding(f"workers decoded with {len(decoders)} different libraries",
                                                     evidence={"decode_paths": decoders}))
    return summaries, bad_all, findings


def _thumbnails(records: dict[str, Any], near: Sequence[Any], limit: int) -> tuple[tuple[str, str], ...]:
    """Small PNGs of the first near-duplicate pairs, read on the driver (only these few images)."""
    import base64
    import io

    from gapcheck.data.hashing import decode_image, upright
    from gapcheck.data.readers import read_bytes

    urls = {n: u for r in records.values() for n, u in zip(r.names, r.urls, strict=True) if u}
    out: list[tuple[str, str]] = []
    for pair in list(near)[:limit]:
        for name in (pair.item, pair.other):
            if name not in urls:
                continue
            try:
                decoded = decode_image(read_bytes(urls[name]))
                image = upright(decoded, decoded.convert("RGB"))  # shown as it was hashed
            except Exception:  # noqa: BLE001 - a thumbnail is decoration; the finding stands without it
                continue
            image.thumbnail((128, 128))
            buffer = io.BytesIO()
            image.save(buffer, format="PNG")
            out.append((f"{name} (d={pair.distance})", base64.b64encode(buffer.getvalue()).decode("ascii")))
    return tuple(out)

"""``preprocess_audit``: the same raw samples through every stage, joined by sample, with named root causes.

Flow, in named phases: check the settings and stages → discover samples (special files are
listed, never opened) → run all stages per sample in supervised worker processes (screening,
fingerprints, statistics, repeats, pairwise deltas; a stage that kills its worker is recorded
and the rest goes on) → stage-level findings (bad inputs, stage errors, NaN outputs,
nondeterminism) → per stage pair, pass/fail against the tolerance and, for failing pairs with
the reference, the root-cause diagnoses (:mod:`gapcheck.preprocess.diagnoses.catalog`) → KS per
channel → one frozen result.
"""
from __future__ import annotations

import logging
import math
import pickle
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gapcheck.errors import BackendError, GapcheckError, InputError, UsageError
from gapcheck.findings import Finding, Verdict
from gapcheck.preprocess import aggregate
from gapcheck.preprocess.diagnoses.nondeterminism import DeterminismCheck, check_determinism
from gapcheck.preprocess.distribution import DEFAULT_MIN_EFFECT, ks_per_channel
from gapcheck.preprocess.pairs import EVIDENCE_SAMPLES, AuditContext
from gapcheck.preprocess.pool import SupervisedPool, describe_exit
from gapcheck.preprocess.result import PreprocessAuditResult
from gapcheck.preprocess.samples import DEFAULT_MAX_PIXELS, SampleEntry, Screening, discover_samples
from gapcheck.preprocess.stages import StageSpec, check_stages, given_text, make_spec, parse_stage_option
from gapcheck.preprocess.worker import SampleRecord, WorkerOptions, WorkItem, init_worker, run_chunk
from gapcheck.progress import NullProgress, ProgressReporter

if TYPE_CHECKING:
    from gapcheck.engines import Engine

logger = logging.getLogger(__name__)

DEFAULT_TOLERANCE = 1.5 / 255.0  # max |Δ| as a fraction of the reference's value range: 1.5 8-bit levels
PROBE_SAMPLES = 4
KS_POINTS = 256
MIN_CHUNK = 2


def _as_specs(stages: Sequence[StageSpec | str] | dict[str, Any]) -> list[StageSpec]:
    """Accept StageSpecs, "name=target" strings, or {name: callable | target | step list}."""
    if isinstance(stages, dict):
        specs = []
        for name, value in stages.items():
            if isinstance(value, StageSpec):
                specs.append(value)
            elif isinstance(value, str):
                specs.append(make_spec(name, target=value))
            elif isinstance(value, list):
                specs.append(make_spec(name, steps=value))
            else:
                specs.append(make_spec(name, function=value))
        return specs
    return [s if isinstance(s, StageSpec) else parse_stage_option(s) for s in stages]


def check_settings(*, n: int, p_threshold: float, min_effect: float, workers: int, repeats: int, tolerance: float,
                   max_pixels: int) -> None:
    """UsageError for any setting out of range; NaN and infinity are refused everywhere."""
    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

    if not number(tolerance) or tolerance < 0:
        raise UsageError(f"tolerance must be a finite number >= 0 (a fraction of the reference stage's value range), "
                         f"got {tolerance!r}")
    if not number(p_threshold) or not 0 < p_threshold < 1:
        raise UsageError(f"p_threshold must be in (0, 1), got {p_threshold!r}")
    if not number(min_effect) or not 0 <= min_effect <= 1:
        raise UsageError(f"min_effect (a KS statistic) must be in [0, 1], got {min_effect!r}")
    for name, value, low in (("n", n, 1), ("workers", workers, 1), ("repeats", repeats, 0), ("max_pixels", max_pixels, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise UsageError(f"{name} must be an integer >= {low}, got {value!r}")


def chunk_sizes(count: int, workers: int) -> list[int]:
    """Guided scheduling: each chunk takes 1/(2·workers) of what is left, down to MIN_CHUNK.

    Big chunks first keep per-chunk IPC negligible; small chunks at the end let the workers
    finish together (the first chunk also carries the determinism probes and the table's replay).
    """
    sizes, left = [], count
    while left > 0:
        size = min(left, max(MIN_CHUNK, math.ceil(left / (2 * workers))))
        sizes.append(size)
        left -= size
    return sizes


def _chunks(items: list[WorkItem], workers: int) -> list[tuple[WorkItem, ...]]:
    chunks, start = [], 0
    for size in chunk_sizes(len(items), workers):
        chunks.append(tuple(items[start : start + size]))
        start += size
    return chunks


def _runs_in_process(specs: Sequence[StageSpec], workers: int) -> bool:
    """One worker and a callable that cannot be sent to a process: run in this process (unprotected)."""
    if workers > 1:
        return False
    for spec in specs:
        if spec.function is not None:
            try:
                pickle.dumps(spec.function)
            except Exception:  # noqa: BLE001 - any pickling failure means "cannot be sent"
                logger.info("stage %s cannot be sent to a worker process: stages run in this process", spec.name)
                return True
    return False


def _work_items(entries: list[SampleEntry], repeats: int) -> tuple[list[WorkItem], list[SampleRecord]]:
    """Work for the workers, and records for entries that are never opened (special files, loops, bad links)."""
    items: list[WorkItem] = []
    listed: list[SampleRecord] = []
    for index, entry in enumerate(entries):
        if entry.issue is not None:
            listed.append(SampleRecord(index, str(entry.path), "", 0, Screening(entry.issue), entry.issue, (), ()))
            continue
        position = len(items)
        items.append(WorkItem(index, str(entry.path), position < EVIDENCE_SAMPLES,
                              position < PROBE_SAMPLES and repeats > 0, profile=position == 0))
    return items, listed


def audit_shard(payload: tuple[tuple[StageSpec, ...], tuple[WorkItem, ...], WorkerOptions, bool]) -> list[SampleRecord]:
    """The engine task: one chunk of samples through every stage (module-level, so every engine can ship it)."""
    specs, chunk, options, isolated = payload
    if isolated:  # a worker of its own (ray): decoder guards and one thread, as the supervised workers do
        init_worker(options.max_pixels)
    return run_chunk(specs, chunk, options)


def _run(specs: tuple[StageSpec, ...], items: list[WorkItem], options: WorkerOptions, workers: int, in_process: bool,
         progress: ProgressReporter, engine: "Engine | None" = None) -> tuple[list[SampleRecord], list[Any], float, list[Any]]:
    """Records, worker deaths, the CPU seconds the worker processes spent (0 in process), and failed shards.

    The supervised pool runs the stages unless an engine other than ``local`` is given: only the
    supervised pool can name the stage that killed a worker on one sample and go on with the rest of
    its chunk; other engines retry the whole shard and report it when it keeps failing.
    """
    records: list[SampleRecord] = []
    deaths: list[Any] = []
    failures: list[Any] = []
    cpu = 0.0
    if engine is not None and engine.name != "local" and not in_process:
        from gapcheck.engines import Shard, run_job

        shards = [Shard(i, (specs, chunk, options, engine.name != "serial"), tuple(item.path for item in chunk))
                  for i, chunk in enumerate(_chunks(items, workers))]
        run = run_job(engine, audit_shard, shards, empty=list, merge=lambda a, b: a + b, progress=progress,
                      description="auditing samples")
        return run.merged, [], 0.0, list(run.failures)
    progress.start("auditing samples", total=len(items))
    try:
        if in_process:
            for chunk in _chunks(items, 1):
                records += run_chunk(specs, chunk, options)
                progress.advance(len(chunk))
        elif items:
            pool = SupervisedPool(specs, options, workers)
            records = pool.run(_chunks(items, workers), progress.advance)
            deaths, cpu = pool.deaths, pool.cpu_seconds
    finally:
        progress.finish()
    return records, deaths, cpu, failures


def _audited(records: list[SampleRecord], deaths: list[Any], specs: tuple[StageSpec, ...] = ()) -> list[SampleRecord]:
    """The records that went through the stages; InputError / BackendError / UsageError when nothing could be
    audited (no sample has two stage outputs to compare: no headline may claim that samples were audited)."""
    audited = [r for r in records if r.issue is None or not r.issue.skipped]
    if not audited:
        raise InputError(f"none of the {len(records)} sample(s) could be audited",
                         hint="; ".join(f"{r.path}: {r.issue.code}" for r in records[:5] if r.issue))
    if any(sum(1 for o in r.stages if o.ok) >= 2 for r in audited):
        return audited
    if deaths:
        first = min(deaths, key=lambda d: d.sample)  # by sample, not by which finished first (same sample: stage order)
        raise BackendError(f"nothing could be audited: stage workers died on every sample; first: stage "
                           f"{first.stage!r} on {first.sample} ({describe_exit(first.exitcode)})")
    raise _nothing_compared(audited, specs)


def _nothing_compared(audited: list[SampleRecord], specs: tuple[StageSpec, ...]) -> GapcheckError:
    """No sample went through two stages and no worker died: a stage that fails on every sample is a usage error
    (a stage declared wrongly, e.g. a bytes-taking stage given paths), said with the stage's error and its hint.
    Bad inputs (unreadable, corrupt or truncated files) are never audited, so they are not here: ``_audited`` says
    so when no other sample is left. An audited sample's issue is an unusual but valid input (a grayscale, alpha or
    16-bit photo): a folder of grayscale photos was called "all bad inputs", which hid the stage's error and hint."""
    errors = [(o.stage, r.path, o.error) for r in audited for o in r.stages if not o.ok]
    failing = [spec for spec in specs if any(stage == spec.name for stage, _, _ in errors)]
    said = "; ".join(f"stage {spec.name} failed on {sum(1 for s, _, _ in errors if s == spec.name)} of {len(audited)} "
                     f"sample(s), first on {next(p for s, p, _ in errors if s == spec.name)}: "
                     f"{next(e for s, _, e in errors if s == spec.name)}" for spec in failing)
    # what each stage was given, unless its error already says so (the path/bytes and OpenCV hints)
    hints = [given_text(spec) for spec in failing if f"(stage {spec.name} was given" not in said]
    return UsageError(f"nothing could be audited: no sample went through two stages to compare ({said or 'no stage ran'})",
                      hint="; ".join(hints) or None)


def _determinism(specs: tuple[StageSpec, ...], audited: list[SampleRecord]) -> dict[str, DeterminismCheck]:
    checks = {}
    for spec in specs:
        runs = [(r.path, o.summary.sha256, o.repeat_fingerprints) for r in audited for o in r.stages
                if o.stage == spec.name and o.ok and o.summary is not None and o.repeat_fingerprints]
        if runs:
            checks[spec.name] = check_determinism(spec.name, runs)
    return checks


def preprocess_audit(
    samples: str | Path | Iterable[str | Path],
    stages: Sequence[StageSpec | str] | dict[str, Any],
    *,
    n: int = 256,
    p_threshold: float = 0.01,
    min_effect: float = DEFAULT_MIN_EFFECT,
    workers: int = 2,
    repeats: int = 2,
    tolerance: float = DEFAULT_TOLERANCE,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    progress: ProgressReporter | None = None,
    engine: "Engine | None" = None,
) -> PreprocessAuditResult:
    """Audit preprocessing stages on the same raw samples.

    ``stages``: the first stage is the reference (usually training); every other stage is
    diagnosed against it, and deltas/PSNR are reported for every pair. See
    :mod:`gapcheck.preprocess.stages` for what a stage may be. Stages run in worker processes
    (also with ``workers=1``) unless a stage is a callable that cannot be pickled and
    ``workers=1``: then they run in this process, and a stage that kills its process kills the caller.

    ``engine`` (:func:`gapcheck.engines.open_engine`): ``None`` or ``local`` run the supervised worker
    pool; ``serial`` and ``ray`` run chunks of samples as engine shards (a shard that keeps failing is a
    ``shard_failed`` finding naming its samples). Records merge in sample order, so the report is the same
    on every engine (``workers`` still plans the chunks; the engine decides how many run at once).
    """
    started, cpu_started = time.perf_counter(), time.process_time()
    check_settings(n=n, p_threshold=p_threshold, min_effect=min_effect, workers=workers, repeats=repeats,
                   tolerance=tolerance, max_pixels=max_pixels)
    specs = tuple(_as_specs(stages))
    in_process = _runs_in_process(specs, workers)
    check_stages(list(specs), isolated=not in_process)
    items, listed = _work_items(discover_samples(samples, n), repeats)
    seconds = {"discover": time.perf_counter() - started}
    options = WorkerOptions(max_pixels, repeats, KS_POINTS)
    records, deaths, worker_cpu, failures = _run(specs, items, options, max(1, min(workers, len(items))), in_process,
                                                 progress or NullProgress(), engine)
    records = sorted(records + listed, key=lambda r: r.index)
    seconds["stages"] = time.perf_counter() - started - seconds["discover"]
    audited = _audited(records, deaths, specs)
    result = _findings_and_result(specs, records, audited, tolerance, max_pixels, p_threshold, min_effect)
    if failures:
        from gapcheck.data.common import shard_failure_findings

        result["findings"] = tuple(shard_failure_findings(failures)) + result["findings"]
    seconds["analysis"] = time.perf_counter() - started - seconds["discover"] - seconds["stages"]
    cpu = {"parent": time.process_time() - cpu_started, "workers": worker_cpu}
    settings = {"n": n, "p_threshold": p_threshold, "min_effect": min_effect, "workers": workers, "repeats": repeats,
                "tolerance": tolerance, "max_pixels": max_pixels, "reference_stage": specs[0].name,
                "stages": {s.name: s.description for s in specs}, "in_process": in_process}
    return PreprocessAuditResult(**result, settings=settings, seconds=seconds, cpu_seconds=cpu)


def _findings_and_result(specs: tuple[StageSpec, ...], records: list[SampleRecord], audited: list[SampleRecord],
                         tolerance: float, max_pixels: int, p_threshold: float, min_effect: float) -> dict[str, Any]:
    """Every finding and table of the result (all but settings and timings)."""
    context = AuditContext(specs, audited, tolerance, max_pixels)
    determinism = _determinism(specs, audited)
    findings: list[Finding] = []
    findings += aggregate.input_findings(records)
    findings += aggregate.stage_error_findings(audited)
    findings += aggregate.nonfinite_findings(specs, audited)
    findings += aggregate.determinism_findings(specs, determinism)
    pairs, ks_results = [], []
    names = [s.name for s in specs]
    channel_values = aggregate.pooled_channel_values(audited, names)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            pair, pair_findings = context.compare(a, b, diagnose=(i == 0), determinism=determinism)
            pairs.append(pair)
            findings += pair_findings
            if i == 0 and a in channel_values and b in channel_values:
                results = ks_per_channel(a, channel_values[a], b, channel_values[b], p_threshold, min_effect)
                ks_results += results
                findings += aggregate.ks_findings(a, b, results)
    passed = Verdict.of(findings) is Verdict.PASS
    return {
        "findings": tuple(findings),
        "stages": aggregate.stage_rows(specs, audited, determinism, context.profiles_for_table(passed)),
        "pairs": tuple(pairs),
        "ks": tuple(ks_results),
        "samples": aggregate.sample_results(records),
        "bad_samples": aggregate.bad_samples(records),
        "stage_errors": aggregate.stage_errors(audited),
        "worst_samples": aggregate.worst_samples(context, pairs),
        "channel_values": channel_values,
    }

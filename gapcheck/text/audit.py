"""``audit_text``: the same raw strings through every tokenizer stage, hashed, compared token by token.

Flow: check settings → load the stages (the reference is the first) → stream the samples (bad ones are counted
and listed, never fed) in chunks → per chunk, every stage, fingerprints, statistics, pairwise comparison,
diagnoses of the reference's differing samples, the repeated-run probe on the first chunk → merge (bounded) →
findings → one frozen :class:`~gapcheck.text.result.TextAuditResult`.

Engines: without one (the default) chunks run in this process, one after the other, with the stages loaded
once. With :func:`gapcheck.engines.open_engine` (``serial``, ``local``, ``ray``) chunks are engine shards
(:func:`~gapcheck.text.shard.audit_chunk`), run a window at a time so memory stays flat; each worker loads the
stages itself. A stage given as a Python callable that cannot be pickled runs only without an engine.
"""
from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from gapcheck.errors import InputError, UsageError
from gapcheck.findings import Finding
from gapcheck.progress import NullProgress, ProgressReporter
from gapcheck.text import analysis
from gapcheck.text.result import StageError, TextAuditResult
from gapcheck.text.samples import DEFAULT_MAX_CHARS, SampleSource, TextSample, from_strings, iter_samples, parse_source
from gapcheck.text.shard import ChunkOptions, ChunkPartial, audit_chunk, pair_key, run_chunk
from gapcheck.text.stages import LoadedStage, TextStageSpec, load_stage, make_stage, parse_stage

if TYPE_CHECKING:
    from gapcheck.engines import Engine

CHUNK = 512  # strings per chunk (one batch call per stage)
WINDOW = 8  # chunks per engine window (memory: at most WINDOW chunks of strings in flight)
LIST_LIMIT = 1000  # most bad samples, errors, rows, divergences per pair kept for the report
DEFAULT_MAX_SAMPLES = 10_000


def as_specs(stages: Sequence[TextStageSpec | str] | dict[str, Any]) -> list[TextStageSpec]:
    """``{name: "hf:..." | "module:fn" | callable}``, ``["name=target", ...]`` or specs -> checked specs."""
    if isinstance(stages, dict):
        specs = [make_stage(str(name), target) for name, target in stages.items()]
    else:
        specs = [s if isinstance(s, TextStageSpec) else parse_stage(s) for s in stages]
    if len(specs) < 2:
        raise UsageError("the text audit needs at least two stages (the first is the reference)")
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise UsageError(f"stage names must be unique: {', '.join(names)}")
    return specs


#: the integer settings' ranges: an upper bound too, so --repeats 99999999999 is refused, not run for days
SETTING_RANGES = {"repeats": (0, 1000), "probe": (0, 100_000), "max_chars": (1, 100_000_000),
                  "diagnose": (0, 100_000), "chunk_size": (1, 1_000_000)}


def check_settings(**values: Any) -> None:
    """UsageError for a setting out of range (NaN and infinity refused)."""
    for name in ("p_threshold", "min_effect"):
        value = values[name]
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise UsageError(f"{name} must be a finite number, got {value!r}")
    if not 0 < values["p_threshold"] < 1:
        raise UsageError(f"p_threshold must be in (0, 1), got {values['p_threshold']!r}")
    if not 0 <= values["min_effect"] <= 1:
        raise UsageError(f"min_effect (a KS statistic) must be in [0, 1], got {values['min_effect']!r}")
    for name, (low, high) in SETTING_RANGES.items():
        value = values[name]
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise UsageError(f"{name} must be an integer from {low} to {high:,}, got {value!r}")
    n = values["max_samples"]
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        raise UsageError(f"max_samples must be an integer >= 1 or None (all), got {n!r}")


def _sample_stream(samples: Any, max_samples: int | None, max_chars: int) -> Iterator[TextSample]:
    if isinstance(samples, (SampleSource, str)) or hasattr(samples, "__fspath__"):
        yield from iter_samples(parse_source(samples) if not isinstance(samples, SampleSource) else samples,
                                max_samples=max_samples, max_chars=max_chars)
        return
    for count, sample in enumerate(from_strings(samples, max_chars=max_chars)):
        if max_samples is not None and count >= max_samples:
            return
        yield sample


class _Reader:
    """Good samples in chunks; bad ones counted by kind and the first LIST_LIMIT kept."""

    def __init__(self, stream: Iterable[TextSample], chunk: int) -> None:
        self.stream, self.chunk = stream, chunk
        self.bad: list[tuple[str, str]] = []
        self.bad_kinds: Counter = Counter()

    def chunks(self) -> Iterator[tuple[tuple[str, str], ...]]:
        batch: list[tuple[str, str]] = []
        for sample in self.stream:
            if sample.text is None:
                self.bad_kinds[analysis.bad_kind(sample.issue)] += 1
                if len(self.bad) < LIST_LIMIT:
                    self.bad.append((sample.id, sample.issue))
                continue
            batch.append((sample.id, sample.text))
            if len(batch) >= self.chunk:
                yield tuple(batch)
                batch = []
        if batch:
            yield tuple(batch)


def audit_text(
    samples: Any,
    stages: Sequence[TextStageSpec | str] | dict[str, Any],
    *,
    max_samples: int | None = DEFAULT_MAX_SAMPLES,
    max_chars: int = DEFAULT_MAX_CHARS,
    repeats: int = 2,
    probe: int = 16,
    diagnose: int = 32,
    p_threshold: float = 0.01,
    min_effect: float = 0.1,
    chunk_size: int = CHUNK,
    engine: "Engine | None" = None,
    progress: ProgressReporter | None = None,
) -> TextAuditResult:
    """Audit tokenizer stages on the same raw strings.

    ``samples``: a path spec (``texts.jsonl:text``, ``reviews.csv:body``, ``lines.txt``, a folder of ``.txt``),
    a :class:`~gapcheck.text.samples.SampleSource`, or Python strings / ``(id, text)`` pairs / ``{id: text}``.
    ``stages``: the first is the reference; see :mod:`gapcheck.text.stages`. ``repeats`` extra runs of every
    stage on the first ``probe`` strings find nondeterminism; at most ``diagnose`` differing samples per pair
    with the reference are diagnosed (all are counted). ``max_samples=None`` reads every sample.
    """
    started = time.perf_counter()
    check_settings(p_threshold=p_threshold, min_effect=min_effect, repeats=repeats, probe=probe, max_chars=max_chars,
                   diagnose=diagnose, chunk_size=chunk_size, max_samples=max_samples)
    specs = tuple(as_specs(stages))
    loaded = [load_stage(s) for s in specs]  # usage errors (missing files, bad targets) before any work
    seconds = {"load": time.perf_counter() - started}
    reader = _Reader(_sample_stream(samples, max_samples, max_chars), chunk_size)
    reporter = progress or NullProgress()
    reporter.start("tokenizing", total=max_samples)
    try:
        merged, failures = _run(specs, loaded, reader, repeats, probe, diagnose, engine, reporter)
    finally:
        reporter.finish()
    seconds["stages"] = time.perf_counter() - started - seconds["load"]
    if not merged.samples:
        raise InputError(f"no usable text sample ({sum(reader.bad_kinds.values())} bad)",
                         hint="; ".join(f"{s}: {r}" for s, r in reader.bad[:5]) or "the source holds no samples")
    result = _result(specs, loaded, merged, reader, failures, p_threshold, min_effect,
                     dict(max_samples=max_samples, max_chars=max_chars, repeats=repeats, probe=probe,
                          diagnose=diagnose, p_threshold=p_threshold, min_effect=min_effect, chunk_size=chunk_size,
                          engine=engine.name if engine is not None else "in-process"))
    seconds["analysis"] = time.perf_counter() - started - seconds["load"] - seconds["stages"]
    return TextAuditResult(**result, seconds=seconds)


def _run(specs: tuple[TextStageSpec, ...], loaded: list[LoadedStage], reader: _Reader, repeats: int, probe: int,
         diagnose: int, engine: "Engine | None", reporter: ProgressReporter) -> tuple[ChunkPartial, list[Any]]:
    merged, first = ChunkPartial(), True
    failures: list[Any] = []

    def options() -> ChunkOptions:
        left = max(0, diagnose - max((p.differing for p in merged.pairs.values()), default=0))
        rows = max(0, LIST_LIMIT - len(merged.rows))
        return ChunkOptions(repeats=repeats, probe=probe if first else 0, diagnose=left, rows=rows)

    if engine is None:
        for chunk in reader.chunks():
            merged.merge(run_chunk(loaded, chunk, options()), LIST_LIMIT)
            first = False
            reporter.advance(len(chunk))
        return merged, failures
    from gapcheck.engines import Shard, run_job

    window: list[tuple[tuple[str, str], ...]] = []
    for chunk in _with_end(reader.chunks()):
        if chunk is not None:
            window.append(chunk)
        if window and (chunk is None or len(window) >= WINDOW):
            shards = [Shard(i, (specs, c, options() if i == 0 else _later(options())), tuple(s for s, _ in c[:20]))
                      for i, c in enumerate(window)]
            run = run_job(engine, audit_chunk, shards, empty=ChunkPartial,
                          merge=lambda a, b: a.merge(b, LIST_LIMIT))
            merged.merge(run.merged, LIST_LIMIT)
            failures += list(run.failures)
            reporter.advance(sum(len(c) for c in window))
            window, first = [], False
    return merged, failures


def _later(options: ChunkOptions) -> ChunkOptions:
    return ChunkOptions(repeats=options.repeats, probe=0, diagnose=options.diagnose, rows=options.rows)


def _with_end(chunks: Iterator[Any]) -> Iterator[Any]:
    yield from chunks
    yield None


def _result(specs: tuple[TextStageSpec, ...], loaded: list[LoadedStage], merged: ChunkPartial, reader: _Reader,
            failures: list[Any], p_threshold: float, min_effect: float, settings: dict[str, Any]) -> dict[str, Any]:
    from gapcheck.preprocess.diagnoses.nondeterminism import check_determinism

    names = [s.name for s in specs]
    determinism = {name: check_determinism(name, runs) for name, runs in merged.repeats.items() if runs}
    findings: list[Finding] = analysis.bad_input_findings(reader.bad, reader.bad_kinds)
    findings += analysis.error_findings(merged, merged.stats)
    findings += [_nondeterministic(check) for check in determinism.values() if not check.deterministic]
    for cand in names[1:]:
        pair = merged.pairs.get(pair_key(names[0], cand))
        if pair is not None:
            findings += analysis.pair_findings(names[0], cand, pair, merged.divergences)
    findings += analysis.vocabulary_findings(loaded, findings)
    findings += analysis.unknown_rate_findings(loaded, merged.stats, findings, p_threshold)
    has_unk = {s.name: s.info.unk_id is not None for s in loaded}
    ks = analysis.ks_rows(names, merged.stats, p_threshold, min_effect, has_unk)
    findings += analysis.ks_findings(ks)
    if failures:
        from gapcheck.data.common import shard_failure_findings

        findings = list(shard_failure_findings(failures)) + findings
    settings.update(reference_stage=names[0], stages={s.name: s.spec.description for s in loaded},
                    sample_rows=len(merged.rows))
    return {
        "findings": tuple(findings),
        "stages": analysis.stage_rows(loaded, merged.stats, {k: v.deterministic for k, v in determinism.items()}),
        "pairs": analysis.pair_rows(names, merged.pairs, merged.divergences),
        "divergences": tuple(d for d in merged.divergences if d.ref == names[0]),
        "ks": ks,
        "bad_samples": tuple(reader.bad),
        "bad_total": sum(reader.bad_kinds.values()),
        "stage_errors": tuple(StageError(*e) for e in merged.errors),
        "samples": tuple(merged.rows),
        "audited": merged.samples,
        "settings": settings,
        "length_histograms": {name: dict(sorted(merged.stats[name].lengths.items())) for name in names
                              if name in merged.stats},
    }


def _nondeterministic(check: Any) -> Finding:
    from gapcheck.codes.text import NONDETERMINISTIC
    from gapcheck.findings import Subject

    return NONDETERMINISTIC.finding(
        f"{check.stage} gave different ids for the same string on {len(check.differing_samples)} of "
        f"{check.probed_samples} probed string(s) over {check.runs_per_sample} runs: sampling (subword "
        f"regularization, BPE dropout) is on", subject=Subject(stage=check.stage),
        evidence={"differing_samples": list(check.differing_samples)[:10], "probed_samples": check.probed_samples,
                  "runs_per_sample": check.runs_per_sample})

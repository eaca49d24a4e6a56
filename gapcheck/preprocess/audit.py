"""``preprocess_audit``: the same raw samples through every stage, joined by sample, with named root causes.

Flow: discover samples → run all stages per sample in worker processes (screening,
fingerprints, statistics, repeats, pairwise deltas) → per stage pair, decide pass/fail
against the tolerance → for failing pairs, replay hypotheses on a few evidence samples
(:mod:`gapcheck.preprocess.diagnoses`) → KS per channel → one frozen result.
"""
from __future__ import annotations

import logging
import math
import multiprocessing
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from gapcheck.errors import InputError, UsageError
from gapcheck.findings import Finding, Severity, verdict_of
from gapcheck.preprocess import aggregate
from gapcheck.preprocess.diagnoses.explain import Evidence, diagnose_pair
from gapcheck.preprocess.diagnoses.geometry import StageProfile, fit_profile
from gapcheck.preprocess.diagnoses.layout import to_chw
from gapcheck.preprocess.diagnoses.nondeterminism import check_determinism
from gapcheck.preprocess.diagnoses.steps import first_divergent_step
from gapcheck.preprocess.distribution import DEFAULT_MIN_EFFECT, KSResult, ks_per_channel
from gapcheck.preprocess.result import PairResult, PreprocessAuditResult
from gapcheck.preprocess.samples import DEFAULT_MAX_PIXELS, decode_rgb, discover_samples
from gapcheck.preprocess.stages import StageSpec, check_stages, make_spec, parse_stage_option, resolve
from gapcheck.preprocess.worker import SampleRecord, WorkerOptions, WorkItem, init_worker, run_chunk
from gapcheck.progress import NullProgress, ProgressReporter
from gapcheck.tensors import to_numpy

logger = logging.getLogger(__name__)

DEFAULT_TOLERANCE = 1.5 / 255.0  # max |Δ| as a fraction of the reference's value range: 1.5 8-bit levels
EVIDENCE_SAMPLES = 2
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


def _run(specs: tuple[StageSpec, ...], items: list[WorkItem], options: WorkerOptions, workers: int,
         progress: ProgressReporter) -> list[SampleRecord]:
    records: list[SampleRecord] = []
    progress.start("auditing samples", total=len(items))
    try:
        if workers <= 1:
            for chunk in _chunks(items, 1):
                records += run_chunk(specs, chunk, options)
                progress.advance(len(chunk))
        else:
            # forkserver: workers start from a clean process, never from a fork of a parent that holds
            # torch/OpenMP or executor threads (a fork there can deadlock).
            context = multiprocessing.get_context("forkserver")
            with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=init_worker,
                                     initargs=(options.max_pixels,)) as pool:
                futures = {pool.submit(run_chunk, specs, chunk, options): len(chunk) for chunk in _chunks(items, workers)}
                for future in as_completed(futures):
                    records += future.result()
                    progress.advance(futures[future])
    finally:
        progress.finish()
    return sorted(records, key=lambda r: r.index)


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
) -> PreprocessAuditResult:
    """Audit preprocessing stages on the same raw samples.

    ``stages``: the first stage is the reference (usually training); every other stage is
    diagnosed against it, and deltas/PSNR are reported for every pair. See
    :mod:`gapcheck.preprocess.stages` for what a stage may be.
    """
    if not 0 < p_threshold < 1:
        raise UsageError(f"p_threshold must be in (0, 1), got {p_threshold}")
    if not 0 <= min_effect <= 1:
        raise UsageError(f"min_effect (a KS statistic) must be in [0, 1], got {min_effect}")
    if workers < 1 or repeats < 0 or tolerance < 0:
        raise UsageError("workers must be >= 1, repeats >= 0 and tolerance >= 0")
    specs = tuple(_as_specs(stages))
    check_stages(list(specs), workers)
    paths = discover_samples(samples, n)
    items = [WorkItem(i, str(p), i < EVIDENCE_SAMPLES, i < PROBE_SAMPLES and repeats > 0, profile=i == 0)
             for i, p in enumerate(paths)]
    options = WorkerOptions(max_pixels, repeats, KS_POINTS)
    records = _run(specs, items, options, min(workers, len(items)), progress or NullProgress())

    audited = [r for r in records if r.issue is None or not r.issue.skipped]
    if not audited:
        raise InputError(f"none of the {len(records)} sample(s) could be audited",
                         hint="; ".join(f"{r.path}: {r.issue.code}" for r in records[:5] if r.issue))
    context = _Context(specs, audited, tolerance, max_pixels)
    findings: list[Finding] = []
    findings += aggregate.input_findings(records)
    findings += aggregate.stage_error_findings(audited)
    determinism = {}
    for spec in specs:
        runs = [(r.path, o.summary.sha256, o.repeat_fingerprints) for r in audited for o in r.stages
                if o.stage == spec.name and o.ok and o.repeat_fingerprints]
        if runs:
            determinism[spec.name] = check_determinism(spec.name, runs)
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
    verdict = verdict_of(findings)
    rows = aggregate.stage_rows(specs, audited, determinism, context.profiles_for_table(verdict))
    settings = {"n": n, "p_threshold": p_threshold, "min_effect": min_effect, "workers": workers, "repeats": repeats,
                "tolerance": tolerance, "max_pixels": max_pixels, "reference_stage": names[0],
                "stages": {s.name: s.description for s in specs}}
    return PreprocessAuditResult(
        verdict=verdict,
        findings=tuple(findings),
        stages=rows,
        pairs=tuple(pairs),
        ks=tuple(ks_results),
        samples=aggregate.sample_results(records),
        bad_samples=aggregate.bad_samples(records),
        stage_errors=aggregate.stage_errors(audited),
        settings=settings,
        worst_samples=context.worst_samples(pairs),
        channel_values=channel_values,
    )


class _Context:
    """Evidence, replay profiles and re-runs for one audit call (nothing outlives it)."""

    def __init__(self, specs: tuple[StageSpec, ...], audited: list[SampleRecord], tolerance: float, max_pixels: int):
        self.specs = {s.name: s for s in specs}
        self.audited = audited
        self.tolerance = tolerance
        self.max_pixels = max_pixels
        self._raw: dict[str, np.ndarray | None] = {}
        self._outputs: dict[tuple[str, str], np.ndarray | None] = {}
        self._profiles: dict[tuple[str, str], StageProfile | None] = {}
        if audited and audited[0].first_stage_profile is not None:  # replayed in a worker, alongside the others
            self._profiles[(specs[0].name, audited[0].path)] = audited[0].first_stage_profile
        self._callables: dict[str, Callable[..., Any]] = {}

    def output(self, stage: str, record: SampleRecord) -> np.ndarray | None:
        key = (stage, record.path)
        if key not in self._outputs:
            kept = next((o.array for o in record.stages if o.stage == stage and o.ok), None)
            if kept is None and any(o.stage == stage and o.ok for o in record.stages):
                kept = self._rerun(stage, record.path)
            self._outputs[key] = kept
        return self._outputs[key]

    def _rerun(self, stage: str, path: str) -> np.ndarray | None:
        spec = self.specs[stage]
        fn = self._callables.setdefault(stage, resolve(spec))
        try:
            data = Path(path).read_bytes()
            return to_numpy(fn(data if spec.accepts == "bytes" else path))
        except Exception as exc:  # noqa: BLE001 - it worked in the worker; a failure now is logged, not fatal
            logger.warning("re-running %s on %s failed: %s", stage, path, exc)
            return None

    def raw(self, path: str) -> np.ndarray | None:
        if path not in self._raw:
            try:
                self._raw[path] = decode_rgb(Path(path).read_bytes(), self.max_pixels)
            except Exception as exc:  # noqa: BLE001 - no replay for this sample, diagnosis falls back
                logger.debug("cannot decode %s for replay: %s", path, exc)
                self._raw[path] = None
        return self._raw[path]

    def profile(self, stage: str, record: SampleRecord) -> StageProfile | None:
        key = (stage, record.path)
        if key not in self._profiles:
            output, raw = self.output(stage, record), self.raw(record.path)
            chw = to_chw(output) if output is not None else None
            self._profiles[key] = fit_profile(raw, chw) if chw is not None and raw is not None else None
        return self._profiles[key]

    def profiles_for_table(self, verdict: str) -> dict[str, StageProfile | None]:
        """Each stage's replayed resize method on the first evidence sample (the reference only when all agree)."""
        first = self.audited[0]
        names = list(self.specs) if verdict != "pass" else list(self.specs)[:1]
        found = {name: self.profile(name, first) for name in names if self.specs[name].recipe is None}
        if verdict == "pass" and found:
            # Every stage matched the reference within tolerance, so they share its replayed method.
            found = {name: next(iter(found.values())) for name in self.specs}
        return found

    def _both_ok(self, a: str, b: str) -> list[SampleRecord]:
        return [r for r in self.audited if sum(1 for o in r.stages if o.stage in (a, b) and o.ok) == 2]

    def compare(self, a: str, b: str, diagnose: bool, determinism: dict) -> tuple[PairResult, list[Finding]]:
        records = self._both_ok(a, b)
        deltas = [(r, d) for r in records for d in r.deltas if d.a == a and d.b == b]
        ref_ranges = {r.path: next(o.summary.max - o.summary.min for o in r.stages if o.stage == a) for r in records}
        dtype_pairs = {(next(o.summary.dtype for o in r.stages if o.stage == a),
                        next(o.summary.dtype for o in r.stages if o.stage == b)) for r in records}
        comparable = [(r, d) for r, d in deltas if d.comparable]
        rel = [d.max_abs / (ref_ranges[r.path] or 1.0) for r, d in comparable]
        within = bool(records) and len(comparable) == len(records) and all(x <= self.tolerance for x in rel) \
            and all(x == y for x, y in dtype_pairs)
        max_abs = max((d.max_abs for _, d in deltas), default=0.0)
        psnrs = [d.psnr_db for _, d in comparable]
        finite = [p for p in psnrs if math.isfinite(p)]
        worst = max(deltas, key=lambda rd: (not rd[1].comparable, rd[1].max_abs), default=(None, None))[0]
        note, findings, divergence = "", [], None
        skip = [s for s in (a, b) if self.specs[s].augmented or (s in determinism and not determinism[s].deterministic)]
        if not records:
            note = "no sample went through both stages"
        elif within:
            note = "within tolerance"
        elif skip:
            note = f"not diagnosed per sample: {', '.join(skip)} is random (augmented or nondeterministic); see KS"
        elif diagnose:
            evidence = [Evidence(r.path, self.raw(r.path), self.output(a, r), self.output(b, r))
                        for r in records[:EVIDENCE_SAMPLES]]
            evidence = [e for e in evidence if e.ref is not None and e.cand is not None]
            ev_records = {e.sample: r for e, r in zip(evidence, records)}

            def profile_of(stage: str, index: int) -> StageProfile | None:
                return self.profile(stage, ev_records[evidence[index].sample])

            findings = diagnose_pair(a, b, evidence, self.tolerance, profile_of, max_abs)
            ra, rb = self.specs[a].recipe, self.specs[b].recipe
            if ra is not None and rb is not None:
                divergence = first_divergent_step(ra, rb, records[0].path, records[0].path)
                if divergence is not None:
                    for f in findings:
                        f.evidence["first_divergent_step"] = f"step {divergence.step_index}: {a} {divergence.ref_step} vs {b} {divergence.cand_step}"
        pair = PairResult(a, b, len(records), len(comparable), max_abs, min(psnrs, default=-math.inf if records else math.inf),
                          float(np.mean(finite)) if finite else (math.inf if psnrs else -math.inf), within,
                          worst.path if worst is not None else "", diagnose and not within and not skip and bool(records),
                          note, divergence)
        return pair, findings

    def worst_samples(self, pairs: list[PairResult], limit: int = 3) -> tuple:
        return aggregate.worst_samples(self, [p for p in pairs if not p.within_tolerance and p.worst_sample][:limit])

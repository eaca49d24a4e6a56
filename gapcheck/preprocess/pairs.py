"""Stage pairs: decide pass/fail against the tolerance, and diagnose the pairs that fail.

:class:`AuditContext` holds what one audit call knows about its samples (records from the
workers, decoded raw images, stage outputs, replayed profiles), loads more only when a
diagnosis asks, and forgets everything when the call returns. Samples on which either stage
produced NaN/inf are left out of the comparison (the stage's ``nonfinite_output`` finding names
them): no tolerance or replay means anything on them.

Diagnoses look only at samples that differ: when 4 of 5 photos are rotated, the fifth is no
evidence of anything. The differing samples are ranked by how much they differ (relative to the
reference's value range; a shape mismatch ranks first), ties by sample order, so the choice never
depends on which worker finished first. The evidence is the worst one, then a typical one (the
median of the rest); more differing samples are loaded only when a diagnosis asks for them.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import numpy as np
from PIL import Image

from gapcheck.codes.preprocess import SHAPE
from gapcheck.findings import Finding, Severity, Subject
from gapcheck.preprocess.diagnoses.base import Evidence, Pair, Population
from gapcheck.preprocess.diagnoses.catalog import diagnose_pair, locate_step
from gapcheck.preprocess.diagnoses.nondeterminism import DeterminismCheck
from gapcheck.preprocess.layout import LayoutInfo, lone_channel_apart, to_chw
from gapcheck.preprocess.replay import StageProfile, fit_profile
from gapcheck.preprocess.result import PairResult
from gapcheck.preprocess.rows import pair_label
from gapcheck.preprocess.samples import decode_rgb, local_path, read_regular_file
from gapcheck.preprocess.sources import EXIF, GRAY_RGB, ORIENTATIONS, sources
from gapcheck.preprocess.stages import StageSpec, resolve
from gapcheck.preprocess.worker import SampleRecord
from gapcheck.tensors import to_numpy

logger = logging.getLogger(__name__)

EVIDENCE_SAMPLES = 2  # samples whose full outputs come back from the workers (the table's replay uses the first)
DIAGNOSED_EVIDENCE = 2  # differing samples every diagnosis sees: the worst and a typical one


class AuditContext:
    """Evidence, replay profiles and re-runs for one audit call (nothing outlives it)."""

    def __init__(self, specs: tuple[StageSpec, ...], audited: list[SampleRecord], tolerance: float, max_pixels: int):
        self.specs = {s.name: s for s in specs}
        self.audited = audited
        self.tolerance = tolerance
        self.max_pixels = max_pixels
        self._raw: dict[str, np.ndarray | None] = {}
        self._bytes: dict[str, bytes | None] = {}
        self.evidence_of: dict[tuple[str, str], tuple[list[SampleRecord], int, int]] = {}  # (a, b) -> chosen, differ, of
        self._outputs: dict[tuple[str, str], np.ndarray | None] = {}
        self._profiles: dict[tuple[str, str], StageProfile | None] = {}
        if audited and audited[0].first_stage_profile is not None:  # replayed in a worker, alongside the others
            self._profiles[(specs[0].name, audited[0].path)] = audited[0].first_stage_profile
        self._callables: dict[str, Callable[..., Any]] = {}

    # --- what is known about a sample ----------------------------------------------------------------
    def output(self, stage: str, record: SampleRecord) -> np.ndarray | None:
        key = (stage, record.path)
        if key not in self._outputs:
            kept = next((o.array for o in record.stages if o.stage == stage and o.ok), None)
            if kept is None and any(o.stage == stage and o.ok for o in record.stages):
                kept = self._rerun(stage, record.path)
            self._outputs[key] = kept
        return self._outputs[key]

    def callable_of(self, stage: str) -> Callable[..., Any]:
        if stage not in self._callables:
            self._callables[stage] = resolve(self.specs[stage])
        return self._callables[stage]

    def _rerun(self, stage: str, path: str) -> np.ndarray | None:
        spec = self.specs[stage]
        fn = self.callable_of(stage)
        try:
            data = read_regular_file(path)
            with local_path(path, data) as local:
                return to_numpy(fn(data if spec.accepts == "bytes" else local))
        except Exception as exc:  # noqa: BLE001 - it worked in the worker; a failure now is logged, not fatal
            logger.warning("re-running %s on %s failed: %s", stage, path, exc)
            return None

    def data(self, path: str) -> bytes | None:
        """The raw sample's bytes, read once (only for samples a diagnosis looks at)."""
        if path not in self._bytes:
            try:
                self._bytes[path] = read_regular_file(path)
            except OSError as exc:
                logger.debug("cannot read %s again for replay: %s", path, exc)
                self._bytes[path] = None
        return self._bytes[path]

    def raw(self, path: str) -> np.ndarray | None:
        if path not in self._raw:
            data = self.data(path)
            try:
                self._raw[path] = decode_rgb(data, self.max_pixels) if data is not None else None
            except Exception as exc:  # noqa: BLE001 - no replay for this sample, diagnosis falls back
                logger.debug("cannot decode %s for replay: %s", path, exc)
                self._raw[path] = None
        return self._raw[path]

    def profile(self, stage: str, ev: Evidence, output: np.ndarray) -> StageProfile | None:
        """``stage``'s replayed profile on the evidence sample (``output`` is that stage's array there)."""
        key = (stage, ev.sample)
        if key not in self._profiles:
            chw = to_chw(output)
            found = fit_profile(ev.raw_rgb, chw) if chw is not None and ev.raw_rgb is not None else None
            if found is None and chw is not None:
                found = self._oriented_profile(ev, chw)
            if found is None and chw is not None and ev.raw_rgb is not None:
                found = self._gray_profile(ev.raw_rgb, ev.data, chw)
            self._profiles[key] = found
        return self._profiles[key]

    def _oriented_profile(self, ev: Evidence, chw: np.ndarray) -> StageProfile | None:
        """The profile on the EXIF-oriented picture, for a stage that applies the file's tag (cv2.imread,
        ImageOps.exif_transpose): its geometry, method and value map can then be compared with the other stage's
        like any others (which stage applies the tag is the orientation finding's)."""
        if ev.orientation not in ORIENTATIONS or ev.data is None or chw.shape[0] not in (1, 3):
            return None
        try:
            oriented = sources(ev.data, chw.shape[0], self.max_pixels).get(EXIF)
        except Exception as exc:  # noqa: BLE001 - not an image PIL reads: no oriented replay
            logger.debug("cannot read %s oriented for replay: %s", ev.sample, exc)
            return None
        found = fit_profile(oriented, chw) if oriented is not None else None
        return replace(found, source=oriented) if found is not None else None

    def _gray_profile(self, raw_rgb: np.ndarray, data: bytes | None, chw: np.ndarray) -> StageProfile | None:
        """A grayscale output (one channel, or one repeated in three) replayed on the file's grayscale readings, PIL's
        convert('L') first, then the others (OpenCV's weights, a JPEG's luma plane): its geometry and resize method can
        then be compared like a colour stage's (which reading each stage makes is the source diagnosis's)."""
        channels = chw.shape[0]
        if channels not in (1, 3) or channels == 3 and not (np.array_equal(chw[0], chw[1]) and np.array_equal(chw[0], chw[2])):
            return None

        def replayed(gray: np.ndarray) -> StageProfile | None:
            source = gray if channels == 1 else np.repeat(gray[..., None], 3, axis=-1)
            found = fit_profile(source, chw)
            return replace(found, source=source) if found is not None else None

        found = replayed(np.asarray(Image.fromarray(raw_rgb).convert("L")))
        if found is not None or data is None:
            return found
        try:
            readings = sources(data, 1, self.max_pixels)
        except Exception as exc:  # noqa: BLE001 - not an image PIL reads: no grayscale replay
            logger.debug("no grayscale readings for replay: %s", exc)
            return None
        for name, gray in readings.items():
            if name not in (GRAY_RGB, EXIF) and gray.shape == raw_rgb.shape[:2]:
                found = replayed(gray)
                if found is not None:
                    return found
        return None

    def stage_profile(self, stage: str, record: SampleRecord) -> StageProfile | None:
        """One stage's replayed profile on one sample (the stage table's resize column)."""
        key = (stage, record.path)
        if key not in self._profiles:
            output, raw = self.output(stage, record), self.raw(record.path)
            chw = to_chw(output) if output is not None else None
            found = fit_profile(raw, chw) if chw is not None and raw is not None else None
            if found is None and chw is not None and raw is not None:
                found = self._gray_profile(raw, self.data(record.path), chw)
            self._profiles[key] = found
        return self._profiles[key]

    def evidence(self, record: SampleRecord, a: str, b: str) -> Evidence | None:
        ref, cand = self.output(a, record), self.output(b, record)
        if ref is None or cand is None:
            return None
        return Evidence(record.path, self.raw(record.path), ref, cand, data=self.data(record.path),
                        orientation=record.screening.orientation)

    # --- pairs ---------------------------------------------------------------------------------------
    def profiles_for_table(self, passed: bool) -> dict[str, StageProfile | None]:
        """Each stage's replayed resize method on the first sample (the reference's only, when all agree)."""
        first = self.audited[0]
        names = list(self.specs)[:1] if passed else list(self.specs)
        found = {name: self.stage_profile(name, first) for name in names if self.specs[name].recipe is None}
        if passed and found:
            # Every stage matched the reference within tolerance, so they share its replayed method.
            found = {name: next(iter(found.values())) for name in self.specs}
        return found

    def _both_ok(self, a: str, b: str) -> list[SampleRecord]:
        return [r for r in self.audited if sum(1 for o in r.stages if o.stage in (a, b) and o.ok) == 2]

    def compare(self, a: str, b: str, diagnose: bool, determinism: dict[str, DeterminismCheck]
                ) -> tuple[PairResult, list[Finding]]:
        both = self._both_ok(a, b)
        records = [r for r in both if not any(o.stats.nonfinite for o in r.stages if o.stage in (a, b) and o.ok)]
        nonfinite = len(both) - len(records)
        deltas = [(r, d) for r in records for d in r.deltas if d.a == a and d.b == b]
        ref_ranges = {r.path: next(o.stats.max - o.stats.min for o in r.stages if o.stage == a) for r in records}
        dtype_pairs = {(next(o.stats.dtype for o in r.stages if o.stage == a),
                        next(o.stats.dtype for o in r.stages if o.stage == b)) for r in records}
        comparable = [(r, d) for r, d in deltas if d.comparable]
        rel = [d.max_abs / (ref_ranges[r.path] or 1.0) for r, d in comparable]
        within = bool(records) and len(comparable) == len(records) and all(x <= self.tolerance for x in rel) \
            and all(x == y for x, y in dtype_pairs)
        max_abs = max((d.max_abs for _, d in deltas), default=0.0)
        psnrs = [d.psnr_db for _, d in comparable]
        finite = [p for p in psnrs if math.isfinite(p)]
        ranked = [] if within else self._differing(a, b, records, ref_ranges)
        if ranked:
            self.evidence_of[(a, b)] = (_worst_and_typical(ranked), len(ranked), len(records))
        worst = ranked[0] if ranked else max(deltas, key=lambda rd: (not rd[1].comparable, rd[1].max_abs),
                                             default=(None, None))[0]
        random = [s for s in (a, b) if self.specs[s].augmented or (s in determinism and not determinism[s].deterministic)]
        note, divergence = _note(records, within, random, nonfinite, len(ranked)), None
        findings: list[Finding] = []
        diagnosed = diagnose and bool(records) and not within and not random
        if diagnosed:
            findings, divergence = self._diagnose(a, b, ranked, len(records), max_abs)
        if diagnose:
            findings += _batch_axis_notes(a, b, records) + _channel_axis_notes(a, b, records)
        if records:
            min_psnr = min(psnrs, default=-math.inf)  # -inf: no sample has outputs of the same shape
            mean_psnr = float(np.mean(finite)) if finite else (math.inf if psnrs else -math.inf)
        else:
            max_abs = min_psnr = mean_psnr = math.nan  # nothing was compared: no number to show
        pair = PairResult(a, b, len(both), len(comparable), max_abs, min_psnr, mean_psnr, within,
                          worst.path if worst is not None else "", diagnosed, note, divergence, nonfinite)
        return pair, findings

    def _differing(self, a: str, b: str, records: list[SampleRecord], ref_ranges: dict[str, float]
                   ) -> list[SampleRecord]:
        """The samples on which ``b`` differs from ``a``: most first (relative max |Δ|; another shape or dtype first)."""
        scored = []
        for record in records:
            delta = next((d for d in record.deltas if d.a == a and d.b == b), None)
            dtypes = {o.stage: o.stats.dtype for o in record.stages if o.stage in (a, b) and o.ok}
            if delta is None:
                continue
            rel = delta.max_abs / (ref_ranges[record.path] or 1.0) if delta.comparable else math.inf
            if rel > self.tolerance or dtypes.get(a) != dtypes.get(b):
                scored.append((-rel if rel == rel else -math.inf, dtypes.get(a) == dtypes.get(b), record.index, record))
        return [record for *_, record in sorted(scored, key=lambda item: item[:3])]

    def _diagnose(self, a: str, b: str, ranked: list[SampleRecord], compared: int, max_abs: float
                  ) -> tuple[list[Finding], Any]:
        chosen = _worst_and_typical(ranked)
        evidence = [e for e in (self.evidence(r, a, b) for r in chosen) if e is not None]
        rest = [r for r in ranked if r not in chosen]

        def more() -> Iterator[Evidence]:
            for record in rest:
                ev = self.evidence(record, a, b)
                if ev is not None:
                    yield ev

        pair = Pair(a, b, evidence, tolerance=self.tolerance, observed_max_abs=max_abs, profile_of=self.profile,
                    more=more, specs=self.specs, callable_of=self.callable_of,
                    population=Population(tuple(r.path for r in ranked), compared,
                                          {r.path: r.screening.orientation for r in ranked}))
        findings, divergence = locate_step(pair, diagnose_pair(pair))
        return [_with_population(f, pair.population) for f in findings], divergence

    def evidence_records(self, pairs: list[PairResult], limit: int = 3
                         ) -> list[tuple[PairResult, list[SampleRecord], int, int]]:
        """Each failing pair's evidence samples (the worst and a typical differing one), how many samples differ
        and of how many (at most ``limit`` pairs)."""
        chosen = []
        for pair in [p for p in pairs if not p.within_tolerance][:limit]:
            if (pair.ref, pair.cand) in self.evidence_of:
                chosen.append((pair, *self.evidence_of[(pair.ref, pair.cand)]))
        return chosen


def _batch_axis_notes(a: str, b: str, records: list[SampleRecord]) -> list[Finding]:
    """An info when one stage adds (or drops) a leading batch axis of size 1 the other has not: serving code batches,
    so the outputs were compared with that axis squeezed (a real shape difference is the shape diagnosis's gap)."""
    for record in records:
        ref, cand = (next(o for o in record.stages if o.stage == s and o.ok) for s in (a, b))
        if ref.layout is None or cand.layout is None or ref.layout.batch_dims == cand.layout.batch_dims:
            continue
        more, fewer = (b, a) if cand.layout.batch_dims > ref.layout.batch_dims else (a, b)
        verb = "adds" if more == b else "drops"
        axes = abs(cand.layout.batch_dims - ref.layout.batch_dims)
        shapes = {a: list(ref.stats.shape), b: list(cand.stats.shape)}
        count = sum(1 for r in records if _batch_dims(r, a) != _batch_dims(r, b))
        message = (f"{b} {verb} {'a leading batch axis' if axes == 1 else f'{axes} leading batch axes'} of size 1 "
                   f"({more}: {shapes[more]}, {fewer}: {shapes[fewer]} on {record.path}); the outputs were compared "
                   f"with it squeezed, on {count} of {len(records)} sample(s). Not a gap: a server batches its input")
        return [SHAPE.finding(message, subject=Subject(stage=pair_label(a, b), sample=record.path),
                              severity=Severity.INFO,
                              evidence={"batch_axis": verb, "ref_shape": shapes[a], "cand_shape": shapes[b],
                                        "samples": count, "compared_samples": len(records)})]
    return []


def _channel_axis_notes(a: str, b: str, records: list[SampleRecord]) -> list[Finding]:
    """An info when one stage's one-channel output keeps its channel axis, (1, H, W) or (H, W, 1), where the other's is
    (H, W): the same grayscale picture, so the outputs were compared with that axis squeezed (values that then differ
    are diagnosed as usual; another channel count or size is the shape diagnosis's gap)."""
    apart = [r for r in records if _lone_channel_apart(r, a, b)]
    if not apart:
        return []
    record = apart[0]
    ref, cand = (next(o for o in record.stages if o.stage == s and o.ok) for s in (a, b))
    ref_info, cand_info = ref.layout, cand.layout
    assert ref_info is not None and cand_info is not None  # _lone_channel_apart read both
    extra, plain, extra_info = (b, a, cand_info) if ref_info.layout == "HW" else (a, b, ref_info)
    where = "leading" if extra_info.layout == "CHW" else "trailing"
    shapes = {a: list(ref.stats.shape), b: list(cand.stats.shape)}
    message = (f"{extra} keeps a channel axis of size 1 that {plain} has not ({extra}: {shapes[extra]} "
               f"{_lone_channel_form(extra_info)}, "
               f"{plain}: {shapes[plain]} (H, W) on {record.path}); the one-channel outputs were compared with it "
               f"squeezed, on {len(apart)} of {len(records)} sample(s). Not a gap by itself: the same grayscale image "
               f"with and without its channel axis")
    return [SHAPE.finding(message, subject=Subject(stage=pair_label(a, b), sample=record.path),
                          severity=Severity.INFO,
                          evidence={"channel_axis": where, "extra_axis_stage": extra, "ref_shape": shapes[a],
                                    "cand_shape": shapes[b], "samples": len(apart), "compared_samples": len(records)})]


def _lone_channel_form(info: LayoutInfo) -> str:
    """The shape of a one-channel image with its channel axis in letters, its batch axes as they are: (1, H, W),
    (H, W, 1), or (1, 1, H, W) for a batch of one (not "(1, H, W)": that would say it has no batch axis)."""
    dims = [str(d) for d in info.shape[: info.batch_dims]] + (["1", "H", "W"] if info.layout == "CHW" else ["H", "W", "1"])
    return f"({', '.join(dims)})"


def _lone_channel_apart(record: SampleRecord, a: str, b: str) -> bool:
    ref, cand = (next((o for o in record.stages if o.stage == s and o.ok), None) for s in (a, b))
    return (ref is not None and cand is not None and ref.layout is not None and cand.layout is not None
            and lone_channel_apart(ref.layout, cand.layout))


def _batch_dims(record: SampleRecord, stage: str) -> int:
    observed = next((o for o in record.stages if o.stage == stage and o.ok), None)
    return observed.layout.batch_dims if observed is not None and observed.layout is not None else 0


def _worst_and_typical(ranked: list[SampleRecord]) -> list[SampleRecord]:
    """The worst differing sample, then the median of the others (a typical one), at most DIAGNOSED_EVIDENCE."""
    if len(ranked) <= DIAGNOSED_EVIDENCE:
        return list(ranked)
    rest = ranked[1:]
    typical = rest[(len(rest) - 1) // 2]
    return [ranked[0], typical]


def _with_population(finding: Finding, population: Population) -> Finding:
    """Every pair finding says on how many samples the stages differ, of how many compared."""
    if not population.differing:
        return finding  # nothing was ranked (no sample has both outputs): the finding says so itself
    said = f" The stages differ on {len(population.differing)} of {population.compared} sample(s)."
    message = finding.message.rstrip()
    message = message + ("" if message.endswith(".") else ".") + said
    evidence = {**finding.evidence, "differing_samples": len(population.differing),
                "compared_samples": population.compared}
    return replace(finding, message=message, evidence=evidence)


def _note(records: list[SampleRecord], within: bool, random: list[str], nonfinite: int, differing: int = 0) -> str:
    skipped = f"; {nonfinite} sample(s) with NaN/inf left out (see nonfinite_output)" if nonfinite else ""
    if differing and not within:
        skipped = f"; differs on {differing} of {len(records)} sample(s)" + skipped
    if not records:
        return ("every sample has NaN/inf in one of the stages (see nonfinite_output)" if nonfinite
                else "no sample went through both stages")
    if within:
        return "within tolerance" + skipped
    if random:
        return f"not diagnosed per sample: {', '.join(random)} is random (augmented or nondeterministic); see KS" + skipped
    return skipped.lstrip("; ")

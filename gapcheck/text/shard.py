"""One chunk of strings through every stage: fingerprints, statistics, pair comparison, diagnoses, repeats.

:func:`audit_chunk` is the engine task (module-level, so every engine can ship it); it returns a
:class:`ChunkPartial` whose :meth:`~ChunkPartial.merge` is associative, and whose size is bounded whatever the
number of samples: counters keyed by length, a set of seen ids (bounded by the vocabulary), and at most
``limit`` rows, divergences and errors. So the audit's memory is flat in the number of samples.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import sys
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gapcheck.report.text import safe_line
from gapcheck.tensors import fingerprint
from gapcheck.text.diagnose import Divergence, diagnose
from gapcheck.text.stages import Encoded, LoadedStage, Row, TextStageSpec, encoded, load_stage

Fingerprint = tuple[str, str, str]  # SHA256 of (ids, attention mask, token type ids)


@dataclass(frozen=True)
class ChunkOptions:
    repeats: int = 2  # extra runs of each stage on the probed samples (the determinism check)
    probe: int = 0  # how many samples of this chunk are probed (only the first chunk probes)
    diagnose: int = 16  # most divergences diagnosed per stage pair in this chunk
    rows: int = 0  # most per-sample rows kept from this chunk


@dataclass
class StageStats:
    """Streaming statistics of one stage; everything merges by addition."""

    samples: int = 0
    errors: int = 0
    lengths: Counter = field(default_factory=Counter)  # attended tokens per sample
    padded: Counter = field(default_factory=Counter)  # ids per sample, padding included
    at_limit: int = 0  # samples whose attended length reaches the stage's truncation length
    tokens: int = 0
    unk: int = 0
    unk_per_sample: Counter = field(default_factory=Counter)
    special: Counter = field(default_factory=Counter)  # special id -> count
    seen: set = field(default_factory=set)  # distinct ids seen (bounded by the vocabulary)

    def merge(self, other: StageStats) -> StageStats:
        self.samples += other.samples
        self.errors += other.errors
        self.lengths.update(other.lengths)
        self.padded.update(other.padded)
        self.at_limit += other.at_limit
        self.tokens += other.tokens
        self.unk += other.unk
        self.unk_per_sample.update(other.unk_per_sample)
        self.special.update(other.special)
        self.seen |= other.seen
        return self


@dataclass
class PairStats:
    compared: int = 0
    differing: int = 0
    by_component: Counter = field(default_factory=Counter)  # "input_ids" / "attention_mask" / "token_type_ids"
    differing_samples: list = field(default_factory=list)  # the first LIST_LIMIT ids

    def merge(self, other: PairStats, limit: int) -> PairStats:
        self.compared += other.compared
        self.differing += other.differing
        self.by_component.update(other.by_component)
        self.differing_samples += other.differing_samples[: max(0, limit - len(self.differing_samples))]
        return self


@dataclass(frozen=True)
class SampleRow:
    """One sample in the report: its string's SHA256 and, per stage, the fingerprints and the length."""

    id: str
    chars: int
    text_sha256: str
    stages: dict[str, dict[str, Any]]


@dataclass
class ChunkPartial:
    stats: dict[str, StageStats] = field(default_factory=dict)
    pairs: dict[str, PairStats] = field(default_factory=dict)  # "a→b" -> stats
    divergences: list = field(default_factory=list)  # Divergence
    errors: list = field(default_factory=list)  # (stage, sample, error)
    rows: list = field(default_factory=list)  # SampleRow
    repeats: dict[str, list] = field(default_factory=dict)  # stage -> [(sample, first fp, repeat fps)]
    samples: int = 0

    def merge(self, other: ChunkPartial, limit: int = 1000) -> ChunkPartial:
        for name, stats in other.stats.items():
            self.stats.setdefault(name, StageStats()).merge(stats)
        for key, pair in other.pairs.items():
            self.pairs.setdefault(key, PairStats()).merge(pair, limit)
        per_pair = Counter(d.ref + "→" + d.cand for d in self.divergences)
        for d in other.divergences:
            key = d.ref + "→" + d.cand
            if per_pair[key] < limit:
                self.divergences.append(d)
                per_pair[key] += 1
        self.errors += other.errors[: max(0, limit - len(self.errors))]
        self.rows += other.rows[: max(0, limit - len(self.rows))]
        for name, runs in other.repeats.items():
            self.repeats.setdefault(name, []).extend(runs)
        self.samples += other.samples
        return self


def pair_key(a: str, b: str) -> str:
    return f"{a}→{b}"


_BIG_ENDIAN = sys.byteorder == "big"


@functools.lru_cache(maxsize=4096)
def _constant_fingerprint(length: int, value: int) -> str:
    """The fingerprint of an all-``value`` int64 vector (the usual mask and type ids: one hash per length)."""
    return fingerprint(np.full(length, value, np.int64))


def list_fingerprint(values: list[int]) -> str:
    """:func:`gapcheck.tensors.fingerprint` of ``np.asarray(values, np.int64)``, byte for byte (same header, same
    little-endian int64 bytes; a test holds them equal), without building an array per sample: per sample and
    stage this is the audit's hot path, and a numpy array costs more than the hash."""
    packed = array("q", values)
    if _BIG_ENDIAN:
        packed.byteswap()
    digest = hashlib.sha256(f"<i8|{len(values)}|".encode())
    digest.update(packed)
    return digest.hexdigest()


def row_fingerprints(row: Row) -> Fingerprint:
    """SHA256 of the canonical ids, mask and type ids; a missing mask is all ones and missing type ids all zeros,
    so a stage that returns a bare list equals one that returns the default mask."""
    ids, mask, types = row
    n = len(ids)
    mask_fp = _constant_fingerprint(n, 1) if mask is None or 0 not in mask else list_fingerprint(mask)
    types_fp = _constant_fingerprint(n, 0) if types is None or not any(types) else list_fingerprint(types)
    return list_fingerprint(ids), mask_fp, types_fp


def fingerprints(e: Encoded) -> Fingerprint:
    """:func:`row_fingerprints` of an :class:`Encoded`."""
    return row_fingerprints((e.ids.tolist(), None if e.mask is None else e.mask.tolist(),
                             None if e.types is None else e.types.tolist()))


def audit_chunk(payload: tuple[tuple[TextStageSpec, ...], tuple[tuple[str, str], ...], ChunkOptions]) -> ChunkPartial:
    """The engine task: every stage on every string of the chunk (stages load once per process)."""
    specs, samples, options = payload
    return run_chunk([load_stage(s) for s in specs], samples, options)


def run_chunk(stages: Sequence[LoadedStage], samples: Sequence[tuple[str, str]], options: ChunkOptions) -> ChunkPartial:
    partial = ChunkPartial(samples=len(samples))
    texts = [t for _, t in samples]
    outputs: dict[str, list[Row | BaseException]] = {}
    prints: dict[str, list[Fingerprint | None]] = {}
    for stage in stages:
        outputs[stage.name] = stage.encode_rows(texts)
        prints[stage.name], partial.stats[stage.name] = _stage_pass(stage, samples, outputs[stage.name], partial)
    _compare_pairs(stages, samples, outputs, prints, partial, options)
    if options.rows:
        partial.rows = _rows(stages, samples[: options.rows], outputs, prints)
    if options.probe and options.repeats:
        partial.repeats = _probe(stages, samples, prints, options)
    return partial


def _stage_pass(stage: LoadedStage, samples: Sequence[tuple[str, str]], outs: list[Row | BaseException],
                partial: ChunkPartial) -> tuple[list[Fingerprint | None], StageStats]:
    """Fingerprints of every output, this chunk's statistics of the stage, and its errors."""
    stats = StageStats()
    prints: list[Fingerprint | None] = []
    good: list[Row] = []
    for (sample, _), out in zip(samples, outs, strict=True):
        if isinstance(out, BaseException):
            prints.append(None)
            stats.errors += 1
            partial.errors.append((stage.name, sample, safe_line(f"{type(out).__name__}: {out}")[:300]))
        else:
            prints.append(row_fingerprints(out))
            good.append(out)
    _statistics(stage, good, stats)
    return prints, stats


def _attended(row: Row) -> list[int]:
    ids, mask, _ = row
    if mask is None or 0 not in mask:
        return ids
    return [i for i, m in zip(ids, mask, strict=True) if m]


def _statistics(stage: LoadedStage, good: list[Row], stats: StageStats) -> None:
    """Vectorized over the chunk: one concatenation, then lengths, unknown and special tokens, coverage."""
    stats.samples = len(good)
    if not good:
        return
    content = [_attended(r) for r in good]
    lengths = np.fromiter(map(len, content), np.int64, len(content))
    _count(stats.lengths, lengths)
    _count(stats.padded, np.fromiter((len(r[0]) for r in good), np.int64, len(good)))
    limit = stage.info.max_length
    stats.at_limit = int(np.count_nonzero(lengths >= limit)) if limit else 0
    ids = np.fromiter(itertools.chain.from_iterable(content), np.int64, int(lengths.sum()))
    stats.tokens = int(ids.size)
    small = bool(ids.size) and int(ids.min()) >= 0 and int(ids.max()) < (1 << 22)  # token ids: bincount, not sort
    per_id = np.bincount(ids) if small else None
    if stage.info.unk_id is not None and ids.size:
        is_unk = ids == stage.info.unk_id
        owner = np.repeat(np.arange(len(good)), lengths)  # the sample each token belongs to
        per_sample = np.bincount(owner[is_unk], minlength=len(good))
        stats.unk = int(np.count_nonzero(is_unk))
        _count(stats.unk_per_sample, per_sample)
    if stage.info.special_ids and ids.size:
        if per_id is not None:
            stats.special.update({i: int(per_id[i]) for i in stage.info.special_ids if i < len(per_id) and per_id[i]})
        else:
            stats.special.update(ids[np.isin(ids, stage.info.special_ids)].tolist())
    stats.seen = set((np.flatnonzero(per_id) if per_id is not None else np.unique(ids)).tolist())


def _count(counter: Counter, values: np.ndarray) -> None:
    """``counter.update(values)`` through numpy (small non-negative integers: one bincount, not a loop)."""
    if not values.size:
        return
    if int(values.min()) >= 0 and int(values.max()) < (1 << 22):
        counts = np.bincount(values)
        present = np.flatnonzero(counts)
        counter.update(dict(zip(present.tolist(), counts[present].tolist(), strict=True)))
    else:
        counter.update(values.tolist())


def _compare_pairs(stages: Sequence[LoadedStage], samples: Sequence[tuple[str, str]],
                   outputs: dict[str, list[Row | BaseException]], prints: dict[str, list[Fingerprint | None]],
                   partial: ChunkPartial, options: ChunkOptions) -> None:
    components = ("input_ids", "attention_mask", "token_type_ids")
    for i, a in enumerate(stages):
        for b in stages[i + 1:]:
            pair, budget = PairStats(), options.diagnose if i == 0 else 0  # the reference's pairs are diagnosed
            for index, (pa, pb) in enumerate(zip(prints[a.name], prints[b.name], strict=True)):
                if pa is None or pb is None:
                    continue
                pair.compared += 1
                if pa == pb:
                    continue
                pair.differing += 1
                pair.by_component.update(c for c, x, y in zip(components, pa, pb, strict=True) if x != y)
                sample, text = samples[index]
                if len(pair.differing_samples) < 1000:
                    pair.differing_samples.append(sample)
                if budget > 0:
                    budget -= 1
                    ra, rb = outputs[a.name][index], outputs[b.name][index]
                    assert not isinstance(ra, BaseException) and not isinstance(rb, BaseException)
                    partial.divergences.append(_diagnosed(sample, text, a, b, encoded(ra), encoded(rb)))
            partial.pairs[pair_key(a.name, b.name)] = pair


def _diagnosed(sample: str, text: str, a: LoadedStage, b: LoadedStage, ea: Encoded, eb: Encoded) -> Divergence:
    try:
        return diagnose(sample, text, a, b, ea, eb)
    except Exception as exc:  # noqa: BLE001 - a diagnosis that fails must not lose the divergence
        from gapcheck.codes.text import UNEXPLAINED

        return Divergence(a.name, b.name, sample, "input_ids", 0, ea.length, eb.length, (), (), 0, None, "",
                          UNEXPLAINED.code, f"the diagnosis failed ({type(exc).__name__})", {})


def _rows(stages: Sequence[LoadedStage], samples: Sequence[tuple[str, str]],
          outputs: dict[str, list[Row | BaseException]], prints: dict[str, list[Fingerprint | None]]) -> list:
    rows = []
    for index, (sample, text) in enumerate(samples):
        per_stage: dict[str, dict[str, Any]] = {}
        for stage in stages:
            out, fp = outputs[stage.name][index], prints[stage.name][index]
            if not isinstance(out, BaseException) and fp is not None:
                per_stage[stage.name] = {"ok": True, "sha256": fp[0], "mask_sha256": fp[1], "types_sha256": fp[2],
                                         "length": len(out[0]), "attended": len(_attended(out))}
            else:
                per_stage[stage.name] = {"ok": False, "error": safe_line(str(out))[:200]}
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        rows.append(SampleRow(sample, len(text), digest, per_stage))
    return rows


def _probe(stages: Sequence[LoadedStage], samples: Sequence[tuple[str, str]],
           prints: dict[str, list[Fingerprint | None]], options: ChunkOptions) -> dict[str, list]:
    """Each stage again, ``repeats`` times, on the first ``probe`` samples: (sample, first fp, repeat fps)."""
    runs: dict[str, list] = {}
    for stage in stages:
        for index, (sample, text) in enumerate(samples[: options.probe]):
            first = prints[stage.name][index]
            if first is None:
                continue
            again = []
            for _ in range(options.repeats):
                out = stage.encode_one(text)
                again.append("|".join(fingerprints(out)) if isinstance(out, Encoded) else "error")
            runs.setdefault(stage.name, []).append((sample, "|".join(first), tuple(again)))
    return runs

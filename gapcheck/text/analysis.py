"""From the merged partial to findings and the rows of the report (per-stage statistics, pairs, KS).

Drift between stages follows the data commands' rule: a KS test on a per-sample statistic is flagged only when
its p-value is under the threshold *and* its effect (KS D) reaches the minimum, so a large sample does not flag
noise. The KS statistic is computed exactly from the length counters (lengths are integers: the counters are the
empirical distributions), with the asymptotic p-value scipy's ``ks_2samp`` uses.
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gapcheck.codes import text as codes
from gapcheck.findings import Finding, Severity, Subject
from gapcheck.text.diagnose import Divergence
from gapcheck.text.shard import ChunkPartial, PairStats, StageStats, pair_key
from gapcheck.text.stages import LoadedStage, same_files

EXAMPLES = 5


@dataclass(frozen=True)
class StageRow:
    """One stage's statistics over every sample it tokenized."""

    stage: str
    description: str
    backend: str
    samples: int
    errors: int
    tokens: int
    mean_length: float
    p50_length: int
    p95_length: int
    max_length_seen: int
    truncation_length: int | None
    at_truncation_length: int
    unk_rate: float
    special_tokens: dict[str, int]
    vocab_size: int
    vocab_coverage: float | None
    distinct_ids: int
    vocab_sha256: str
    deterministic: bool | None


@dataclass(frozen=True)
class PairRow:
    ref: str
    cand: str
    compared: int
    differing: int
    differing_ids: int
    differing_mask: int
    differing_types: int
    diagnosed: int
    causes: dict[str, int]
    differing_samples: tuple[str, ...]


@dataclass(frozen=True)
class KSRow:
    ref: str
    cand: str
    statistic: str  # "length" | "unknown tokens per sample"
    d: float
    p_value: float
    n_ref: int
    n_cand: int
    flagged: bool


def quantile(counter: Counter, q: float) -> int:
    total = sum(counter.values())
    if not total:
        return 0
    target, running = q * total, 0
    for value in sorted(counter):
        running += counter[value]
        if running >= target:
            return int(value)
    return int(max(counter))


def ks_counts(a: Counter, b: Counter) -> tuple[float, float]:
    """(D, asymptotic p) of the two-sample KS test on two integer distributions given as counters."""
    n, m = sum(a.values()), sum(b.values())
    if not n or not m:
        return 0.0, 1.0
    d, ca, cb = 0.0, 0, 0
    for value in sorted(set(a) | set(b)):
        ca += a.get(value, 0)
        cb += b.get(value, 0)
        d = max(d, abs(ca / n - cb / m))
    from scipy.stats import kstwo

    effective = max(1, round(n * m / (n + m)))
    return d, float(min(1.0, max(0.0, kstwo.sf(d, effective))))


def stage_rows(stages: Sequence[LoadedStage], stats: dict[str, StageStats],
               determinism: dict[str, bool]) -> tuple[StageRow, ...]:
    rows = []
    for stage in stages:
        s, info = stats.get(stage.name, StageStats()), stage.info
        total = sum(s.lengths.values())
        names = stage.tokens(sorted(s.special)) if s.special else []
        rows.append(StageRow(
            stage.name, stage.spec.description, info.backend, s.samples, s.errors, s.tokens,
            sum(k * v for k, v in s.lengths.items()) / total if total else 0.0, quantile(s.lengths, 0.5),
            quantile(s.lengths, 0.95), max(s.lengths, default=0), info.max_length, s.at_limit,
            s.unk / s.tokens if s.tokens and info.unk_id is not None else 0.0,
            {name: s.special[i] for name, i in zip(names, sorted(s.special), strict=True)}, info.vocab_size,
            len(s.seen) / info.vocab_size if info.vocab_size else None, len(s.seen), info.vocab_sha256,
            determinism.get(stage.name)))
    return tuple(rows)


def pair_rows(names: Sequence[str], pairs: dict[str, PairStats], divergences: Sequence[Divergence]) -> tuple[PairRow, ...]:
    causes: dict[str, Counter] = defaultdict(Counter)
    for d in divergences:
        causes[pair_key(d.ref, d.cand)].update(d.causes or (d.cause,))
    rows = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            key = pair_key(a, b)
            p = pairs.get(key, PairStats())
            rows.append(PairRow(a, b, p.compared, p.differing, p.by_component["input_ids"],
                                p.by_component["attention_mask"], p.by_component["token_type_ids"],
                                sum(causes[key].values()), dict(causes[key]), tuple(p.differing_samples[:50])))
    return tuple(rows)


def ks_rows(names: Sequence[str], stats: dict[str, StageStats], p_threshold: float, min_effect: float,
            has_unk: dict[str, bool]) -> tuple[KSRow, ...]:
    rows = []
    ref = names[0]
    for cand in names[1:]:
        a, b = stats.get(ref, StageStats()), stats.get(cand, StageStats())
        measures = [("length", a.lengths, b.lengths)]
        if has_unk.get(ref) and has_unk.get(cand):
            measures.append(("unknown tokens per sample", a.unk_per_sample, b.unk_per_sample))
        for label, ca, cb in measures:
            d, p = ks_counts(ca, cb)
            rows.append(KSRow(ref, cand, label, d, p, sum(ca.values()), sum(cb.values()),
                              p < p_threshold and d >= min_effect))
    return tuple(rows)


def pair_findings(ref: str, cand: str, pair: PairStats, divergences: Sequence[Divergence]) -> list[Finding]:
    """One finding per root cause found on the pair's differing samples."""
    if not pair.differing:
        return []
    mine = [d for d in divergences if d.ref == ref and d.cand == cand]
    grouped: dict[str, list[Divergence]] = defaultdict(list)
    for d in mine:
        for cause in d.causes or (d.cause,):
            grouped[cause].append(d)
    findings = []
    for cause, items in grouped.items():
        first = items[0]
        code = codes.UNEXPLAINED if cause == codes.UNEXPLAINED.code else _code(cause)
        message = (f"{cand} tokenizes {len(items)} of {len(mine)} diagnosed differing sample(s) differently from "
                   f"{ref} ({pair.differing} of {pair.compared} differ): {first.detail_of(cause)}")
        findings.append(code.finding(message, subject=Subject(stage=pair_key(ref, cand)),  # stable: no sample
                                     evidence=_divergence_evidence(first, items, pair, len(mine))))
    return findings


def _code(cause: str) -> Any:
    from gapcheck.codes import lookup

    found = lookup(cause)
    return found if found is not None else codes.UNEXPLAINED


def _divergence_evidence(first: Divergence, items: Sequence[Divergence], pair: PairStats, diagnosed: int) -> dict:
    return {
        "differing_samples": pair.differing, "compared_samples": pair.compared, "diagnosed": diagnosed,
        "samples_with_this_cause": [d.sample for d in items[:EXAMPLES]],
        "first_divergence": {"sample": first.sample, "component": first.component, "position": first.position,
                             first.ref: first.ref_token, first.cand: first.cand_token,
                             "characters": list(first.span) if first.span else None, "text": first.excerpt},
        **first.evidence,
    }


def vocabulary_findings(stages: Sequence[LoadedStage], found: Sequence[Finding]) -> list[Finding]:
    """Reference vs each stage: different vocabulary hashes that no sample divergence was traced to (a warning)."""
    ref, named = stages[0], {(f.code, f.subject.stage) for f in found}
    findings = []
    for cand in stages[1:]:
        ia, ib = ref.info, cand.info
        key = pair_key(ref.name, cand.name)
        if not ia.vocab_sha256 or not ib.vocab_sha256 or ia.vocab_sha256 == ib.vocab_sha256:
            continue
        if {(codes.VOCABULARY.code, key), (codes.ADDED_TOKENS_MISSING.code, key), (codes.FAST_SLOW.code, key)} & named:
            continue
        findings.append(codes.VOCABULARY.finding(
            f"{ref.name} and {cand.name} use different vocabularies ({ia.vocab_size} vs {ib.vocab_size} entries); no audited "
            f"sample was traced to the difference", subject=Subject(stage=key), severity=Severity.WARNING,
            evidence={"vocab_sha256": [ia.vocab_sha256, ib.vocab_sha256], "vocab_size": [ia.vocab_size, ib.vocab_size],
                      "same_files": same_files(ia, ib)}))
    return findings


def unknown_rate_findings(stages: Sequence[LoadedStage], stats: dict[str, StageStats], found: Sequence[Finding],
                          p_threshold: float) -> list[Finding]:
    """A stage whose unknown-token rate is clearly above the reference's (two-proportion z-test and ≥ 2x / +1 pt)."""
    ref = stages[0]
    a = stats.get(ref.name, StageStats())
    findings = []
    for cand in stages[1:]:
        b = stats.get(cand.name, StageStats())
        if ref.info.unk_id is None or cand.info.unk_id is None or not a.tokens or not b.tokens:
            continue
        ra, rb = a.unk / a.tokens, b.unk / b.tokens
        if rb <= ra or (rb < 2 * ra and rb - ra < 0.01) or _two_proportion_p(a.unk, a.tokens, b.unk, b.tokens) >= p_threshold:
            continue
        key = pair_key(ref.name, cand.name)
        explained = any(f.subject.stage == key and f.is_gap for f in found)
        findings.append(codes.UNKNOWN_TOKENS.finding(
            f"{cand.name} maps {rb:.2%} of its tokens to the unknown token, {ref.name} {ra:.2%}",
            subject=Subject(stage=key), severity=Severity.WARNING if explained else None,
            evidence={"unk_rate": {ref.name: ra, cand.name: rb}, "unk_tokens": {ref.name: a.unk, cand.name: b.unk}}))
    return findings


def _two_proportion_p(x1: int, n1: int, x2: int, n2: int) -> float:
    pooled = (x1 + x2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:
        return 1.0 if x1 / n1 == x2 / n2 else 0.0
    z = abs(x1 / n1 - x2 / n2) / se
    return math.erfc(z / math.sqrt(2))


def ks_findings(rows: Sequence[KSRow]) -> list[Finding]:
    return [codes.STATISTICS_DRIFT.finding(
        f"{r.statistic} distribution differs between {r.ref} and {r.cand} (KS D={r.d:.3f}, p={r.p_value:.2g})",
        subject=Subject(stage=pair_key(r.ref, r.cand), output=r.statistic),
        evidence={"ks_d": r.d, "p_value": r.p_value, "n": [r.n_ref, r.n_cand]}) for r in rows if r.flagged]


def error_findings(partial: ChunkPartial, stats: dict[str, StageStats]) -> list[Finding]:
    by_stage: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for stage, sample, error in partial.errors:
        by_stage[stage].append((sample, error))
    findings = []
    for stage, items in by_stage.items():
        count = stats.get(stage, StageStats()).errors
        findings.append(codes.STAGE_ERROR.finding(
            f"{stage} failed on {count} sample(s); first: {items[0][0]}: {items[0][1]}",
            subject=Subject(stage=stage, sample=items[0][0]),
            evidence={"failed_samples": count, "examples": [f"{s}: {e}" for s, e in items[:EXAMPLES]]}))
    return findings


def bad_input_findings(bad: Sequence[tuple[str, str]], counts: Counter) -> list[Finding]:
    """One warning per kind of bad input ("not valid UTF-8", "NUL bytes", "over the limit"...), with examples."""
    examples: dict[str, list[str]] = defaultdict(list)
    for sample, reason in bad:
        examples[bad_kind(reason)].append(f"{sample}: {reason}")
    return [codes.BAD_TEXT.finding(f"{count} sample(s) skipped: {kind}", subject=Subject(group=kind),
                                   evidence={"skipped": count, "examples": examples[kind][:EXAMPLES]})
            for kind, count in sorted(counts.items())]


def bad_kind(reason: str) -> str:
    """The kind of a bad input, from its reason (one finding per kind)."""
    for kind in ("not valid UTF-8", "NUL", "character limit", "not JSON", "not a string", "empty cell",
                 "not a regular file", "unreadable"):
        if kind in reason:
            return {"NUL": "NUL bytes (binary data)", "character limit": "over the character limit"}.get(kind, kind)
    if "field" in reason:
        return "missing field"
    return "other"

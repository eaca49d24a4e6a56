"""What ``audit_text`` returns: frozen, truthy when the stages agree, and a
:class:`~gapcheck.report.contract.CommandResult` (JSON sections, tables and charts, JUnit checks), so every
report format renders it.

The user ran ``gapcheck preprocess-audit``, so that is the envelope's ``command`` (JUnit suite, HTML title, SARIF
id) on text as on images; the ``input`` section (``"text"``) says which of the command's two report shapes this
is, and ``gapcheck/schemas/preprocess-audit-text.schema.json`` describes it.

The views follow the class (results hold their views, as every command's do): the stage statistics, the stage pairs,
the first divergences (tokens of both stages and the characters of the original string), KS results, bad inputs, and
the JUnit checks; every string that comes from outside (sample ids, text, tokens) was made safe for a terminal where
it was read or decoded.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gapcheck.findings import Finding
from gapcheck.preprocess.rows import StageError  # stage, sample, error: the image path's row, shared
from gapcheck.report.contract import Chart, Check, ResultBase, Series, Table, findings_checks
from gapcheck.report.text import safe_line
from gapcheck.text.analysis import KSRow, PairRow, StageRow
from gapcheck.text.diagnose import Divergence
from gapcheck.text.shard import SampleRow

COMMAND = "preprocess-audit"
INPUT = "text"
CLASSNAME = COMMAND  # the command the user ran (JUnit classnames)
SHOWN_DIVERGENCES = 20
#: the JSON sections, in order, that are the result's own fields as they are (divergences and bad samples are shaped)
_PLAIN = ("settings", "stages", "pairs", "ks", "bad_total", "stage_errors", "samples", "audited")

__all__ = ["COMMAND", "INPUT", "StageError", "TextAuditResult"]


@dataclass(frozen=True)
class TextAuditResult(ResultBase):
    findings: tuple[Finding, ...] = field()  # field(): no default (ResultBase has a class-level one)
    stages: tuple[StageRow, ...]
    pairs: tuple[PairRow, ...]
    divergences: tuple[Divergence, ...]
    ks: tuple[KSRow, ...]
    bad_samples: tuple[tuple[str, str], ...]  # (sample, reason): the first ones (the findings count them all)
    bad_total: int
    stage_errors: tuple[StageError, ...]
    samples: tuple[SampleRow, ...]  # the first ``settings['sample_rows']`` samples
    audited: int
    settings: dict[str, Any]
    length_histograms: dict[str, dict[int, int]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    command: str = field(default=COMMAND, init=False)

    def __bool__(self) -> bool:
        return self.verdict == "pass"

    @property
    def headline(self) -> str:
        gaps = sorted({f.code for f in self.findings if f.is_gap})
        differing = sum(p.differing for p in self.pairs if p.ref == self.stages[0].stage) if self.stages else 0
        return (f"{self.audited} string(s) through {len(self.stages)} tokenizer stage(s): {differing} differ from "
                f"the reference, {len(gaps)} kind(s) of gap" + (f" ({', '.join(gaps)})" if gaps else "")
                + f", {self.bad_total} bad input(s)")

    @property
    def timings(self) -> Mapping[str, float]:
        return self.seconds

    def sections(self) -> dict[str, Any]:
        shaped = {"divergences": [_divergence_json(d) for d in self.divergences],
                  "bad_samples": [{"sample": s, "reason": r} for s, r in self.bad_samples]}
        return {"input": INPUT, **{name: getattr(self, name) for name in _PLAIN}, **shaped}

    def views(self) -> Sequence[Table | Chart]:
        return _all_views(self)

    def checks(self) -> Sequence[Check]:
        return _checks(self)


def _divergence_json(d: Divergence) -> dict[str, Any]:
    return {"ref": d.ref, "cand": d.cand, "sample": d.sample, "component": d.component, "position": d.position,
            "ref_length": d.ref_length, "cand_length": d.cand_length, "ref_token": d.ref_token,
            "cand_token": d.cand_token, "ref_tokens": list(d.ref_tokens), "cand_tokens": list(d.cand_tokens),
            "window_start": d.window_start, "span": list(d.span) if d.span else None, "excerpt": d.excerpt,
            "cause": d.cause, "causes": list(d.causes), "detail": d.detail}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2%}"


def stage_table(result: TextAuditResult) -> Table:
    rows = []
    for s in result.stages:
        limit = "-" if s.truncation_length is None else f"{s.at_truncation_length} at {s.truncation_length}"
        specials = ", ".join(f"{safe_line(k)}×{v}" for k, v in list(s.special_tokens.items())[:6]) or "-"
        deterministic = "-" if s.deterministic is None else "yes" if s.deterministic else "NO"
        rows.append((s.stage, safe_line(s.description), s.samples, s.errors, f"{s.mean_length:.1f}",
                     f"{s.p50_length}/{s.p95_length}/{s.max_length_seen}", limit, _pct(s.unk_rate if s.vocab_size
                                                                                        else None),
                     specials, _pct(s.vocab_coverage), s.vocab_sha256[:12] or "-", deterministic))
    columns = ("stage", "tokenizer", "samples", "errors", "mean len", "p50/p95/max", "at truncation", "unk rate",
               "special tokens", "vocab coverage", "vocab sha256", "deterministic")
    return Table("Tokenizer stages", columns, tuple(rows),
                 highlight=tuple(i for i, s in enumerate(result.stages) if s.errors or s.deterministic is False))


def pair_table(result: TextAuditResult) -> Table:
    rows = tuple((p.ref, p.cand, p.compared, p.differing, p.differing_ids, p.differing_mask, p.differing_types,
                  ", ".join(f"{k}×{v}" for k, v in sorted(p.causes.items())) or ("-" if not p.differing else
                                                                                 "not diagnosed"))
                 for p in result.pairs)
    return Table("Stage pairs (same strings, SHA256 of ids / mask / type ids)",
                 ("ref", "cand", "compared", "differ", "ids", "mask", "type ids", "causes (diagnosed samples)"), rows,
                 highlight=tuple(i for i, p in enumerate(result.pairs) if p.differing),
                 note="causes are counted over the diagnosed samples of each pair with the reference")


def divergence_table(result: TextAuditResult) -> Table:
    rows = []
    for d in result.divergences[:SHOWN_DIVERGENCES]:
        span = f"{d.span[0]}-{d.span[1]}" if d.span else "-"
        rows.append((f"{d.ref}→{d.cand}", d.sample, f"{d.component}[{d.position}]", d.ref_token, d.cand_token,
                     " ".join(d.ref_tokens), " ".join(d.cand_tokens), span, d.excerpt, ", ".join(d.causes or (d.cause,))))
    note = f"first {SHOWN_DIVERGENCES} of {len(result.divergences)}" if len(result.divergences) > SHOWN_DIVERGENCES \
        else ""
    return Table("First divergences", ("pair", "sample", "position", "ref token", "cand token", "ref tokens",
                                       "cand tokens", "chars", "text (⟦span⟧)", "cause"), tuple(rows),
                 highlight=tuple(range(len(rows))), note=note)


def ks_table(result: TextAuditResult) -> Table:
    rows = tuple((r.ref, r.cand, r.statistic, f"{r.d:.3f}", f"{r.p_value:.2g}", r.n_ref, r.n_cand,
                  "yes" if r.flagged else "no") for r in result.ks)
    return Table("Token statistics drift (KS)", ("ref", "cand", "statistic", "D", "p", "n ref", "n cand", "flagged"),
                 rows, highlight=tuple(i for i, r in enumerate(result.ks) if r.flagged))


def bad_table(result: TextAuditResult) -> Table:
    return Table("Bad inputs (skipped)", ("sample", "reason"),
                 tuple((s, safe_line(r)) for s, r in result.bad_samples[:50]))


def length_chart(result: TextAuditResult) -> Chart:
    values = sorted({k for h in result.length_histograms.values() for k in h})
    if len(values) > 64:  # bins of equal width over the observed range
        step = (values[-1] - values[0]) // 64 + 1
        bins = list(range(values[0], values[-1] + 1, step))
    else:
        bins, step = values, 1
    series = []
    for stage, histogram in result.length_histograms.items():
        counts = [0.0] * len(bins)
        for length, count in histogram.items():
            index = min(len(bins) - 1, (length - bins[0]) // step) if step > 1 else bins.index(length)
            counts[index] += count
        series.append(Series(stage, tuple(counts), style="bar"))
    return Chart("Attended sequence length per stage", kind="bar", x=tuple(str(b) for b in bins), series=tuple(series),
                 y_label="samples")


def _all_views(result: TextAuditResult) -> list[Table | Chart]:
    views: list[Table | Chart] = [stage_table(result), pair_table(result)]
    if result.divergences:
        views.append(divergence_table(result))
    if result.ks:
        views.append(ks_table(result))
    if result.bad_samples:
        views.append(bad_table(result))
    if result.length_histograms and any(result.length_histograms.values()):
        views.append(length_chart(result))
    return views


def _checks(result: TextAuditResult) -> list[Check]:
    """One case per stage pair (fails when any sample differs), per stage determinism, then the findings."""
    cases = [Check(name=f"{p.ref}→{p.cand} same ids", classname=f"{CLASSNAME}.pairs",
                   failure=f"{p.differing} of {p.compared} samples differ" if p.differing else None)
             for p in result.pairs]
    cases += [Check(name=f"{s.stage} deterministic", classname=f"{CLASSNAME}.determinism",
                    failure=None if s.deterministic else "different ids for the same string on repeated runs",
                    skipped=None if s.deterministic is not None else "not probed") for s in result.stages]
    return cases + findings_checks(CLASSNAME, result.findings)

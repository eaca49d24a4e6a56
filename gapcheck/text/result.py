"""What ``audit_text`` returns: frozen, truthy when the stages agree, and a
:class:`~gapcheck.report.contract.CommandResult` (JSON sections, tables and charts, JUnit checks), so every
report format renders it.

The user ran ``gapcheck preprocess-audit``, so that is the envelope's ``command`` (JUnit suite, HTML title, SARIF
id) on text as on images; the ``input`` section (``"text"``) says which of the command's two report shapes this
is, and ``gapcheck/schemas/preprocess-audit-text.schema.json`` describes it.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gapcheck.findings import Finding
from gapcheck.preprocess.rows import StageError  # stage, sample, error: the image path's row, shared
from gapcheck.report.contract import Chart, Check, ResultBase, Table
from gapcheck.text.analysis import KSRow, PairRow, StageRow
from gapcheck.text.diagnose import Divergence
from gapcheck.text.shard import SampleRow

COMMAND = "preprocess-audit"
INPUT = "text"
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
        from gapcheck.text.views import all_views

        return all_views(self)

    def checks(self) -> Sequence[Check]:
        from gapcheck.text.views import checks

        return checks(self)


def _divergence_json(d: Divergence) -> dict[str, Any]:
    return {"ref": d.ref, "cand": d.cand, "sample": d.sample, "component": d.component, "position": d.position,
            "ref_length": d.ref_length, "cand_length": d.cand_length, "ref_token": d.ref_token,
            "cand_token": d.cand_token, "ref_tokens": list(d.ref_tokens), "cand_tokens": list(d.cand_tokens),
            "window_start": d.window_start, "span": list(d.span) if d.span else None, "excerpt": d.excerpt,
            "cause": d.cause, "causes": list(d.causes), "detail": d.detail}

"""What ``audit_text`` returns: frozen, truthy when the stages agree, and a
:class:`~gapcheck.report.contract.CommandResult` (JSON sections, tables and charts, JUnit checks), so every
report format renders it. Its JSON envelope is described by ``gapcheck/schemas/text-audit.schema.json``.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gapcheck.findings import Finding
from gapcheck.report.contract import Chart, Check, ResultBase, Table
from gapcheck.text.analysis import KSRow, PairRow, StageRow
from gapcheck.text.diagnose import Divergence
from gapcheck.text.shard import SampleRow


@dataclass(frozen=True)
class BadSample:
    sample: str
    reason: str


@dataclass(frozen=True)
class StageError:
    stage: str
    sample: str
    error: str


@dataclass(frozen=True)
class TextAuditResult(ResultBase):
    findings: tuple[Finding, ...] = field()  # field(): no default (ResultBase has a class-level one)
    stages: tuple[StageRow, ...]
    pairs: tuple[PairRow, ...]
    divergences: tuple[Divergence, ...]
    ks: tuple[KSRow, ...]
    bad_samples: tuple[BadSample, ...]  # the first ones (the findings count them all)
    bad_total: int
    stage_errors: tuple[StageError, ...]
    samples: tuple[SampleRow, ...]  # the first ``settings['sample_rows']`` samples
    audited: int
    settings: dict[str, Any]
    length_histograms: dict[str, dict[int, int]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    command: str = field(default="text-audit", init=False)

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
        return dict(self.seconds)

    def sections(self) -> dict[str, Any]:
        return {
            "settings": self.settings,
            "stages": list(self.stages),
            "pairs": list(self.pairs),
            "divergences": [_divergence_json(d) for d in self.divergences],
            "ks": list(self.ks),
            "bad_samples": list(self.bad_samples),
            "bad_total": self.bad_total,
            "stage_errors": list(self.stage_errors),
            "samples": list(self.samples),
            "audited": self.audited,
        }

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

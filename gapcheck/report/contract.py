"""The one report contract every command's result implements, and the views renderers draw.

A command returns a result object that knows its verdict. Renderers (one module per format
under :mod:`gapcheck.report.formats`) only format what the result exposes:

- ``command``, ``verdict``, ``headline``, ``findings``, ``timings``: the envelope's head;
- ``sections()``: the command's own JSON sections (plain JSON types), after the envelope's head;
- ``views()``: what a person looks at — :class:`Table` and :class:`Chart` values, drawn by the
  console (tables) and HTML (tables and charts) renderers; computed by the result, not the renderer;
- ``checks()``: one :class:`Check` per compared thing, for JUnit (and any CI dashboard);
- ``exit_code`` (optional, :class:`ResultBase` derives it from the verdict): ``ExitCode.BACKEND`` when the
  result is incomplete (a part could not be checked), which the formats say instead of a verdict.

:class:`ResultBase` gives sensible defaults for ``views`` and ``checks`` so a new command only
implements what it has. This module imports nothing heavy.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from gapcheck.errors import ExitCode
from gapcheck.findings import Finding, Verdict

#: rows of each table, and findings, the console prints unless ``--max-rows`` says otherwise (0: all); rich takes
#: about 0.3-3 ms a row, so 100k rows would be minutes of scrolling nobody reads: the JSON report holds every row
CONSOLE_MAX_ROWS = 100
#: rows of each table, and findings, an HTML report holds (a browser stays usable; the JSON report holds every row)
HTML_MAX_ROWS = 1000


def shown_rows(count: int, highlight: Sequence[int], max_rows: int | None) -> list[int]:
    """Indices of the rows to show, in table order: all when ``max_rows`` is 0/None or the table fits, else at most
    ``max_rows`` of them, the highlighted rows (the failing ones) first, then the first rows in order."""
    if not max_rows or max_rows <= 0 or count <= max_rows:
        return list(range(count))
    chosen = dict.fromkeys(i for i in highlight if 0 <= i < count)
    picked = set(list(chosen)[:max_rows])
    index = 0
    while len(picked) < max_rows and index < count:
        picked.add(index)
        index += 1
    return sorted(picked)


def more_rows_note(hidden: int, what: str, limit: str) -> str:
    """The one line that says rows were left out, how many, and where they are."""
    what = what[:-1] if hidden == 1 and what.endswith("s") else what
    return f"... {hidden:,} more {what} not shown ({limit}); the JSON report holds every one"


@dataclass(frozen=True)
class Table:
    """A table for console and HTML. ``cells`` are plain values (str/int/float/None); ``highlight`` marks rows to emphasise."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    highlight: tuple[int, ...] = ()  # row indices (e.g. the failing ones)
    note: str = ""


@dataclass(frozen=True)
class Series:
    name: str
    values: tuple[float | None, ...]  # None leaves a gap in a line (e.g. a module with no ONNX counterpart)
    style: str = "line"  # "line" | "step" | "dashed" | "bar" | "scatter"


@dataclass(frozen=True)
class Chart:
    """A plot for the HTML report: x labels, one or more series, optional marked x positions.

    kind "line"/"bar" draw series over ``x``; kind "heatmap" draws ``matrix`` (rows × x) with ``y`` labels;
    kind "images" shows ``images`` (PNG bytes, base64-encoded) side by side with their captions.
    """

    title: str
    kind: str = "line"
    x: tuple[str, ...] = ()
    series: tuple[Series, ...] = ()
    y_label: str = ""
    log_y: bool = False
    marks: tuple[int, ...] = ()  # x indices to mark (e.g. the first divergence)
    y: tuple[str, ...] = ()
    matrix: tuple[tuple[float, ...], ...] = ()
    images: tuple[tuple[str, str], ...] = ()  # (caption, base64 PNG)
    note: str = ""


@dataclass(frozen=True)
class Check:
    """One JUnit testcase: a compared thing and whether it held."""

    name: str
    classname: str
    failure: str | None = None
    details: str = ""
    skipped: str | None = None


@runtime_checkable
class CommandResult(Protocol):
    """What every command returns (see the module docstring)."""

    @property
    def command(self) -> str: ...

    @property
    def verdict(self) -> Verdict: ...

    @property
    def headline(self) -> str: ...

    @property
    def findings(self) -> Sequence[Finding]: ...

    @property
    def timings(self) -> Mapping[str, float]: ...

    def sections(self) -> dict[str, Any]: ...

    def views(self) -> Sequence[Table | Chart]: ...

    def checks(self) -> Sequence[Check]: ...


class ResultBase:
    """Defaults for the optional parts of :class:`CommandResult`.

    Subclasses (usually frozen dataclasses) provide ``command``, ``findings``, ``headline``,
    ``sections()`` and optionally ``timings``; ``verdict`` follows the findings unless overridden.
    """

    command: str = ""
    findings: Sequence[Finding] = ()

    @property
    def verdict(self) -> Verdict:
        return Verdict.of(self.findings)

    @property
    def timings(self) -> Mapping[str, float]:
        return {}

    @property
    def exit_code(self) -> ExitCode:
        """0 on a pass, 1 on a gap. A result that can end incomplete (an endpoint that could not be checked)
        overrides it with :attr:`ExitCode.BACKEND`; every format reads that as "incomplete", never as a gap."""
        return ExitCode.for_verdict(self.verdict)

    def sections(self) -> dict[str, Any]:
        return {}

    def views(self) -> Sequence[Table | Chart]:
        # Findings are not a view: every format renders them itself, once.
        return ()

    def checks(self) -> Sequence[Check]:
        return findings_checks(self.command, self.findings)


def findings_table(findings: Sequence[Finding], title: str = "Findings") -> Table:
    rows = tuple((f.severity.value, f.code, f.where, f.message) for f in findings)
    gaps = tuple(i for i, f in enumerate(findings) if f.is_gap)
    return Table(title=title, columns=("severity", "code", "where", "message"), rows=rows, highlight=gaps)


def findings_checks(command: str, findings: Sequence[Finding]) -> list[Check]:
    """One JUnit case per finding (gaps fail, others pass with their message), or one passing case when clean."""
    if not findings:
        return [Check(name="no findings", classname=command or "gapcheck")]
    return [Check(name=f"{f.code} {f.where}".strip(), classname=f"{command}.{f.code}",
                  failure=f.message if f.is_gap else None, details=_evidence_text(f.evidence) or f.message)
            for f in findings]


def _evidence_text(evidence: Mapping[str, Any]) -> str:
    from gapcheck.report.text import evidence_text

    return evidence_text(evidence)


@dataclass(frozen=True)
class SimpleResult(ResultBase):
    """A result for commands with nothing but findings and a few sections (and for tests)."""

    command: str = ""
    findings: tuple[Finding, ...] = ()
    headline: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def sections(self) -> dict[str, Any]:
        return dict(self.extra)

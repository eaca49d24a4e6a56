"""``LintResult``: what ``gapcheck lint`` returns, implementing the report contract."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gapcheck.errors import ExitCode
from gapcheck.findings import Finding, Severity
from gapcheck.report.contract import Check, ResultBase, Table


@dataclass(frozen=True)
class FileError:
    """A file that could not be linted (unreadable, not text, does not parse)."""

    path: str
    message: str


@dataclass(frozen=True)
class LintResult(ResultBase):
    command: str = "lint"
    findings: tuple[Finding, ...] = ()
    errors: tuple[FileError, ...] = ()
    files: int = 0
    lines: int = 0
    rules: tuple[str, ...] = ()
    seconds: float = 0.0

    @property
    def headline(self) -> str:
        counts = {s: sum(1 for f in self.findings if f.severity is s) for s in Severity}
        text = (f"{len(self.findings)} finding(s) in {self.files} file(s)" if self.findings
                else f"no findings in {self.files} file(s)")
        if self.findings and counts[Severity.INFO]:
            text += f" ({counts[Severity.INFO]} informational)"
        if self.errors:
            text += f"; {len(self.errors)} file(s) could not be checked"
        return text

    @property
    def timings(self) -> Mapping[str, float]:
        return {"lint_s": round(self.seconds, 4)}

    @property
    def exit_code(self) -> ExitCode:
        """2 when a file could not be checked (bad input: the check is incomplete, ``--exit-zero`` does not hide it);
        else 0 for a pass, 1 for findings."""
        return ExitCode.USAGE if self.errors else super().exit_code

    def diagnostics(self) -> list[dict[str, Any]]:
        """The flat, ruff-like list: path, line, col, code, message, severity."""
        # a notebook finding's line is the .ipynb file's line (its cell and cell line are in the finding's evidence)
        return [{"path": f.subject.path, "line": f.subject.line, "col": f.subject.col or 1, "code": f.code,
                 "message": f.message, "severity": f.severity.value, **_cell_of(f)} for f in self.findings]

    def sections(self) -> dict[str, Any]:
        return {
            "summary": {"files": self.files, "lines": self.lines, "rules": list(self.rules),
                        "findings": len(self.findings), "errors": len(self.errors)},
            "diagnostics": self.diagnostics(),
            "errors": [{"path": e.path, "message": e.message} for e in self.errors],
        }

    def views(self) -> Sequence[Table]:
        tables = []
        if self.findings:
            tables.append(Table(title="Lint findings", columns=("where", "code", "severity", "message"),
                                rows=tuple((f.where, f.code, f.severity.value, f.message) for f in self.findings),
                                highlight=tuple(i for i, f in enumerate(self.findings) if f.is_gap)))
        if self.errors:
            tables.append(Table(title="Files not checked", columns=("path", "error"),
                                rows=tuple((e.path, e.message) for e in self.errors),
                                highlight=tuple(range(len(self.errors)))))
        return tuple(tables)

    def checks(self) -> Sequence[Check]:
        cases = [Check(name=f"{f.code} {f.where}", classname=f"lint.{f.code}",
                       failure=f.message if f.is_gap else None, details=f.message) for f in self.findings]
        cases += [Check(name=f"parse {e.path}", classname="lint.error", failure=e.message, details=e.message)
                  for e in self.errors]
        return cases or [Check(name=f"no findings in {self.files} file(s)", classname="lint")]


def _cell_of(finding: Finding) -> dict[str, int]:
    """A notebook finding's cell, line and column in that cell (``nb.ipynb:cell N:line L``); {} elsewhere."""
    keys = ("cell", "cell_line", "cell_col")
    values = [finding.evidence.get(key) for key in keys]
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return dict(zip(keys, values, strict=True))  # type: ignore[arg-type]
    return {}

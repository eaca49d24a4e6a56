"""The ruff-like text report: ``path:line:col: CODE message``, then a summary line. Formats only.

Every line is one line: a newline or tab inside a file name (or a message quoting the source) is
shown escaped, and :func:`~gapcheck.report.text.safe_line` neutralises terminal escapes, so a hostile file name can
neither recolour the terminal nor forge an extra diagnostic line.
"""
from __future__ import annotations

from gapcheck.findings import Finding
from gapcheck.lint.result import FileError, LintResult
from gapcheck.report.text import safe_line as _line


def _error(error: FileError) -> str:
    # read_source's messages start with the path; say it once
    message = error.message.removeprefix(f"{error.path}: ")
    if message.startswith(f"{error.path}:"):  # "path:line:col: does not parse": already ruff-like
        return _line(message)
    return _line(f"{error.path}: error: {message}")


def _position(finding: Finding) -> str:
    """``path:line:col``; a notebook cell's ``nb.ipynb:cell N:line L`` (its evidence names the cell)."""
    if "cell" in finding.evidence:
        return finding.where
    return f"{finding.subject.path}:{finding.subject.line}:{finding.subject.col}"


def summary(result: LintResult) -> list[str]:
    """The closing line(s): counts, and how many files could not be checked."""
    if result.findings:
        codes = ", ".join(sorted({f.code for f in result.findings}))
        lines = [f"Found {len(result.findings)} finding(s) in {result.files} file(s) ({codes}); "
                 "`gapcheck explain CODE` shows the fix."]
    elif result.errors:
        lines = [f"No findings in the {result.files - len(result.errors)} file(s) checked ({result.lines} line(s))."]
    else:
        lines = [f"All checks passed: {result.files} file(s), {result.lines} line(s)."]
    if result.errors:
        lines.append(f"{len(result.errors)} file(s) could not be checked.")
    return lines


def render(result: LintResult, max_rows: int = 0) -> str:
    """One line per finding (the first ``max_rows`` of them when not 0, then how many more), per file that could
    not be checked, then the summary."""
    shown = result.findings[:max_rows] if max_rows else result.findings
    lines = [_line(f"{_position(f)}: {f.code} {f.message}") for f in shown]
    if len(shown) < len(result.findings):
        lines.append(f"... {len(result.findings) - len(shown)} more finding(s) (--max-rows {max_rows}; "
                     "--max-rows 0 shows all)")
    lines += [_error(e) for e in result.errors]
    return "\n".join([*lines, *summary(result)]) + "\n"

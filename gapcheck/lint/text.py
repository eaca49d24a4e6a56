"""The ruff-like text report: ``path:line:col: CODE message``, then a summary line. Formats only."""
from __future__ import annotations

from gapcheck.lint.result import LintResult
from gapcheck.report.text import safe_text


def render(result: LintResult) -> str:
    lines = [safe_text(f"{f.subject.path}:{f.subject.line}:{f.subject.col}: {f.code} {f.message}")
             for f in result.findings]
    lines += [safe_text(f"{e.path}: error: {e.message}") for e in result.errors]
    if result.findings:
        codes = ", ".join(sorted({f.code for f in result.findings}))
        lines.append(f"Found {len(result.findings)} finding(s) in {result.files} file(s) ({codes}); "
                     "`gapcheck explain CODE` shows the fix.")
    else:
        lines.append(f"All checks passed: {result.files} file(s), {result.lines} line(s).")
    if result.errors:
        lines.append(f"{len(result.errors)} file(s) could not be checked.")
    return "\n".join(lines) + "\n"

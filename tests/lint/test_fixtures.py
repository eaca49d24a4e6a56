"""Golden fixtures, discovered automatically: ``fixtures/<CODE>/**/*.py``.

A line that must be flagged ends with ``# expect: GC101`` (several codes: ``# expect: GC101, GC104``);
every other line of every file under the code's folder must stay silent for that code. Each rule
has at least one file that must be flagged and one correct twin that looks similar.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from gapcheck.codes import all_codes
from gapcheck.lint import Selection, lint_paths

FIXTURES = Path(__file__).parent / "fixtures"
_EXPECT = re.compile(r"#\s*expect:\s*([A-Z0-9, ]+)")
LINT_CODES = sorted(c.code for c in all_codes() if c.family == "lint")


def expected_lines(path: Path, code: str) -> set[int]:
    found = set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = _EXPECT.search(line)
        if match and code in {c.strip() for c in match.group(1).split(",")}:
            found.add(number)
    return found


def fixture_files() -> list[tuple[str, Path]]:
    return [(folder.name, path) for folder in sorted(FIXTURES.iterdir()) if folder.is_dir()
            for path in sorted(folder.rglob("*.py"))]


@pytest.mark.parametrize(("code", "path"), fixture_files(), ids=lambda v: v if isinstance(v, str) else
                         str(v.relative_to(FIXTURES)))
def test_fixture(code: str, path: Path) -> None:
    result = lint_paths([path], Selection(select=(code,)), jobs=1)
    assert not result.errors, result.errors
    flagged = {f.subject.line for f in result.findings if f.code == code}
    assert flagged == expected_lines(path, code), [f"{f.subject.line}: {f.message}" for f in result.findings]


@pytest.mark.parametrize("code", LINT_CODES)
def test_every_rule_has_a_flagged_case_and_a_silent_twin(code: str) -> None:
    folder = FIXTURES / code
    files = sorted(folder.rglob("*.py")) if folder.is_dir() else []
    flagged = [p for p in files if expected_lines(p, code)]
    silent = [p for p in files if not expected_lines(p, code) and p.name.startswith("ok")]
    assert flagged, f"{code}: no fixture with '# expect: {code}'"
    assert silent, f"{code}: no correct twin (ok*.py) that must stay silent"

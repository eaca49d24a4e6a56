"""The engine: suppressions, deterministic parallel runs, discovery, hostile input."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gapcheck.errors import UsageError
from gapcheck.lint import Selection, lint_paths
from gapcheck.lint.engine import PARALLEL_FROM, discover
from gapcheck.lint.source import parse_source

FIXTURES = Path(__file__).parent / "fixtures"

UNSAFE = "import torch\n"


def lint_text(tmp_path: Path, text: str, name: str = "t.py", **selection: tuple[str, ...]):  # type: ignore[no-untyped-def]
    path = tmp_path / name
    path.write_text(text)
    return lint_paths([path], Selection(**selection) if selection else None, jobs=1)


def test_suppression_on_the_line(tmp_path: Path) -> None:
    result = lint_text(tmp_path, UNSAFE + 'a = torch.load("a")  # gapcheck: ignore[GC801] -- trusted file we wrote\n'
                                 'b = torch.load("b")\n')
    assert [(f.code, f.subject.line) for f in result.findings] == [("GC801", 3)]


def test_suppression_anywhere_on_a_multiline_statement(tmp_path: Path) -> None:
    text = UNSAFE + ('state = torch.load(\n'
                     '    "a.pt",\n'
                     '    map_location="cpu",  # gapcheck: ignore[GC801] -- our own checkpoint\n'
                     ')\n')
    assert lint_text(tmp_path, text).findings == ()


def test_suppression_needs_the_right_code_and_a_real_comment(tmp_path: Path) -> None:
    text = UNSAFE + ('a = torch.load("a")  # gapcheck: ignore[GC802]\n'
                     'b = torch.load("# gapcheck: ignore[GC801]")\n')
    assert [f.subject.line for f in lint_text(tmp_path, text).findings] == [2, 3]


def test_suppression_on_a_loop_header_does_not_cover_the_body(tmp_path: Path) -> None:
    text = UNSAFE + ('for p in paths:  # gapcheck: ignore[GC801]\n'
                     '    torch.load(p)\n')
    assert [f.subject.line for f in lint_text(tmp_path, text).findings] == [3]


def test_prefix_suppression(tmp_path: Path) -> None:
    text = UNSAFE + 'a = torch.load("a")  # gapcheck: ignore[GC8] -- whole family\n'
    assert lint_text(tmp_path, text).findings == ()


def test_parallel_run_is_deterministic(tmp_path: Path) -> None:
    for index, folder in enumerate(sorted(p for p in FIXTURES.iterdir() if p.is_dir())):
        for source in sorted(folder.glob("*.py")):
            shutil.copy(source, tmp_path / f"{index:02d}_{folder.name}_{source.name}")
    assert len(list(tmp_path.glob("*.py"))) >= PARALLEL_FROM
    serial = lint_paths([tmp_path], jobs=1)
    parallel = lint_paths([tmp_path], jobs=2)
    assert serial.findings == parallel.findings
    assert serial.files == parallel.files and serial.lines == parallel.lines
    keys = [(f.subject.path, f.subject.line, f.subject.col, f.code) for f in parallel.findings]
    assert keys == sorted(keys)


def test_discovery_skips_virtualenvs_and_hidden_folders(tmp_path: Path) -> None:
    for folder in ("src", ".venv/lib", "build", ".git", "src/__pycache__"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "m.py").write_text("x = 1\n")
    (tmp_path / "notes.txt").write_text("not python")
    found = [display for _, display in discover([tmp_path])]
    assert found == [str(tmp_path / "src" / "m.py")]
    assert [d for _, d in discover([tmp_path / "notes.txt"])] == [str(tmp_path / "notes.txt")]  # explicit: linted


def test_nothing_to_lint_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        lint_paths([tmp_path])


def test_hostile_files_are_reported_not_raised(tmp_path: Path) -> None:
    (tmp_path / "nul.py").write_bytes(b"x = 1\x00\n")
    (tmp_path / "latin.py").write_bytes(b"# -*- coding: nope -*-\nx = 1\n")
    (tmp_path / "deep.py").write_text("x = " + "(" * 5000 + ")" * 5000 + "\n")
    (tmp_path / "fine.py").write_text(UNSAFE + "torch.load('x')\n")
    result = lint_paths([tmp_path], jobs=1)
    assert sorted(e.path.rsplit("/", 1)[-1] for e in result.errors) == ["deep.py", "latin.py", "nul.py"]
    assert [f.code for f in result.findings] == ["GC801"]
    assert result.verdict == "gap"


def test_suppressions_read_from_comments_only() -> None:
    source = parse_source('s = "# gapcheck: ignore[GC801]"\nt = 1  # gapcheck: ignore[GC801, gc802] -- why\n',
                          Path("x.py"), "x.py")
    assert list(source.suppressions) == [2]
    assert source.suppressions[2].codes == frozenset({"GC801", "GC802"})
    assert source.suppressions[2].reason == "why"


def test_every_rule_has_its_own_registered_code() -> None:
    from gapcheck.codes import all_codes, is_documented
    from gapcheck.lint.rules import all_rules

    rule_codes = [rule.code.code for rule in all_rules()]
    registered = sorted(c.code for c in all_codes() if c.family == "lint")
    assert sorted(rule_codes) == registered and len(set(rule_codes)) == len(rule_codes)
    assert all(is_documented(rule.code) for rule in all_rules())


TRAINER = """import torch


def main():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()


def helper():
    return 1
"""


def test_configured_entry_point_function(tmp_path: Path) -> None:
    path = tmp_path / "trainer.py"
    path.write_text(TRAINER)
    assert lint_paths([path], Selection(select=("GC601",)), jobs=1).findings == ()  # no main guard: not an entry point
    result = lint_paths([path], Selection(select=("GC601",), entry_points=("trainer.py::main",)), jobs=1)
    assert [(f.code, f.subject.line) for f in result.findings] == [("GC601", 4)]
    whole = lint_paths([path], Selection(select=("GC601",), entry_points=("trainer.py",)), jobs=1)
    assert [f.code for f in whole.findings] == []  # the module body only defines functions: nothing trains


def test_long_expression_chains_do_not_crash(tmp_path: Path) -> None:
    chain = " + ".join(["loss"] * 3000)
    text = f"for x in loader:\n    loss = model(x)\n    loss.backward()\n    total += {chain}\n"
    result = lint_text(tmp_path, text)
    assert result.files == 1  # either analysed or reported as a file error, never an exception


def test_program_keeps_a_bounded_number_of_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gapcheck.lint.symbols import Program

    monkeypatch.setattr(Program, "MAX_MODULES", 2)
    program = Program([tmp_path])
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.py").write_text(f"def {name}():\n    return 1\n")
        assert program.load(tmp_path / f"{name}.py") is not None
    assert len(program._modules) == 2
    again = program.load(tmp_path / "a.py")  # evicted, parsed again on demand
    assert again is not None and "a" in again.functions

"""The finding-code registry: every code documented, declared once, emitted only through the registry, listed in the docs."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gapcheck.codes import FAMILIES, all_codes, is_documented, lookup, markdown
from gapcheck.findings import Severity

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gapcheck"
CODE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)+$|^[a-z]{4,}$|^[A-Z]{2,4}\d{2,4}$")


def test_every_code_is_documented_with_a_family_and_a_severity():
    codes = all_codes()
    assert len(codes) >= 20 and len({c.code for c in codes}) == len(codes)
    for entry in codes:
        assert is_documented(entry), f"{entry.code}: title, explanation (a sentence) and fix are required"
        assert isinstance(entry.severity, Severity) and entry.family
        assert CODE.match(entry.code), f"{entry.code}: codes are snake_case (or rule ids like GC101)"
        assert lookup(entry.code) is entry


def test_every_family_module_is_listed_once():
    on_disk = {f"gapcheck.codes.{p.stem}" for p in (PACKAGE / "codes").glob("*.py")
               if p.stem not in ("__init__", "pytest_plugin")}
    assert set(FAMILIES) == on_disk and len(FAMILIES) == len(set(FAMILIES))


def _python_files():
    for path in sorted(PACKAGE.rglob("*.py")):
        if "codes" not in path.relative_to(PACKAGE).parts[:1]:
            yield path


def _is_code_attribute(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "code"


def _string_constants(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for element in node.elts for s in _string_constants(element)]
    return []


def code_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """``Finding("x", ...)``, ``Finding(code="x")``, ``anything(code="x")`` and ``f.code == "x"`` / ``in ("x", ...)``."""
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == "Finding" and node.args:
                hits += [(node.lineno, s) for s in _string_constants(node.args[0])]
            hits += [(node.lineno, s) for kw in node.keywords if kw.arg == "code" for s in _string_constants(kw.value)]
        elif isinstance(node, ast.Compare) and (_is_code_attribute(node.left) or any(map(_is_code_attribute, node.comparators))):
            for side in (node.left, *node.comparators):
                hits += [(node.lineno, s) for s in _string_constants(side)]
    return hits


def test_the_scanner_finds_literal_codes():
    source = ('Finding("scale", Severity.GAP, "m")\nFinding(code="x", severity=s, message="m")\n'
              'if f.code in ("a", "b"): pass\nX.finding("fine")\nFinding(CODE.code, s, "m")\n')
    assert [s for _, s in code_literals(ast.parse(source))] == ["scale", "x", "a", "b"]


def test_no_finding_code_is_a_string_literal_outside_the_registry():
    offenders = []
    for path in _python_files():
        for line, literal in code_literals(ast.parse(path.read_text(encoding="utf-8"))):
            offenders.append(f"{path.relative_to(ROOT)}:{line}: {literal!r}")
    assert not offenders, "emit codes through gapcheck.codes (X.finding(...) / X.code), not literals:\n" + "\n".join(offenders)


def test_codes_doc_is_generated_from_the_registry():
    doc = ROOT / "docs" / "codes.md"
    assert doc.read_text(encoding="utf-8") == markdown(), "docs/codes.md is stale: run python scripts/gen_codes_doc.py"
    check = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_codes_doc.py"), "--check"], capture_output=True,
                           text=True)
    assert check.returncode == 0, check.stderr


def readme_code_lists(text: str) -> list[str]:
    """Backticked names in the README's code lists: paragraphs starting "Finding codes:" / "Findings (JSON `code`)",
    and the first column of tables headed ``| code | severity |``."""
    found: list[str] = []
    blocks = text.split("\n\n")
    for block in blocks:
        lines = block.splitlines()
        if lines and re.match(r"^\|\s*code\s*\|\s*severity", lines[0]):
            found += [m for row in lines[2:] for m in re.findall(r"^\|\s*`([^`]+)`", row)]
            continue
        start = re.search(r"(Finding codes:|Findings \(JSON `code`\):)", block)
        if start:
            found += re.findall(r"`([^`]+)`", block[start.end():])
    return [name for name in found if CODE.match(name) and not name.endswith("*")]


def test_the_readme_lists_only_registered_codes():
    names = readme_code_lists((ROOT / "README.md").read_text(encoding="utf-8"))
    unknown = sorted({name for name in names if lookup(name) is None})
    assert not unknown, f"README lists codes the registry does not know: {unknown}"


def test_readme_list_reader():
    text = ("Intro `not_a_code_list`.\n\nFinding codes: `layer_divergence`, `triton_*` and `--onnx`.\n\n"
            "| code | severity | what |\n|---|---|---|\n| `triton_platform` | warning | x |\n")
    assert readme_code_lists(text) == ["layer_divergence", "triton_platform"]


@pytest.mark.parametrize("code", ["layer_divergence", "LAYER_DIVERGENCE"])
def test_explain_reads_the_registry(code, capsys):
    from gapcheck.cli.app import main

    assert main(["explain", code]) == 0
    out = capsys.readouterr().out
    assert "layer_divergence" in out and "Fix:" in out
    assert main(["explain", "no_such_code"]) == 2
    capsys.readouterr()
    assert main(["explain", "--list"]) == 0
    listing = capsys.readouterr().out
    assert [c.code for c in all_codes() if c.code not in listing] == []


def test_emitted_codes_are_checked_by_the_plugin():
    from gapcheck.codes import pytest_plugin
    from gapcheck.codes.export_diff import LAYER_DIVERGENCE

    LAYER_DIVERGENCE.finding("seen")
    assert "layer_divergence" in pytest_plugin.emitted_codes()
    assert getattr(__import__("gapcheck.findings").findings.Finding.__post_init__, "_gapcheck_checked", False)


def test_an_unregistered_code_emitted_by_gapcheck_fails_its_test(tmp_path):
    (tmp_path / "test_emit.py").write_text(
        "import pathlib\n"
        "import gapcheck.codes.pytest_plugin as plugin\n"
        "from gapcheck.findings import Finding, Severity\n"
        "def test_emits():\n"
        "    package, plugin._PACKAGE = plugin._PACKAGE, pathlib.Path(__file__).resolve().parent  # pose as gapcheck\n"
        "    try:\n"
        "        Finding('no_such_code_h1a', Severity.GAP, 'm')\n"
        "    finally:\n"
        "        plugin._PACKAGE = package\n"
        "def test_findings_built_by_tests_are_not_checked():\n"
        "    Finding('made_up_by_a_test', Severity.INFO, 'm')\n"
    )
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "gapcheck.codes.pytest_plugin", "-p", "no:cacheprovider",
                          str(tmp_path / "test_emit.py")], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 1, run.stdout
    assert "1 failed, 1 passed" in run.stdout
    assert "unregistered finding code 'no_such_code_h1a' emitted at" in run.stdout

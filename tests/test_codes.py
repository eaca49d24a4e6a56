"""The finding-code registry: every code documented, declared once, emitted only through the registry, listed in the docs."""
from __future__ import annotations

import ast
import fnmatch
import importlib
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from gapcheck.codes import (
    FAMILIES,
    CatalogError,
    Code,
    all_codes,
    catalog,
    define,
    is_documented,
    lookup,
    markdown,
    parse_catalog,
    register,
)
from gapcheck.findings import Severity

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

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


# --- the data files: package data, one constant per entry, hostile-file rules ----------------------------------------

def _data_file(module: str) -> str:
    return resources.files("gapcheck.codes").joinpath(module.rpartition(".")[2] + ".toml").read_text(encoding="utf-8")


def test_every_family_has_its_data_file_as_package_data():
    """Found through importlib.resources (as an installed wheel serves them), one per family, none extra, all shipped."""
    package = resources.files("gapcheck.codes")
    shipped = {entry.name for entry in package.iterdir() if entry.name.endswith(".toml")}
    assert shipped == {module.rpartition(".")[2] + ".toml" for module in FAMILIES}
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = pyproject["tool"]["setuptools"]["package-data"]["gapcheck"]
    unshipped = [name for name in shipped if not any(fnmatch.fnmatch(f"codes/{name}", p) for p in patterns)]
    assert not unshipped, f"add codes/*.toml to [tool.setuptools.package-data] gapcheck: {unshipped}"


@pytest.mark.parametrize("module", FAMILIES)
def test_every_data_file_entry_is_bound_to_a_constant(module):
    declared = [c.code for c in parse_catalog(_data_file(module), module)]
    bound = {value.code for value in vars(importlib.import_module(module)).values() if isinstance(value, Code)}
    unbound = [code for code in declared if code not in bound]
    assert not unbound, f"{module}: entries with no constant (add NAME = _codes[\"code\"]): {unbound}"
    assert bound == set(declared) and all(lookup(code).family for code in declared)


_ENTRY = '[demo_code]\nseverity = "gap"\ntitle = "T"\nexplanation = "Some explanation."\nfix = "F"\n'
_GOOD = 'family = "demo"\n\n' + _ENTRY


@pytest.mark.parametrize(("text", "message"), [
    (_GOOD.replace('fix = "F"\n', ""), r"demo\.toml \[demo_code\]: fields missing or empty: fix \(a code has severity, "),
    (_GOOD.replace('title = "T"', 'title = "  "'), r"\[demo_code\]: fields missing or empty: title"),
    (_GOOD.replace('fix = "F"', "fix = 3"), r"\[demo_code\]: fields missing or empty: fix"),
    (_GOOD + 'hint = "x"\n', r"\[demo_code\]: fields unknown: hint \("),
    (_GOOD.replace('"gap"', '"fatal"'), r"\[demo_code\]: unknown severity 'fatal' \(one of info, warning, gap\)"),
    (_GOOD.replace('"gap"', '"GAP"'), r"\[demo_code\]: unknown severity 'GAP'"),
    (_GOOD + "\n" + _ENTRY, r"demo\.toml: not valid TOML: Cannot declare \('demo_code',\) twice"),
    (_GOOD + "[broken\n", r"demo\.toml: not valid TOML"),
    (_ENTRY, r"demo\.toml: needs a top-level family"),
    (_GOOD.replace('family = "demo"', 'family = ""'), r"needs a top-level family"),
    ('family = "demo"\nloose = "not a table"\n', r"demo\.toml \[loose\]: a code is a table"),
])
def test_a_broken_data_file_fails_loudly_naming_file_entry_and_field(text, message):
    with pytest.raises(CatalogError, match=message):
        parse_catalog(text, "gapcheck/codes/demo.toml")


def test_a_data_file_entry_parses_with_its_white_space_folded():
    wrapped = _GOOD.replace('"Some explanation."', "'''\n  Some\n  explanation.\n'''")
    assert parse_catalog(wrapped, "demo.toml") == (
        Code(code="demo_code", severity=Severity.GAP, family="demo", title="T", explanation="Some explanation.", fix="F"),)


def test_a_code_declared_twice_fails_and_registers_nothing():
    codes = parse_catalog(_GOOD + "\n" + _ENTRY.replace("demo_code", "layer_divergence"), "gapcheck/codes/demo.toml")
    with pytest.raises(CatalogError, match=r"demo\.toml: finding code layer_divergence declared twice \(export-diff, "):
        register(codes, "gapcheck/codes/demo.toml")
    assert lookup("demo_code") is None and lookup("layer_divergence").family == "export-diff"
    with pytest.raises(CatalogError, match="finding code demo_code declared twice"):
        register(codes[:1] * 2, "demo.toml")
    with pytest.raises(CatalogError, match="declared twice"):
        define("layer_divergence", Severity.GAP, "demo", "T", "Some explanation.", "F")
    assert lookup("demo_code") is None


def test_a_constant_naming_a_code_its_file_lacks_fails_at_import(tmp_path, monkeypatch):
    import gapcheck.codes as registry

    (tmp_path / "demo.toml").write_text(_GOOD, encoding="utf-8")
    monkeypatch.setattr(registry.resources, "files", lambda package: tmp_path)  # the package folder, as a wheel holds it
    real = dict(registry._REGISTRY)
    module = 'from gapcheck.codes import catalog\n_codes = catalog("gapcheck.codes.demo")\nDEMO = _codes["demo_code"]\n'
    monkeypatch.setattr(registry, "_REGISTRY", dict(real))  # what the demo registers goes with the test
    namespace: dict[str, object] = {}
    exec(module, namespace)  # the shape of every catalog module, as its import runs it
    assert namespace["DEMO"] is lookup("demo_code") and lookup("demo_code").family == "demo"
    monkeypatch.setattr(registry, "_REGISTRY", dict(real))
    with pytest.raises(CatalogError, match=r"gapcheck/codes/demo\.toml has no entry \[GC999\], but a constant names it"):
        exec(module + 'MISSING = _codes["GC999"]\n', {})
    with pytest.raises(CatalogError, match=r"gapcheck/codes/no_such_family\.toml: cannot be read"):
        catalog("gapcheck.codes.no_such_family")

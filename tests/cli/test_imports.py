"""Light imports and Python 3.10: `import gapcheck`, `gapcheck --help` and `gapcheck explain` import nothing heavy."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import gapcheck

ROOT = Path(__file__).resolve().parents[2]
# (pydantic is not listed: typer itself imports it when it builds a command, ~35 ms.)
HEAVY = ("torch", "numpy", "onnx", "onnxruntime", "tritonclient", "gevent", "matplotlib", "scipy", "cv2")


def _heavy_after(code: str) -> list[str]:
    probe = f"{code}\nimport sys\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    return eval(out.strip().splitlines()[-1])  # a list literal we printed ourselves


@pytest.mark.parametrize("code", [
    "import gapcheck",
    "from gapcheck.cli.app import main; main(['--help'])",
    "from gapcheck.cli.app import main; main(['explain', 'layer_divergence']); main(['explain', '--list'])",
    "from gapcheck.cli.app import main; main(['export-diff', '--help'])",
    # the option groups and every command module that declares them (issue 18): light at import
    "import gapcheck.groups, gapcheck.groups.keywords, gapcheck.cli.groups",
    "from gapcheck.cli.app import COMMANDS; from gapcheck.cli.lazy import load_command; "
    "[load_command(n, s) for n, s in COMMANDS.items()]",
    "from gapcheck.cli.app import main; main(['cache', 'info', '--cache-dir', '/nonexistent/gapcheck-cache'])",
])
def test_nothing_heavy_is_imported(code):
    assert _heavy_after(code) == []


def test_every_public_name_resolves_lazily():
    for name in gapcheck.__all__:
        assert getattr(gapcheck, name) is not None, name
    assert set(gapcheck.__all__) <= set(dir(gapcheck))
    with pytest.raises(AttributeError):
        gapcheck.no_such_name  # noqa: B018


# Standard-library names that appeared in Python 3.11+ (the package supports 3.10).
_NEWER_MODULES = {"tomllib", "wsgiref.types"}
_NEWER_NAMES = {("enum", "StrEnum"), ("typing", "Self"), ("typing", "LiteralString"), ("typing", "Never"),
                ("typing", "assert_never"), ("typing", "reveal_type"), ("typing", "Required"), ("typing", "NotRequired"),
                ("typing", "TypeVarTuple"), ("typing", "Unpack"), ("datetime", "UTC"), ("asyncio", "TaskGroup"),
                ("hashlib", "file_digest"), ("contextlib", "chdir"), ("operator", "call")}


def _version_guarded(tree: ast.AST) -> set[int]:
    """Line numbers inside ``if sys.version_info ...:`` blocks (where a 3.11 import is fine)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "version_info" in ast.unparse(node.test):
            lines |= {n.lineno for child in node.body for n in ast.walk(child) if hasattr(n, "lineno")}
    return lines


def python310_problems(source: str, name: str) -> list[str]:
    tree = ast.parse(source, filename=name, feature_version=(3, 10))  # 3.11+ syntax is a SyntaxError here
    guarded = _version_guarded(tree)
    problems = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in guarded:
            continue
        if isinstance(node, ast.Import):
            problems += [f"{name}:{node.lineno}: import {a.name}" for a in node.names if a.name in _NEWER_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module in _NEWER_MODULES:
                problems.append(f"{name}:{node.lineno}: from {node.module}")
            problems += [f"{name}:{node.lineno}: {node.module}.{a.name}" for a in node.names
                         if (node.module, a.name) in _NEWER_NAMES]
        elif isinstance(node, ast.ExceptHandler) and isinstance(node.type, ast.Name) and node.type.id == "ExceptionGroup":
            problems.append(f"{name}:{node.lineno}: ExceptionGroup")
    return problems


def test_the_checker_sees_newer_python():
    assert python310_problems("import tomllib\n", "a.py") == ["a.py:1: import tomllib"]
    assert python310_problems("import sys\nif sys.version_info >= (3, 11):\n    import tomllib\n", "b.py") == []
    assert python310_problems("from enum import StrEnum\n", "c.py") == ["c.py:1: enum.StrEnum"]


def test_every_module_is_python_310_compatible():
    problems = []
    for path in sorted((ROOT / "gapcheck").rglob("*.py")):
        problems += python310_problems(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert not problems, "Python 3.10 is supported (requires-python >= 3.10):\n" + "\n".join(problems)

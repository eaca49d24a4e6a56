"""No function in gapcheck/ over 60 lines or 12 parameters (issue 18's acceptance; DESIGN.md: functions under ~60
lines), read from the source with ``ast``.

The one exception is a typer command in ``gapcheck/cli/``: its signature is its flags (the groups' options are added by
``declare``, the command's own ones are written out), so it is allowed more parameters and lines. A command is a
function decorated with ``declare(...)`` or ``app.command(...)``, or rebound as ``command = declare(...)(command)``.
"""
from __future__ import annotations

import ast
from pathlib import Path

import gapcheck

ROOT = Path(gapcheck.__file__).parent
MAX_LINES = 60
MAX_PARAMETERS = 12


def _is_command_decorator(node: ast.expr) -> bool:
    call = node.func if isinstance(node, ast.Call) else node
    while isinstance(call, ast.Call):  # declare(...)(fn) seen as a decorator chain
        call = call.func
    name = call.attr if isinstance(call, ast.Attribute) else getattr(call, "id", "")
    return name in ("declare", "command")


def _commands(tree: ast.Module) -> set[str]:
    """Names of the module's typer commands: decorated, or rebound ``fn = declare(...)(fn)``."""
    names = {f.name for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
             and any(_is_command_decorator(d) for d in f.decorator_list)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _is_command_decorator(node.value.func):
            names |= {a.id for a in node.value.args if isinstance(a, ast.Name)}
    return names


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)] + [p.arg for p in (a.vararg, a.kwarg) if p]
    return len(names) - (1 if names and names[0] in ("self", "cls") else 0)


def _oversized(root: Path = ROOT) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        commands = _commands(tree) if path.parent.name == "cli" else set()
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.name in commands:
                continue
            lines, parameters = (fn.end_lineno or fn.lineno) - fn.lineno + 1, _parameters(fn)
            if lines > MAX_LINES or parameters > MAX_PARAMETERS:
                found.append(f"{path.relative_to(root)}:{fn.lineno} {fn.name}: {lines} lines, {parameters} parameters")
    return found


def test_no_function_over_60_lines_or_12_parameters():
    oversized = _oversized()
    assert not oversized, "\n".join(oversized)


def test_the_check_sees_a_long_function_and_a_wide_signature(tmp_path):
    """The rule is not vacuous: a planted 61-line function and a 13-parameter one are found; a cli command is not."""
    package = tmp_path / "pkg"
    (package / "cli").mkdir(parents=True)
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    (package / "long.py").write_text(f"def long():\n{body}\n")
    (package / "wide.py").write_text("class A:\n    def wide(self, " + ", ".join(f"p{i}" for i in range(13)) + "):\n"
                                     "        pass\n")
    wide_command = "def command(" + ", ".join(f"p{i}" for i in range(13)) + "):\n    pass\n"
    (package / "cli" / "lint.py").write_text(f"{wide_command}command = declare(ReportTargets)(command)\n")
    (package / "cli" / "helper.py").write_text(wide_command.replace("command", "helper"))
    found = " | ".join(_oversized(package))
    assert "long.py:1 long: 61 lines" in found and "wide.py:2 wide: 2 lines, 13 parameters" in found
    assert "helper.py:1 helper" in found and "lint.py" not in found

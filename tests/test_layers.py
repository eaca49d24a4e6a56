"""Import arrows only point down (DESIGN.md): the floors this test pins, read from the source with ``ast``.

- the lowest floor (errors, limits, atomic, version, findings, progress, tensors, alarm) imports only itself;
- ``model/`` never imports ``backends/`` or a command package (the exporters share names with the torch backend
  through ``model/outputs.py``);
- the report layer, ``model/``, ``backends/``, ``guards/``, ``metrics/`` and ``triton/`` never import the package
  face (``from gapcheck import __version__`` reaches up to the top floor; ``gapcheck.version`` is the floor below).
"""
from __future__ import annotations

import ast
from pathlib import Path

import gapcheck

ROOT = Path(gapcheck.__file__).parent
LOWEST = {"gapcheck.errors", "gapcheck.limits", "gapcheck.atomic", "gapcheck.version", "gapcheck.findings",
          "gapcheck.progress", "gapcheck.tensors", "gapcheck.alarm"}
COMMANDS = ("gapcheck.cli", "gapcheck.export_diff", "gapcheck.preprocess", "gapcheck.golden", "gapcheck.nightly",
            "gapcheck.data", "gapcheck.lint", "gapcheck.triton")


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """Every ``gapcheck`` import of a file (top level, in functions, under TYPE_CHECKING): line, module, names."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "gapcheck":
            found.append((node.lineno, node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names if a.name.split(".")[0] == "gapcheck"]
    return found


def _files(*areas: str) -> list[Path]:
    out: list[Path] = []
    for area in areas:
        target = ROOT / area
        out += sorted(target.rglob("*.py")) if target.is_dir() else [target]
    return out


def test_the_lowest_floor_imports_only_itself():
    wrong = [f"{path.name}:{line} imports {module}"
             for path in _files("errors.py", "limits.py", "atomic.py", "version.py", "findings.py", "progress.py",
                                "tensors.py", "alarm.py")
             for line, module, _ in _imports(path) if module not in LOWEST]
    assert not wrong, wrong


def test_model_imports_neither_backends_nor_commands():
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {module}" for path in _files("model")
             for line, module, _ in _imports(path) if module.startswith(("gapcheck.backends", *COMMANDS))]
    assert not wrong, wrong


def test_no_layer_below_the_top_reaches_for_the_package_face():
    wrong = []
    for path in _files("report", "model", "backends", "guards", "metrics", "triton", "codes", *(
            f"{name}.py" for name in ("errors", "limits", "atomic", "version", "findings", "progress", "tensors",
                                      "alarm", "inputs", "compare"))):
        for line, module, names in _imports(path):
            submodules = [n for n in names if (ROOT / n).is_dir() or (ROOT / f"{n}.py").is_file()]
            if module == "gapcheck" and set(names) - set(submodules):
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {names} from the package face")
    assert not wrong, wrong

"""Import arrows only point down (DESIGN.md): the floors this test pins, read from the source with ``ast``.

- the lowest floor (errors, limits, atomic, version, findings, progress, tensors, alarm) imports only itself;
- ``model/`` never imports ``backends/`` or a command package (the exporters share names with the torch backend
  through ``model/outputs.py``);
- the report layer, ``model/``, ``backends/``, ``guards/``, ``metrics/`` and ``triton/`` never import the package
  face (``from gapcheck import __version__`` reaches up to the top floor; ``gapcheck.version`` is the floor below);
- every floor of docs/architecture.md's picture: no import from a lower floor to a higher one, and no result importing
  its views, but for the listed defects (KNOWN_UP, KNOWN_RESULT_VIEWS), which may only shrink.
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


# --- every floor, as docs/architecture.md draws it (issue 18: "0 imports running back up") ---------------------------
#: floor of a top-level name under gapcheck/ (higher imports lower, never the reverse); anything else is a command
#: library (floor 5): export_diff, preprocess, golden, nightly, data, lint, text, precision, guards, metrics, triton
FLOORS = {**dict.fromkeys(("errors", "limits", "atomic", "version", "findings", "progress", "tensors", "alarm"), 0),
          **dict.fromkeys(("codes", "report", "schemas", "config", "compare", "inputs", "reading"), 1),
          **dict.fromkeys(("model", "engines"), 2), "backends": 3, "groups": 4, "cli": 6, "__main__": 7}
#: the Triton client layer: as low as model/ (backends/triton.py and TritonTarget.endpoint() use it); the rest of
#: triton/ (audit, deploy, twin, repository, local_server) is the triton-audit command
TRANSPORT = {"gapcheck.triton.url", "gapcheck.triton.endpoint", "gapcheck.triton.client", "gapcheck.triton.probe",
             "gapcheck.triton.bounded_http"}
#: the text input: reading sentences (``text/samples.py``) and tokenizer stages (``text/stages.py``, which resolve a
#: ``module:fn`` through ``model/factory.py``), fed as model inputs (``text/feed.py``): as low as model/, so
#: ``InputSource.samples()`` (groups/) tokenizes ``--text-samples`` with them; the rest of text/ is the text audit
TEXT_INPUT = {"gapcheck.text.samples", "gapcheck.text.stages", "gapcheck.text.feed"}
#: imports that still run up, each one a defect to remove (this list only shrinks): importer -> imported
KNOWN_UP: set[tuple[str, str]] = set()
#: results that import their views (the rule: "results do not import their views"); only shrinks
KNOWN_RESULT_VIEWS: set[tuple[str, str]] = set()


def _floor(module: str) -> int:
    if module == "gapcheck":
        return 8  # the package face is the top
    if module in TRANSPORT or module in TEXT_INPUT:
        return 2
    return FLOORS.get(module.split(".")[1], 5)


def _edges() -> set[tuple[str, str]]:
    """(importer, imported module) for every gapcheck import, ``from pkg import sub`` resolved to the submodule."""
    modules = {_module(path) for path in ROOT.rglob("*.py")}
    edges = set()
    for path in ROOT.rglob("*.py"):
        importer = _module(path)
        for _, module, names in _imports(path):
            targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in modules] or [module]
            edges |= {(importer, t) for t in targets if t != importer}
    return edges


def test_no_import_runs_up_a_floor():
    up = {(a, b) for a, b in _edges() if _floor(b) > _floor(a)}
    assert not up - KNOWN_UP, f"imports from a lower floor to a higher one: {sorted(up - KNOWN_UP)}"
    assert not KNOWN_UP - up, f"fixed: remove from KNOWN_UP {sorted(KNOWN_UP - up)}"


def test_results_do_not_import_their_views():
    found = {(a, b) for a, b in _edges() if a.rsplit(".", 1)[-1].endswith("result") and "views" in b.rsplit(".", 1)[-1]}
    assert not found - KNOWN_RESULT_VIEWS, sorted(found - KNOWN_RESULT_VIEWS)
    assert not KNOWN_RESULT_VIEWS - found, f"fixed: remove from KNOWN_RESULT_VIEWS {sorted(KNOWN_RESULT_VIEWS - found)}"

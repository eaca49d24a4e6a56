"""The version lives on the lowest floor (gapcheck.version); the package face and the project metadata agree with it."""
from __future__ import annotations

import sys
from pathlib import Path

import gapcheck
from gapcheck.version import __version__

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def test_the_package_face_re_exports_the_one_version_and_pyproject_states_the_same():
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert gapcheck.__version__ is __version__
    assert project["version"] == __version__
    assert "__version__" in gapcheck.__all__


def test_reports_stamp_the_version_without_reaching_for_the_package_face():
    import ast

    root = Path(gapcheck.__file__).parent
    for path in sorted((root / "report").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "gapcheck":
                raise AssertionError(f"{path.relative_to(root)} imports from the package face: {ast.unparse(node)}")

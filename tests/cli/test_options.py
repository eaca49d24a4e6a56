"""The shared option groups: one spelling per flag, report paths checked before work, config under flags."""
from __future__ import annotations

import json

import pytest

from gapcheck.cli import options
from gapcheck.codes.export_diff import TRAINING_MODE
from gapcheck.errors import UsageError
from gapcheck.groups import ReportTargets, ToleranceSpec
from gapcheck.report.contract import SimpleResult
from gapcheck.report.formats import ReportFormat


def test_reports_are_checked_before_and_written_after(tmp_path):
    reports = ReportTargets(json=tmp_path / "a" / "r.json", html=tmp_path / "r.html")
    assert set(reports.paths()) == {ReportFormat.JSON.value, ReportFormat.HTML.value}
    result = SimpleResult(command="demo", findings=(TRAINING_MODE.finding("w"),), headline="h")
    written = reports.write(result)
    assert [p.name for p in written] == ["r.json", "r.html"]
    assert json.loads(written[0].read_text())["verdict"] == "pass"
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="--junit report path"):
        ReportTargets(junit=tmp_path / "file" / "r.xml")
    with pytest.raises(UsageError, match="--json and --html name the same file"):
        ReportTargets(json=tmp_path / "same", html=tmp_path / "same")


def test_tolerance_overrides_parse_and_refuse_garbage():
    values = ToleranceSpec.from_cli({"rtol": 1e-3, "atol": None, "overrides": ["layer1.*=1e-2,1e-4", "fc=0,0"]}, {})
    parsed = ToleranceSpec(**values)
    assert parsed.overrides == {"layer1.*": (1e-2, 1e-4), "fc": (0.0, 0.0)} and parsed.rtol == 1e-3
    for bad in ("layer1", "a=1", "=1,2", "a=x,y"):
        with pytest.raises(UsageError, match="PATTERN=RTOL,ATOL"):
            options.parse_overrides([bad])


def test_every_library_parameter_maps_to_a_real_flag():
    from gapcheck.cli.app import COMMANDS
    from gapcheck.cli.lazy import load_command

    flags = {opt for name in ("export-diff", "preprocess-audit") for p in load_command(name, COMMANDS[name]).params
             for opt in p.opts}
    assert set(options.PARAMETER_FLAGS.values()) <= flags

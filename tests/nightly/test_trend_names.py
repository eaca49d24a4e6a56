"""Names from a history file never reach the terminal raw, not even through matplotlib's warnings (issue 23, item 3)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gapcheck.nightly.history import EndpointRecord, History, OutputRecord
from gapcheck.nightly.trend import read_history

EVIL_ENDPOINT = "prod\x1b[31m\x07\x1b]0;pwned\x07"
EVIL_OUTPUT = "logits\x1b[2J\u202e"


def _evil_history(path: Path) -> None:
    with History(path) as h:
        for night in range(3):
            run = f"r{night}"
            started = f"2026-01-0{night + 1}T00:00:00\x1b[5m+00:00"
            h.start_run(run, started, "g", "abc", "0")
            h.add_endpoint_result(EndpointRecord(
                run, EVIL_ENDPOINT, "grpc://h:1", "m", None, "1", "c", "abc", "pass" if night else "new_failure",
                "pass", "ok", None, 4, started, 1.0, {"total": 1.0},
                (OutputRecord(EVIL_OUTPUT, "pass", 0.1, 0.1, 0.1, 0.0, 0.5 + night / 10, 1e-4, 1e-4),)))


def test_chart_titles_and_labels_hold_no_control_character(tmp_path: Path) -> None:
    from gapcheck.report.contract import Chart

    _evil_history(tmp_path / "h.sqlite")
    charts = [v for v in read_history(tmp_path / "h.sqlite").views() if isinstance(v, Chart)]
    assert charts
    for chart in charts:
        for text in (chart.title, chart.note or "", *chart.x):
            assert text.isprintable(), repr(text)
    assert "prod\\x1b[31m\\x07" in charts[0].title  # shown, escaped: the user can still tell which endpoint


@pytest.mark.parametrize("flags", [["--html", "out.html"], []])
def test_history_prints_no_raw_escape_on_stderr_or_stdout(tmp_path: Path, flags: list[str]) -> None:
    pytest.importorskip("matplotlib")
    _evil_history(tmp_path / "h.sqlite")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "PYTHONWARNINGS": "default"}
    proc = subprocess.run([sys.executable, "-m", "gapcheck", "history", "--history", str(tmp_path / "h.sqlite"),
                           *[str(tmp_path / f) if f.endswith(".html") else f for f in flags]],
                          capture_output=True, env=env, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr.decode()[-2000:]
    for stream in (proc.stderr, proc.stdout):
        assert b"\x1b" not in stream and b"\x07" not in stream and "\u202e".encode() not in stream, stream[-500:]
    if flags:
        assert (tmp_path / "out.html").stat().st_size > 0


def test_tonights_trend_chart_neutralizes_what_the_history_holds() -> None:
    from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option
    from gapcheck.nightly.probe import EndpointOutcome
    from gapcheck.nightly.result import EndpointReport
    from gapcheck.nightly.status import Classification, Status

    spec = endpoint_spec(parse_endpoint_option("prod=http://127.0.0.1:1/m"))
    outcome = EndpointOutcome(spec, True, None, "1", "c", 4, (), (), (), 4, {})
    trend = (("2026-01-01T00:00:00\x1b[5m", "new_failure\x07", {EVIL_OUTPUT: 2.0}),
             ("2026-01-02T00:00:00+00:00", "pass", {EVIL_OUTPUT: 0.5}))
    report = EndpointReport(outcome, Classification(Status.PASS, (), {}, (), None), (), trend=trend)
    [chart] = report.trend_charts()
    for text in (chart.title, chart.note or "", *chart.x):
        assert text.isprintable(), repr(text)

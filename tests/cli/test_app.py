"""The CLI's one error boundary, and every CLI choice handled."""
from __future__ import annotations

import pytest
import typer

from gapcheck.cli import app as app_module
from gapcheck.cli.choices import Exporter, Precision, Protocol
from gapcheck.errors import (
    BackendError,
    CheckpointError,
    ConfigError,
    EndpointError,
    ExitCode,
    ExportError,
    InputError,
    UsageError,
    exit_code_for,
)
from gapcheck.model.export import EXPORTERS
from gapcheck.model.precision import PRECISIONS


@pytest.mark.parametrize(
    "exc, code",
    [(UsageError("u"), 2), (ConfigError("c"), 2), (InputError("i"), 2), (CheckpointError("k"), 2), (ExportError("e"), 2),
     (BackendError("b"), 3), (EndpointError("p"), 3), (RuntimeError("boom"), 3)],
)
def test_exceptions_map_to_exit_codes(exc, code, monkeypatch, capsys):
    assert exit_code_for(exc) == code

    def raising() -> None:
        raise exc

    boundary_app = typer.Typer()
    boundary_app.command("boom")(raising)
    boundary_app.command("other")(lambda: None)
    monkeypatch.setattr(app_module, "app", boundary_app)
    assert app_module.main(["boom"]) == code
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err


def test_usage_errors_from_the_parser_exit_2(capsys):
    assert app_module.main(["export-diff", "--no-such-flag"]) == ExitCode.USAGE
    assert app_module.main(["no-such-command"]) == ExitCode.USAGE


def test_help_exits_0(capsys):
    assert app_module.main(["--help"]) == 0
    assert "export-diff" in capsys.readouterr().out


def test_every_cli_choice_is_handled_by_the_library():
    assert {e.value for e in Exporter} == set(EXPORTERS)
    assert {p.value for p in Precision} == set(PRECISIONS)
    assert {p.value for p in Protocol} == {"grpc", "http"}


def _boundary(monkeypatch, exc):
    def raising() -> None:
        raise exc

    boundary_app = typer.Typer()
    boundary_app.command("boom")(raising)
    boundary_app.command("other")(lambda: None)
    monkeypatch.setattr(app_module, "app", boundary_app)
    return app_module.main(["boom"])


def test_the_cli_names_the_flag_of_a_library_parameter(monkeypatch, capsys):
    code = _boundary(monkeypatch, CheckpointError("the file holds a pickled module", parameter="unsafe_pickle"))
    err = capsys.readouterr().err
    assert code == 2 and "pickled module" in err and "(see --unsafe-pickle)" in err


def test_error_text_from_outside_cannot_drive_the_terminal(monkeypatch, capsys):
    assert _boundary(monkeypatch, InputError("bad file name \x1b[2J\x07evil.png")) == 2
    err = capsys.readouterr().err
    assert "\x1b[2J" not in err and "\x07" not in err and "\\x1b[2J" in err


def test_exit_code_for_verdict_is_the_one_mapping():
    from gapcheck.findings import Verdict

    assert ExitCode.for_verdict(Verdict.PASS) == 0 and ExitCode.for_verdict(Verdict.GAP) == 1
    assert ExitCode.for_verdict("pass") == 0 and ExitCode.for_verdict("gap") == 1


def test_one_line_summaries():
    from gapcheck.errors import one_line

    assert one_line(ValueError("first\nsecond")) == "ValueError: first"
    assert one_line(RuntimeError()) == "RuntimeError"
    long = "x" * 200 + ". Advice follows"
    assert one_line(RuntimeError(long)) == "RuntimeError: " + "x" * 200
    assert len(one_line(RuntimeError("y" * 1000))) <= len("RuntimeError: ") + 300


def test_log_lines_and_findings_are_one_line_without_control_characters():
    """Outside text in a log record or a finding cannot repaint the terminal nor forge a line of its own."""
    import io
    import logging

    from rich.console import Console

    from gapcheck.findings import Finding, Severity
    from gapcheck.report.console import print_findings

    evil = "imgs/evil\x1b[2J\x1b[32mPASS\rx.png\nPASS all good\x07"
    formatter = app_module._OneLineFormatter("%(name)s: %(message)s")
    record = logging.LogRecord("gapcheck.preprocess.pool", logging.WARNING, __file__, 1,
                               "stage cand killed its worker on %s", (evil,), None)
    line = formatter.format(record)
    assert "\n" not in line and "\x1b" not in line and "\r" not in line and "\x07" not in line, line
    assert line.startswith("gapcheck.preprocess.pool: stage cand killed its worker on imgs/evil")
    out = io.StringIO()
    print_findings(Console(file=out, width=400, color_system=None),
                   [Finding("golden_output_missing", Severity.GAP, f"output {evil!s} missing", where=evil)])
    printed = out.getvalue()
    assert printed.count("\n") == 1 and "\x1b" not in printed, printed

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

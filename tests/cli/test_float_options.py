"""Every float option of every command is finite and in range, or exit 2 before any work (issue 23 item 4): nan, inf,
-1 and 1e309 (which Python reads as inf) on the command line, in the environment and in a config file."""
from __future__ import annotations

import pytest

from gapcheck.cli.app import main
from tests.cli.commands import commands, is_float, options

BAD = ("nan", "inf", "-1", "1e309")


def _required(command, tmp_path) -> list[str]:
    """Values for the command's required options and arguments, so parsing gets as far as the float checks."""
    argv: list[str] = []
    for param in command.params:
        if not getattr(param, "required", False):
            continue
        opts = getattr(param, "opts", ())
        value = "a=x" if "--split" in opts else str(tmp_path / "nowhere")
        argv += [opts[0], value] if getattr(param, "param_type_name", "") == "option" else [value]
    return argv


def _cases():
    for path, command in commands():
        for flag, param in options(command).items():
            if is_float(param):
                yield pytest.param(path, command, flag, id=f"{' '.join(path)} {flag}")


@pytest.mark.parametrize(("path", "command", "flag"), list(_cases()))
def test_every_float_option_refuses_non_finite_and_negative_values(path, command, flag, tmp_path, capsys):
    base = [*path, *_required(command, tmp_path)]
    for value in BAD:
        code = main([*base, flag, value])
        err = capsys.readouterr().err
        assert code == 2, f"{' '.join(path)} {flag} {value}: exit {code}\n{err}"
        assert "must be" in err, err  # the group's one validator speaks, not a later failure
    assert not any(tmp_path.iterdir())  # nothing written


def test_there_are_float_options_to_check():
    flags = {flag for _, command in commands() for flag, param in options(command).items() if is_float(param)}
    assert {"--rtol", "--atol", "--triton-timeout", "--triton-deadline", "--lock-wait", "--near",
            "--p-threshold", "--min-effect"} <= flags


@pytest.mark.parametrize("item", ["x=nan,0", "x=0,inf", "x=-1,0", "x=0,1e309"])
def test_tolerance_overrides_refuse_them_too(item, capsys):
    assert main(["export-diff", "--model", "a:b", "--input", "x:1x2:float32", "--tolerance", item]) == 2
    assert "must be" in capsys.readouterr().err


@pytest.mark.parametrize(("variable", "argv"), [
    ("GAPCHECK_TRITON__TIMEOUT_S", ["triton-audit", "--onnx", "m.onnx", "--triton-url", "grpc://h:1/m"]),
    ("GAPCHECK_TRITON__DEADLINE_S", ["nightly", "--golden", "g", "--endpoint", "a=grpc://h:1/m"]),
    ("GAPCHECK_NIGHTLY__LOCK_WAIT_S", ["nightly", "--golden", "g", "--endpoint", "a=grpc://h:1/m"]),
    ("GAPCHECK_GOLDEN__RTOL", ["golden", "record", "--out", "o", "--model", "a:b", "--input", "x:1x2:float32"]),
    ("GAPCHECK_EXPORT_DIFF__ATOL", ["export-diff", "--model", "a:b", "--input", "x:1x2:float32"]),
    ("GAPCHECK_LEAKAGE__NEAR", ["leakage", "--split", "a=x", "--split", "b=y"]),
])
@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_from_the_environment_too(variable, argv, value, monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(variable, value)
    assert main(argv) == 2
    assert variable in capsys.readouterr().err  # refused as that variable's value, not for a later reason
    assert not any(tmp_path.iterdir())

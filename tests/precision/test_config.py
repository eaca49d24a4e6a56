"""``[precision]``: the precision options' defaults from gapcheck.toml (and GAPCHECK_PRECISION__*), flags over both,
bad values exit 2 with one line — the same resolution as every other group."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import gapcheck.precision.api as api
from gapcheck.cli.app import main

CNN = ["precision", "--model", "sample_models.cnn:build_small_resnet", "--input", "x:1x3x32x32:float32",
       "--num-samples", "2", "--no-cache", "--precision", "int8"]


@pytest.fixture
def requests(monkeypatch) -> list[Any]:
    """The request each run builds (the run itself is not the point here: the resolution is)."""
    seen: list[Any] = []

    def capture(request: Any, **_: Any) -> Any:
        seen.append(request)
        raise SystemExit(0)

    monkeypatch.setattr(api, "run_precision", capture)
    return seen


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gapcheck.toml"
    path.write_text(text)
    return path


def test_the_file_sets_the_defaults_and_flags_win(tmp_path: Path, requests: list[Any], monkeypatch):
    config = _config(tmp_path, '[precision]\ncalibration_method = "entropy"\nint8_mode = "dynamic"\n'
                               'targets = ["top1-agreement=0.98"]\nsensitivity = "alone"\nmax_runs = 2\n')
    with pytest.raises(SystemExit):
        main([*CNN, "--config", str(config)])
    request = requests[-1]
    assert (request.calibration_method, request.int8_mode, request.sensitivity, request.max_runs) == (
        "entropy", "dynamic", "alone", 2)
    assert [t.measure for t in request.targets] == ["top1-agreement"]
    monkeypatch.setenv("GAPCHECK_PRECISION__SENSITIVITY", "local")  # the environment over the file
    with pytest.raises(SystemExit):
        main([*CNN, "--config", str(config), "--calibration-method", "percentile"])  # a flag over both
    request = requests[-1]
    assert (request.calibration_method, request.sensitivity, request.int8_mode) == ("percentile", "local", "dynamic")


@pytest.mark.parametrize("table", ['max_runs = 0', 'max_runs = 11', 'sensitivity = "most"', 'calibration_method = 3',
                                   'targets = ["cosine=nan"]', 'fix = "out.onnx"', 'int8_mode = "static\\u001b[2J"'])
def test_bad_values_exit_2_with_one_line(tmp_path: Path, table: str, capsys, requests: list[Any]):
    config = _config(tmp_path, f"[precision]\n{table}\n")
    assert main([*CNN, "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "\x1b" not in err and err.strip()
    assert not requests


def test_int8_only_options_without_a_precision_name_int8(capsys):
    """--calibration without --precision asks for int8 (FP16 refuses calibration), --fix for fp16 or int8."""
    from gapcheck.cli.app import main

    base = ["export", "--model", "sample_models.cnn:build_small_resnet", "--input", "x:1x3x32x32:float32",
            "--repository", "unused-repo", "--name", "m"]
    assert main([*base, "--calibration", "calib/"]) == 2
    assert "--calibration needs --precision int8 (" in capsys.readouterr().err
    assert main(["export-diff", "--model", "sample_models.cnn:build_small_resnet", "--input", "x:1x3x32x32:float32",
                 "--fix", "out.onnx"]) == 2
    assert "--fix needs --precision fp16 or int8" in capsys.readouterr().err


def test_a_bad_target_from_the_config_file_names_the_file_key(tmp_path: Path, capsys):
    """Issue 20: `[precision] targets = ["cosine=nan"]` said "--target" without naming where the value came from."""
    config = _config(tmp_path, '[precision]\ntargets = ["cosine=nan"]\n')
    assert main([*CNN, "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "precision.targets in the config file" in err and "--target" not in err
    assert main([*CNN, "--target", "cosine=nan"]) == 2
    assert "--target expects" in capsys.readouterr().err  # the flag is still named as the flag

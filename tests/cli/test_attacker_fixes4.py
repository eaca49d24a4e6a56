"""Issue 23 attacker review, round 4: hostile command-line values refused with exit 2 before any work."""
from __future__ import annotations

import os

import pytest

from gapcheck.cli.app import main


@pytest.mark.parametrize("args", [
    ["export-diff", "--cache-dir", ""],
    ["cache", "info", "--cache-dir", ""],
    ["cache", "clear", "--cache-dir", " "],
    ["preprocess-audit", "--samples", ""],  # a command's own Path option, declared outside the groups
    ["nightly", "--history", ""],
])
def test_an_empty_path_flag_is_a_usage_error_not_the_current_folder(args, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / f"{'a' * 64}.onnx").write_bytes(b"mine")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "empty path" in err and "Traceback" not in err
    assert os.listdir(tmp_path) == [f"{'a' * 64}.onnx"]  # nothing written, nothing removed

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
    ["history", "--config", ""],  # the --config every declared command takes
])
def test_an_empty_path_flag_is_a_usage_error_not_the_current_folder(args, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / f"{'a' * 64}.onnx").write_bytes(b"mine")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "empty path" in err and "Traceback" not in err
    assert os.listdir(tmp_path) == [f"{'a' * 64}.onnx"]  # nothing written, nothing removed


@pytest.mark.parametrize("args", [
    ["history", "--last", "99999999999999999999"],  # was OverflowError in SQLite's LIMIT, exit 3
    ["export", "--version", "99999999999999999999"],  # was exit 0: a version folder Triton never loads
    ["export", "--version", str(2**63)],
])
def test_integers_beyond_what_the_backend_takes_are_usage_errors(args, tmp_path, monkeypatch, capsys):
    from gapcheck.nightly.history import History

    monkeypatch.chdir(tmp_path)
    history = tmp_path / "h" / "h.sqlite"
    history.parent.mkdir()
    with History(history):  # a real (empty) history: the bound is what refuses, not a missing file
        pass
    assert main([*args, *(["--history", str(history)] if args[0] == "history" else [])]) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert os.listdir(tmp_path) == ["h"]

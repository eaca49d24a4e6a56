"""A group's error is worded in the spelling the user typed, once (issue 18 review D7): ``--seed -1`` repeated the
flag on a second line "(see --seed)"; nightly's ``--header`` was worded as ``--triton-header``."""
from __future__ import annotations

import pytest

from gapcheck.cli.app import main


def test_seed_is_named_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export-diff", "--model", "x:y", "--input", "x:1:float32", "--seed", "-1"]) == 2
    err = capsys.readouterr().err
    assert "--seed must be in 0..2**32-1, got -1" in err and err.count("--seed") == 1


@pytest.mark.parametrize("typed, value, words", [
    ("--header", "a:b\r\nc", "--header #1: header 'a'"),
    ("--triton-header", "a:b\r\nc", "--triton-header #1: header 'a'"),
    ("--timeout", "nan", "--timeout must be a finite number"),
    ("--triton-deadline", "inf", "--triton-deadline must be a finite number"),
])
def test_nightly_words_the_error_as_typed(capsys: pytest.CaptureFixture[str], typed: str, value: str,
                                          words: str) -> None:
    assert main(["nightly", "--golden", "/nonexistent", typed, value]) == 2
    err = capsys.readouterr().err
    assert words in err and "\r" not in err
    if typed in ("--header", "--timeout"):
        assert f"--triton-{typed[2:]}" not in err

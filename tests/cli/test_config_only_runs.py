"""A bare ``gapcheck CMD`` runs when gapcheck.toml sets the command's section (``[text]``, ``[leakage]``,
``[nightly]``, ...), and shows the command's help when nothing is configured."""
from __future__ import annotations

from pathlib import Path

import pytest

from gapcheck.cli.app import main


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in [k for k in __import__("os").environ if k.startswith("GAPCHECK_")]:
        monkeypatch.delenv(name)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")  # stops the config lookup here
    return tmp_path


@pytest.mark.parametrize("command", ["preprocess-audit", "leakage", "drift", "nightly"])
def test_a_bare_command_without_config_shows_its_help(command, project, capsys):
    code = main([command])
    out = capsys.readouterr()
    assert code == 2 and f"Usage: gapcheck {command}" in out.out + out.err


def test_a_bare_command_with_its_section_runs_and_says_what_is_missing(project, capsys):
    (project / "gapcheck.toml").write_text("[leakage]\nnear = false\n")
    code = main(["leakage"])
    err = capsys.readouterr().err
    assert code == 2 and "--split" in err and "Run the same" not in err


def test_a_bare_command_with_a_broken_section_reports_it(project, capsys):
    (project / "gapcheck.toml").write_text("[nightly]\ncolour = 1\n")
    code = main(["nightly"])
    err = capsys.readouterr().err
    assert code == 2 and "colour" in err


def test_preprocess_audit_from_preprocess_section_names_what_is_missing(project, capsys):
    (project / "gapcheck.toml").write_text("[preprocess]\nn = 3\n")
    code = main(["preprocess-audit"])
    err = capsys.readouterr().err
    assert code == 2 and "no samples" in err

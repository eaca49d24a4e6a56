"""Issue 23: `gapcheck lint`'s --output (and its report files) never replace a linted file, land in a linted folder
or replace the config: refused before linting (exit 2), the file byte for byte."""
from __future__ import annotations

import json

import pytest

from gapcheck.cli.app import main

NOTEBOOK = json.dumps({"cells": [{"cell_type": "code", "source": ["import torch\n"], "metadata": {}, "outputs": [],
                                  "execution_count": None}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


@pytest.mark.parametrize("flag", ["--output", "-o", "--json", "--sarif"])
def test_lint_report_over_the_linted_notebook(flag, tmp_path, capsys):
    victim = tmp_path / "victim.ipynb"
    victim.write_text(NOTEBOOK)
    before = victim.read_bytes()
    assert main(["lint", str(victim), "--format", "json", flag, str(victim)]) == 2
    assert "is also the linted path" in capsys.readouterr().err
    assert victim.read_bytes() == before


def test_lint_output_inside_a_linted_folder_and_over_the_config(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    train = src / "train.py"
    train.write_text("import torch\n")
    assert main(["lint", str(src), "--output", str(src / "train.py")]) == 2
    assert "is also the linted path" in capsys.readouterr().err
    config = tmp_path / "gapcheck.toml"
    config.write_text("[lint]\n")
    assert main(["lint", str(train), "--config", str(config), "--output", str(config)]) == 2
    assert "is also --config" in capsys.readouterr().err
    assert config.read_text() == "[lint]\n" and train.read_text() == "import torch\n"


def test_lint_output_and_a_report_on_one_file_are_refused(tmp_path, capsys):
    train = tmp_path / "train.py"
    train.write_text("import torch\n")
    out = tmp_path / "out.json"
    assert main(["lint", str(train), "--output", str(out), "--json", str(out)]) == 2
    assert "is also --output" in capsys.readouterr().err


def test_lint_output_beside_the_linted_file_or_in_the_linted_folder_is_written(tmp_path, capsys):
    train = tmp_path / "train.py"
    train.write_text("import torch\n")
    out = tmp_path / "report.json"
    assert main(["lint", str(train), "--format", "json", "--output", str(out)]) == 0
    assert json.loads(out.read_text())["verdict"] == "pass"
    assert main(["lint", str(tmp_path), "--format", "json", "--output", str(tmp_path / "out" / "r.json")]) == 0
    assert (tmp_path / "out" / "r.json").is_file()

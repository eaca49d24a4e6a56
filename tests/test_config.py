"""gapcheck.toml / [tool.gapcheck] loading and its error messages."""
from __future__ import annotations

import pytest

from gapcheck.config import find_config, load_config
from gapcheck.errors import ConfigError


def test_no_config_is_fine(tmp_path):
    assert load_config(start=tmp_path).source is None or load_config(start=tmp_path).source != tmp_path / "gapcheck.toml"


def test_pyproject_tool_table_and_relative_paths(tmp_path):
    (tmp_path / "pyproject.toml").write_text("""
[tool.gapcheck.preprocess]
samples = "imgs"
n = 8
p_threshold = 0.05
[tool.gapcheck.preprocess.stages.infer]
callable = "stages.py:infer"
augmented = false
[tool.gapcheck.other]
anything = 1
""")
    assert find_config(tmp_path) == tmp_path / "pyproject.toml"
    cfg = load_config(start=tmp_path)
    assert cfg.preprocess.n == 8 and cfg.preprocess.p_threshold == 0.05
    assert cfg.preprocess.samples == str(tmp_path / "imgs")
    assert cfg.preprocess.stages[0].target == f"{tmp_path / 'stages.py'}:infer"
    assert cfg.sections["other"] == {"anything": 1}


@pytest.mark.parametrize(
    "text, message",
    [
        ("[preprocess\n", "invalid TOML"),
        ("[preprocess]\nnn = 3\n", "unknown key(s) in [preprocess]: nn"),
        ("[preprocess]\nn = '3'\n", "preprocess.n must be int"),
        ("[preprocess]\nworkers = true\n", "preprocess.workers must be int"),
        ("[preprocess.stages.a]\naugmented = true\n", "exactly one of 'callable' or 'steps'"),
        ("[preprocess.stages.a]\ncallable = 'x:y'\ncolour = 1\n", "unknown key(s) in [preprocess.stages.a]: colour"),
        ("[preprocess.stages.a]\nsteps = [{op = 'decode'}, {op = 'resize', size = 3, backend = 'gpu'}]\n", "unknown resize backend"),
        ("[preprocess.stages.a]\nsteps = [{op = 'resize', size = 3}]\n", "first step must be"),
        ("[preprocess.stages.a]\nsteps = [{op = 'decode'}, {op = 'blur'}]\n", "unknown op 'blur'"),
    ],
)
def test_errors_name_the_file_and_key(tmp_path, text, message):
    path = tmp_path / "gapcheck.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert message in str(info.value) and str(path) in str(info.value)


def test_explicit_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml")

"""[preprocess] in gapcheck.toml: a wrong key in a stage table is refused beside the keys that are valid there."""
from __future__ import annotations

import pytest

from gapcheck.config import load_config
from gapcheck.errors import ConfigError


@pytest.mark.parametrize("text, table, valid", [
    # a new user's guess (review D: "target" for "callable") said only "unknown key(s): target"
    ("[preprocess.stages.x]\ntarget = 'pipes.py:pre'\n", "preprocess.stages.x", "callable, steps, augmented, accepts"),
    ("[preprocess]\nnn = 3\n", "preprocess", "samples, n, p_threshold"),
])
def test_an_unknown_key_lists_the_valid_keys_of_its_table(tmp_path, text, table, valid):
    path = tmp_path / "gapcheck.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    said = str(info.value)
    assert f"{path}: unknown key(s) in [{table}]: " in said and f"(valid keys: {valid}" in said

"""leakage's and drift's own options resolve through their groups (LeakageSpec, DriftSpec) like every other group:
[leakage]/[drift] in the file < GAPCHECK_LEAKAGE__*/GAPCHECK_DRIFT__* < flags, one validation (issue 18)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from gapcheck.cli.app import main
from gapcheck.errors import UsageError
from gapcheck.groups.data import DriftSpec, LeakageSpec


@pytest.fixture
def tables(tmp_path):
    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        pd.DataFrame({"x": rng.normal(size=200), "g": rng.integers(0, 20, 200), "y": rng.integers(0, 2, 200)}).to_csv(
            tmp_path / f"{name}.csv", index=False)
    return tmp_path


def _options(args, tmp_path) -> dict:
    report = tmp_path / "r.json"
    assert main([*args, "--engine", "serial", "--json", str(report)]) in (0, 1)
    return json.loads(report.read_text())["options"]


def test_file_environment_flags_for_leakage_and_drift(tables, monkeypatch):
    config = tables / "gapcheck.toml"
    config.write_text("[leakage]\nnear = 0.8\ngroup_column = \"g\"\n[drift]\np_threshold = 0.05\nmin_effect = 0.2\n")
    leak = ["leakage", "--split", f"a={tables / 'a.csv'}", "--split", f"b={tables / 'b.csv'}", "--config", str(config)]
    drift = ["drift", "--reference", str(tables / "a.csv"), "--current", str(tables / "b.csv"), "--config", str(config)]
    assert _options(leak, tables)["near"] == 0.8 and _options(leak, tables)["group_column"] == "g"
    assert (_options(drift, tables)["p_threshold"], _options(drift, tables)["min_effect"]) == (0.05, 0.2)
    monkeypatch.setenv("GAPCHECK_LEAKAGE__NEAR", "0.7")
    monkeypatch.setenv("GAPCHECK_DRIFT__P_THRESHOLD", "0.02")
    assert _options(leak, tables)["near"] == 0.7 and _options(drift, tables)["p_threshold"] == 0.02
    assert _options([*leak, "--near", "0.95"], tables)["near"] == 0.95
    assert _options([*drift, "--p-threshold", "0.001"], tables)["p_threshold"] == 0.001
    assert _options([*drift, "--p-threshold", "0.001"], tables)["min_effect"] == 0.2  # the file still fills the rest


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "1e309", "1.5"])
def test_every_float_refused_the_same_way(value, tables, capsys):
    leak = ["leakage", "--split", f"a={tables / 'a.csv'}", "--split", f"b={tables / 'b.csv'}", "--near", value]
    assert main(leak) == 2
    drift = ["drift", "--reference", str(tables / "a.csv"), "--current", str(tables / "b.csv"), "--p-threshold", value]
    assert main(drift) == 2
    assert "Traceback" not in capsys.readouterr().err
    config = tables / "gapcheck.toml"
    config.write_text(f"[leakage]\nnear = {value}\n")
    assert main([*leak[:5], "--config", str(config)]) == 2


def test_the_groups_build_the_library_options_with_its_defaults():
    from gapcheck.data.drift import DriftOptions
    from gapcheck.data.leakage import LeakageOptions

    # the library builds from the group (a group never imports the library above it: tests/test_layers.py)
    assert LeakageOptions.from_spec(LeakageSpec()) == LeakageOptions()
    assert DriftOptions.from_spec(DriftSpec()) == DriftOptions()
    built = LeakageOptions.from_spec(LeakageSpec(key=("a,b", "c"), within_split=("val",), within=True))
    assert built.key_columns == ("a", "b", "c") and built.within == ("val",)
    assert DriftOptions.from_spec(DriftSpec(columns=("x, y",), fail_underpowered=True)).columns == ("x", "y")
    with pytest.raises(UsageError):
        DriftSpec(p_threshold=1.0)
    with pytest.raises(UsageError):
        LeakageSpec(near=float("nan"))


def test_within_split_beats_a_configured_within_and_conflicts_with_the_flag(tables):
    config = tables / "gapcheck.toml"
    config.write_text("[leakage]\nwithin = false\n")
    leak = ["leakage", "--split", f"a={tables / 'a.csv'}", "--split", f"b={tables / 'b.csv'}", "--config", str(config)]
    assert _options([*leak, "--within-split", "b"], tables)["within"] == ["b"]
    assert main([*leak, "--within-split", "b", "--within"]) == 2

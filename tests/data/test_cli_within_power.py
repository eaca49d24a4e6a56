"""The CLI and config wiring of issue 22's options: `leakage --within/--no-within/--within-split`, `[leakage] within`,
`drift --fail-underpowered`, `[drift] fail_underpowered`, and the JSON fields they add (validated against the schemas)."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pytest

from gapcheck.cli.app import main

SCHEMAS = Path(__file__).parents[2] / "gapcheck" / "schemas"


def _valid(report: Path, command: str) -> dict:
    document = json.loads(report.read_text())
    jsonschema.validate(document, json.loads((SCHEMAS / f"{command}.schema.json").read_text()))
    return document


@pytest.fixture
def splits(tmp_path) -> list[str]:
    """train and val tables with one row repeated inside val and no row shared across the splits."""
    rng = np.random.default_rng(0)
    train = pd.DataFrame({"a": rng.normal(size=30), "b": rng.integers(0, 1000, 30), "y": rng.integers(0, 2, 30)})
    val = pd.DataFrame({"a": rng.normal(size=6) + 50, "b": rng.integers(2000, 3000, 6), "y": rng.integers(0, 2, 6)})
    val = pd.concat([val, val.iloc[[2]]], ignore_index=True)
    train.to_csv(tmp_path / "train.csv", index=False)
    val.to_csv(tmp_path / "val.csv", index=False)
    return ["--split", f"train={tmp_path / 'train.csv'}", "--split", f"val={tmp_path / 'val.csv'}", "--engine", "serial"]


def _leakage(splits, tmp_path, *flags) -> tuple[int, dict]:
    report = tmp_path / "leak.json"
    code = main(["leakage", *splits, *flags, "--json", str(report)])
    return code, _valid(report, "leakage")


def _codes(document) -> list[str]:
    return sorted(f["code"] for f in document["findings"])


def test_within_on_by_split_name_and_off_by_flag(splits, tmp_path):
    code, default = _leakage(splits, tmp_path)
    assert code == 1 and _codes(default) == ["duplicate_within_split"]
    assert default["options"]["within"] is None
    assert [(p["split"], p["other_split"]) for p in default["pairs"]] == [("val", "val")]
    code, off = _leakage(splits, tmp_path, "--no-within")
    assert code == 0 and off["findings"] == [] and off["options"]["within"] is False


def test_within_split_names_and_config(splits, tmp_path, monkeypatch):
    code, train_only = _leakage(splits, tmp_path, "--within-split", "train")
    assert code == 0 and train_only["options"]["within"] == ["train"]
    code, val_only = _leakage(splits, tmp_path, "--within-split", "val", "--within-split", "train")
    assert code == 1 and val_only["options"]["within"] == ["val", "train"]
    config = tmp_path / "gapcheck.toml"
    config.write_text("[leakage]\nwithin = false\n")
    code, from_file = _leakage(splits, tmp_path, "--config", str(config))
    assert code == 0 and from_file["options"]["within"] is False
    code, flag_wins = _leakage(splits, tmp_path, "--config", str(config), "--within")
    assert code == 1 and flag_wins["options"]["within"] is True
    config.write_text('[leakage]\nwithin = ["val"]\n')
    code, listed = _leakage(splits, tmp_path, "--config", str(config))
    assert code == 1 and listed["options"]["within"] == ["val"]
    assert main(["leakage", *splits, "--within", "--within-split", "val"]) == 2


def _tables(tmp_path, rows: int) -> list[str]:
    """Reference and current drawn from one distribution: no drift, so only the power can make a gap."""
    rng = np.random.default_rng(1)
    for name in ("ref", "cur"):
        pd.DataFrame({"x": rng.normal(size=rows), "c": rng.choice(["a", "b", "c"], rows)}).to_parquet(
            tmp_path / f"{name}_{rows}.parquet")
    return ["--reference", str(tmp_path / f"ref_{rows}.parquet"), "--current", str(tmp_path / f"cur_{rows}.parquet"),
            "--engine", "serial"]


def test_fail_underpowered_on_a_20_row_split(tmp_path):
    small = _tables(tmp_path, 20)
    report = tmp_path / "drift.json"
    assert main(["drift", *small, "--json", str(report)]) == 0
    document = _valid(report, "drift")
    assert document["options"]["fail_underpowered"] is False
    assert all(f["underpowered"] and f["min_detectable_effect"] > document["options"]["min_effect"]
               for f in document["features"])
    assert _codes(document) == ["drift_underpowered"] * 3  # one per test (ks for x, chi2 for c, nulls for both)
    assert main(["drift", *small, "--fail-underpowered", "--json", str(report)]) == 1
    document = _valid(report, "drift")
    assert document["options"]["fail_underpowered"] is True and document["verdict"] == "gap"
    config = tmp_path / "gapcheck.toml"
    config.write_text("[drift]\nfail_underpowered = true\n")
    assert main(["drift", *small, "--config", str(config)]) == 1


def test_powered_split_passes_with_fail_underpowered(tmp_path):
    report = tmp_path / "drift.json"
    assert main(["drift", *_tables(tmp_path, 5_000), "--fail-underpowered", "--json", str(report)]) == 0
    document = _valid(report, "drift")
    assert not any(f["underpowered"] for f in document["features"]) and document["findings"] == []
    assert all(0 < f["min_detectable_effect"] < document["options"]["min_effect"] for f in document["features"])

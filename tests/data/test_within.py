"""Duplicates within a split (validation/test splits by default), reported apart from leakage across splits:
on scikit-image photos and on scikit-learn's iris, whose rows 101 and 142 are identical."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from sklearn import datasets

from gapcheck.data.api import leakage
from gapcheck.data.leakage import LeakageOptions, checks_within
from gapcheck.engines import open_engine
from tests.data.conftest import TRAIN, VAL, validate
from tests.data.photos import jpeg_reencode, photo, resized, save


@pytest.fixture(scope="module")
def serial():
    with open_engine("serial") as engine:
        yield engine


def _codes(result) -> list[str]:
    return sorted(f.code for f in result.findings)


def test_split_names_checked_by_default():
    assert [checks_within(None, s) for s in ("val", "validation", "test_2024", "leaky-val", "holdout", "dev")] == [True] * 6
    assert [checks_within(None, s) for s in ("train", "training", "broken", "evaluator", "contest")] == [False] * 5
    assert checks_within(True, "train") and not checks_within(False, "val")
    assert checks_within(("train",), "train") and not checks_within(("train",), "val")


def _iris_tables(tmp_path, val_rows):
    frame = datasets.load_iris(as_frame=True).frame
    val = frame.loc[val_rows]
    train = frame.drop(index=val_rows)
    train.to_parquet(tmp_path / "train.parquet")
    val.to_csv(tmp_path / "val.csv", index=False)
    return [f"train={tmp_path / 'train.parquet'}", f"val={tmp_path / 'val.csv'}"]


def test_iris_duplicate_rows_on_one_side_are_within_the_split(tmp_path, serial):
    splits = _iris_tables(tmp_path, [10, 60, 101, 120, 142])  # rows 101 and 142 are the same flower measurements
    result = leakage(splits, LeakageOptions(label_column="target"), engine=serial)
    document = validate(result)
    assert _codes(result) == ["duplicate_within_split"]
    within = result.findings[0]
    # the CSV's file lines (header = line 1): data rows 4 and 2 are lines 6 and 4; the path is the file's own
    assert (Path(within.subject.path).name, within.subject.line, within.subject.other) == ("val.csv", 6, "val.csv:4")
    assert "within val" in within.message and within.evidence["splits"] == ["val", "val"]
    assert document["pair_counts"] == {"exact": 0, "near": 0}  # nothing across the splits
    assert [(p["split"], p["other_split"]) for p in document["pairs"]] == [("val", "val")]
    assert "within splits" in result.headline
    off = leakage(splits, LeakageOptions(label_column="target", within=False), engine=serial)
    assert off.findings == ()


def test_iris_duplicate_rows_on_both_sides_are_leakage_not_within(tmp_path, serial):
    splits = _iris_tables(tmp_path, [10, 60, 142])
    result = leakage(splits, LeakageOptions(label_column="target"), engine=serial)
    assert _codes(result) == ["exact_duplicate"]
    subject = result.findings[0].subject
    assert (Path(subject.path).name, subject.line, subject.other) == ("val.csv", 4, "train.parquet row 99")


def test_iris_training_split_only_when_asked(tmp_path, serial):
    splits = _iris_tables(tmp_path, [10, 60])  # both copies in train
    assert leakage(splits, LeakageOptions(label_column="target"), engine=serial).findings == ()
    everywhere = leakage(splits, LeakageOptions(label_column="target", within=True), engine=serial)
    assert _codes(everywhere) == ["duplicate_within_split"]
    named = leakage(splits, LeakageOptions(label_column="target", within=("train",)), engine=serial)
    assert [f.evidence["splits"] for f in named.findings] == [["train", "train"]]


@pytest.fixture(scope="module")
def photo_folders(tmp_path_factory):
    """val: 8 distinct photos + a byte copy of one of them + a JPEG re-encode and a 90% resize of two others;
    train: 10 other photos + a byte copy of one of them (a duplicate inside train only)."""
    root = tmp_path_factory.mktemp("within")
    for name in TRAIN:
        save(photo(name), root / "train" / f"{name}.png")
    shutil.copy(root / "train" / "camera.png", root / "train" / "camera_again.png")
    for name in VAL:
        save(photo(name), root / "val" / f"{name}.png")
    shutil.copy(root / "val" / "clock.png", root / "val" / "clock_copy.png")
    save(jpeg_reencode(photo("coins")), root / "val" / "coins_reencoded.jpg", fmt="JPEG", quality=95)
    save(resized(photo("brick"), 0.9), root / "val" / "brick_90.png")
    return root


def test_photos_within_validation_by_default(photo_folders, serial):
    result = leakage([f"train={photo_folders / 'train'}", f"val={photo_folders / 'val'}"], engine=serial)
    validate(result)
    exact = [tuple(f.evidence["items"]) for f in result.findings if f.code == "duplicate_within_split"]
    near = {frozenset(f.evidence["items"]) for f in result.findings if f.code == "near_duplicate_within_split"}
    assert exact == [("val:clock_copy.png", "val:clock.png")]
    assert near == {frozenset(("val:coins_reencoded.jpg", "val:coins.png")),
                    frozenset(("val:brick_90.png", "val:brick.png"))}
    assert not any(f.code in ("exact_duplicate", "near_duplicate") for f in result.findings)


def test_photos_within_every_split_when_asked(photo_folders, serial):
    result = leakage([f"train={photo_folders / 'train'}", f"val={photo_folders / 'val'}"],
                     LeakageOptions(within=True), engine=serial)
    exact = {tuple(f.evidence["items"]) for f in result.findings if f.code == "duplicate_within_split"}
    assert exact == {("val:clock_copy.png", "val:clock.png"), ("train:camera_again.png", "train:camera.png")}


def test_within_option_from_a_config_list():
    from gapcheck.errors import UsageError

    assert LeakageOptions(within=["val"]).within == ("val",)  # type: ignore[arg-type]
    assert LeakageOptions(within="val").within == ("val",)  # type: ignore[arg-type]
    assert not checks_within(LeakageOptions(within="validation").within, "val")  # a name, not a substring
    for bad in (3, ("val", 2), ("",), {"val": 1}):
        with pytest.raises(UsageError, match="within"):
            LeakageOptions(within=bad)  # type: ignore[arg-type]
    with pytest.raises(Exception, match="near"):
        LeakageOptions(near=float("nan"))


def test_label_conflict_within_is_reported_once(tmp_path, serial):
    frame = pd.DataFrame({"x": [1.0, 1.0, 2.0, 3.0], "y": [0, 1, 0, 1]})
    frame.to_csv(tmp_path / "val.csv", index=False)
    pd.DataFrame({"x": [5.0, 6.0], "y": [0, 1]}).to_csv(tmp_path / "train.csv", index=False)
    result = leakage([f"train={tmp_path / 'train.csv'}", f"val={tmp_path / 'val.csv'}"],
                     LeakageOptions(label_column="y"), engine=serial)
    assert _codes(result) == ["duplicate_within_split", "label_conflict"]


def test_within_split_naming_no_split_is_a_usage_error(tmp_path, capsys):
    """New-user review: ``--within-split nosuch`` passed (exit 0) with no within search at all."""
    from gapcheck.cli.app import main

    for name in ("train", "val"):
        pd.DataFrame({"a": [1.0, 2.0, 2.0], "b": [3.0, 4.0, 4.0]}).to_csv(tmp_path / f"{name}.csv", index=False)
    splits = ["--split", f"train={tmp_path / 'train.csv'}", "--split", f"val={tmp_path / 'val.csv'}"]
    assert main(["leakage", *splits, "--within-split", "nosuch", "--engine", "serial"]) == 2
    assert "nosuch" in capsys.readouterr().err
    assert main(["leakage", *splits, "--within-split", "train", "--engine", "serial"]) == 1
    out = capsys.readouterr().out
    assert "within train" in out and "within val" not in out

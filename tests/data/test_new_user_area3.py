"""A new user's review on real photos (scikit-image) and real tables (scikit-learn), area 3.

- D4: leakage of a photo folder against a CSV passed with exit 0 (nothing was compared); drift refused it. Both
  refuse mixed kinds now (exit 2), in any order and with three splits.
- D10: image findings named ``val:upload_001.jpg`` as their path, so SARIF pointed at ``val%3Aupload_001.jpg``;
  the subject is now the file (the item names stay in the evidence, the splits in the message).
- D11: phone-style copies stored portrait with EXIF orientation 6 drifted in width/height/aspect_ratio, and a
  constant reference's aspect ratio was scaled by its rounding (std 5.8e-08: "Wasserstein=16790224 reference std").
- Counts: a drift headline counted the identifier as a feature, the missing-values note listed it; leakage with
  --key said (and recorded) the common columns though rows were matched on the key columns.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image
from sklearn import datasets

from gapcheck.cli.app import main
from gapcheck.data.api import drift, leakage
from gapcheck.data.drift import DriftOptions
from gapcheck.data.leakage import LeakageOptions
from gapcheck.engines import open_engine
from tests.data.conftest import validate
from tests.data.photos import PHOTOS, photo, save

ORIENTATION = 0x0112


@pytest.fixture(scope="module")
def serial():
    with open_engine("serial") as engine:
        yield engine


@pytest.fixture(scope="module")
def cancer():
    return datasets.load_breast_cancer(as_frame=True).frame


def test_leakage_refuses_images_against_a_table_like_drift(photo_splits, cancer, tmp_path, capsys):
    table = tmp_path / "bc_val.csv"
    cancer.iloc[:60].to_csv(table, index=False)
    images = photo_splits["train"]
    for splits in ([f"train={images}", f"val={table}"], [f"val={table}", f"train={images}"],
                   [f"train={images}", f"val={table}", f"test={photo_splits['clean_val']}"]):
        args = [a for split in splits for a in ("--split", split)]
        assert main(["leakage", *args, "--engine", "serial"]) == 2
        err = capsys.readouterr().err
        assert "cannot compare" in err and "images" in err and "table" in err
    assert main(["drift", "--reference", str(images), "--current", str(table), "--engine", "serial"]) == 2
    assert "cannot compare images with table" in capsys.readouterr().err


def test_image_findings_point_at_the_files(photo_splits, tmp_path, monkeypatch):
    root = photo_splits["train"].parent
    monkeypatch.chdir(root)  # paths under the working folder: SARIF's %SRCROOT%
    sarif, report = tmp_path / "r.sarif", tmp_path / "r.json"
    assert main(["leakage", "--split", "train=train", "--split", "val=leaky_val", "--engine", "serial",
                 "--sarif", str(sarif), "--json", str(report)]) == 1
    results = json.loads(sarif.read_text())["runs"][0]["results"]
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results if "locations" in r}
    assert "leaky_val/astronaut_copy.png" in uris and "leaky_val/chelsea_90.png" in uris
    assert not any(":" in uri for uri in uris)
    findings = json.loads(report.read_text())["findings"]
    copy = next(f for f in findings if f["code"] == "exact_duplicate" and "astronaut" in f["subject"]["path"])
    assert copy["subject"] == {"path": "leaky_val/astronaut_copy.png", "other": "train/astronaut.png"}
    assert copy["evidence"]["items"] == ["val:astronaut_copy.png", "train:astronaut.png"]
    assert "val" in copy["message"] and "train" in copy["message"] and copy["evidence"]["splits"] == ["val", "train"]


def _sideways(image: Image.Image, path):
    """Stored portrait, shown landscape: the pixels turned 90° with EXIF orientation 6 (a phone's way)."""
    exif = Image.Exif()
    exif[ORIENTATION] = 6
    return save(image.transpose(Image.Transpose.ROTATE_90), path, fmt="JPEG", quality=95, exif=exif.tobytes())


def _crop(name: str) -> Image.Image:
    return photo(name, side=400).resize((160, 100))  # one landscape size: a constant reference width/height/aspect


def test_exif_rotated_copies_measured_as_displayed_and_said(tmp_path, serial):
    for name in PHOTOS[:9]:
        save(_crop(name), tmp_path / "ref" / f"{name}.jpg", fmt="JPEG", quality=95)
    for name in PHOTOS[9:]:
        _sideways(_crop(name), tmp_path / "cur" / f"{name}.jpg")
    result = drift(str(tmp_path / "ref"), str(tmp_path / "cur"), DriftOptions(p_threshold=0.05), engine=serial)
    validate(result)
    assert not {f.feature for f in result.features if f.drift} & {"width", "height", "aspect_ratio"}
    said = [f for f in result.findings if f.code == "exif_orientation_differs"]
    assert len(said) == 1 and said[0].severity.value == "warning"
    assert said[0].evidence["turned"] == {"reference": 0, "current": 9}
    assert said[0].evidence["orientation_tags"]["current"] == {"6": 9} and "EXIF" in said[0].message
    # image properties are never missing: no missing-values power note about them
    assert not [f for f in result.findings if f.evidence.get("test") == "null_rate"]
    width = next(f for f in result.features if f.feature == "width")
    assert width.mean_current == 160 and width.std_reference == 0


def test_a_constant_reference_is_never_a_scale(tmp_path, serial):
    for name in PHOTOS[:9]:
        save(_crop(name), tmp_path / "ref" / f"{name}.png")
    for name in PHOTOS[9:]:  # stored portrait without a tag: really a different shape
        save(_crop(name).transpose(Image.Transpose.ROTATE_90), tmp_path / "cur" / f"{name}.png")
    result = drift(str(tmp_path / "ref"), str(tmp_path / "cur"), DriftOptions(p_threshold=0.05), engine=serial)
    validate(result)
    aspect = next(f for f in result.features if f.feature == "aspect_ratio")
    assert aspect.drift and aspect.std_reference == 0 and aspect.wasserstein_std is None
    message = next(f.message for f in result.findings if f.code == "drift" and f.subject.output == "aspect_ratio")
    assert "constant in the reference: 1.6, current: 0.625" in message and "reference std" not in message
    assert not [f for f in result.findings if f.code == "exif_orientation_differs"]


def _with_id(frame: pd.DataFrame, start: int) -> pd.DataFrame:
    return frame.assign(sample_id=range(start, start + len(frame)))[["sample_id", *frame.columns]]


def test_identifier_is_not_counted_or_listed_as_a_feature(cancer, tmp_path, serial):
    train, val = _with_id(cancer.iloc[:60], 1000), _with_id(cancer.iloc[60:90], 2000).copy()
    train.to_csv(tmp_path / "train.csv", index=False)
    val["mean radius"] = val["mean radius"] * 3  # one real shift
    val.to_csv(tmp_path / "val.csv", index=False)
    result = drift(str(tmp_path / "train.csv"), str(tmp_path / "val.csv"), engine=serial)
    validate(result)
    features = len(cancer.columns)  # 30 measurements and target; sample_id left out
    assert result.headline.startswith(f"1 of {features} feature(s) drifted: mean radius")
    assert "1 identifier column(s) left out" in result.headline
    for finding in result.findings:
        if finding.code == "drift_underpowered":
            assert "sample_id" not in finding.message
            assert "sample_id" not in finding.evidence["min_detectable_effect"]
    val["mean radius"] = val["mean radius"] / 3
    val.to_csv(tmp_path / "val.csv", index=False)
    clean = drift(str(tmp_path / "train.csv"), str(tmp_path / "val.csv"), engine=serial)
    assert clean.headline.startswith(f"no drift in {features} feature(s); 1 identifier column(s) left out")


def test_leakage_with_key_says_and_records_the_key_columns(cancer, tmp_path, serial, capsys):
    train, val = _with_id(cancer.iloc[:100], 0), _with_id(cancer.iloc[100:150], 100)
    val = pd.concat([val, train.iloc[:2].assign(sample_id=[900, 901])])  # copies renumbered in val
    val["extra"] = 1.0  # a column only val holds: not what --key compares
    train.to_csv(tmp_path / "train.csv", index=False)
    val.to_csv(tmp_path / "val.csv", index=False)
    key = ["mean radius", "mean texture", "mean perimeter", "mean area"]
    result = leakage([f"train={tmp_path / 'train.csv'}", f"val={tmp_path / 'val.csv'}"],
                     LeakageOptions(label_column="target", key_columns=tuple(key)), engine=serial)
    document = validate(result)
    assert document["compared_columns"] == key and len(result.exact) == 2
    assert not [f for f in result.findings if f.code == "columns_differ"]
    report = tmp_path / "r.json"
    assert main(["leakage", "--split", f"train={tmp_path / 'train.csv'}", "--split", f"val={tmp_path / 'val.csv'}",
                 "--key", ",".join(key), "--label-column", "target", "--engine", "serial", "--json", str(report)]) == 1
    out = capsys.readouterr().out
    assert f"table rows compared on the key column(s): {', '.join(key)}" in " ".join(out.split())
    assert json.loads(report.read_text())["compared_columns"] == key


def test_remote_images_keep_their_url_and_dataset_samples_their_name(photo_splits, serial, monkeypatch):
    import fsspec

    from gapcheck.report.formats import ReportFormat, render

    memory = fsspec.filesystem("memory")
    memory.pipe("/area3/astronaut_copy.png", (photo_splits["train"] / "astronaut.png").read_bytes())
    result = leakage([f"train={photo_splits['train']}", "val=memory://area3"], engine=serial)
    finding = next(f for f in result.findings if f.code == "exact_duplicate")
    assert finding.subject.path == "memory://area3/astronaut_copy.png"
    sarif = json.loads(render(ReportFormat.SARIF, result))["runs"][0]["results"][0]
    assert sarif["locations"][0]["physicalLocation"]["artifactLocation"] == {
        "uri": "memory://area3/astronaut_copy.png"}  # a URL as it is, not "memory%3A/..." under %SRCROOT%
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    samples = leakage([f"train={photo_splits['train']}", "val=dataset_fixture:val_dataset"], engine=serial)
    assert [f.subject.path for f in samples.findings if f.code == "exact_duplicate"] == ["val:0"]


def test_time_ordered_split_is_said_not_called_drift_and_hides_nothing(tmp_path, serial):
    """A time column of a split by time has KS D = 1 by construction: a warning naming it, out of the verdict. A
    column named for an amount of time with the same disjoint ranges, and a real shift elsewhere, still drift."""
    table = datasets.load_diabetes(as_frame=True).frame
    table["timestamp"] = 1_704_067 + 4 * pd.RangeIndex(len(table))  # seconds / 1000, increasing with the rows
    table["created_at"] = pd.date_range("2024-01-01", periods=len(table), freq="h")  # parquet datetime
    past, recent = table.iloc[:330], table.iloc[330:].copy()
    past.to_parquet(tmp_path / "past.parquet")
    recent.to_parquet(tmp_path / "recent.parquet")
    clean = drift(str(tmp_path / "past.parquet"), str(tmp_path / "recent.parquet"), engine=serial)
    validate(clean)
    said = {f.subject.output: f for f in clean.findings if f.code == "time_ordered_split"}
    assert set(said) == {"timestamp", "created_at"} and not any(f.is_gap for f in clean.findings)
    assert said["timestamp"].severity.value == "warning" and "after every reference value" in said["timestamp"].message
    assert "time-ordered split by timestamp, created_at" in clean.headline
    assert clean.headline.startswith(f"no drift in {len(table.columns) - 2} feature(s)")
    recent["session_time_seconds"] = recent["timestamp"]  # an amount of time that moved: real drift
    recent["bmi"] = recent["bmi"] + 0.05
    (tmp_path / "recent.parquet").unlink()
    recent.to_parquet(tmp_path / "recent.parquet")
    past.assign(session_time_seconds=past["timestamp"]).to_parquet(tmp_path / "past.parquet")
    shifted = drift(str(tmp_path / "past.parquet"), str(tmp_path / "recent.parquet"), engine=serial)
    assert {f.feature for f in shifted.features if f.drift} == {"bmi", "session_time_seconds"}
    assert {f.subject.output for f in shifted.findings if f.code == "time_ordered_split"} == {"timestamp", "created_at"}

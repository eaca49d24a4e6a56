from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.data.photos import PHOTOS, cropped, jpeg_reencode, photo, resized, save

TRAIN = PHOTOS[:10]
VAL = PHOTOS[10:]


@pytest.fixture(scope="session")
def photo_splits(tmp_path_factory) -> dict[str, Path]:
    """train: 10 photos (PNG); clean_val: 8 other photos; leaky_val: the clean ones plus planted copies of train."""
    root = tmp_path_factory.mktemp("photos")
    for name in TRAIN:
        save(photo(name), root / "train" / f"{name}.png")
    for name in VAL:
        save(photo(name), root / "clean_val" / f"{name}.png")
    leaky = root / "leaky_val"
    shutil.copytree(root / "clean_val", leaky)
    shutil.copy(root / "train" / "astronaut.png", leaky / "astronaut_copy.png")  # byte-identical
    save(photo("camera"), leaky / "camera_resaved.png", compress_level=1)  # other bytes, same pixels
    save(jpeg_reencode(photo("coffee")), leaky / "coffee_reencoded.jpg", fmt="JPEG", quality=95)
    save(resized(photo("chelsea"), 0.9), leaky / "chelsea_90.png")
    save(resized(photo("rocket"), 1.1), leaky / "rocket_110.png")
    save(cropped(photo("hubble_deep_field"), 2), leaky / "hubble_cropped.png")
    return {"train": root / "train", "clean_val": root / "clean_val", "leaky_val": leaky}


def write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data))
    return path


def validate(result) -> dict:
    """The result's JSON envelope, validated against its command's schema."""
    import jsonschema

    from gapcheck.report.formats import ReportFormat, render

    document = json.loads(render(ReportFormat.JSON, result))
    schema = json.loads((Path(__file__).parents[2] / "gapcheck" / "schemas" / f"{result.command}.schema.json").read_text())
    jsonschema.validate(document, schema)
    return document


def shifted_tables(root: Path, rows: int = 20_000, shift: float = 0.8, seed: int = 0) -> tuple[Path, Path]:
    """Reference and current parquet tables: feature ``x1`` shifted by ``shift`` reference stds, the rest equal."""
    rng = np.random.default_rng(seed)
    frames = []
    for offset in (0.0, shift):
        frames.append(pd.DataFrame({
            "x0": rng.normal(size=rows), "x1": rng.normal(size=rows) + offset, "x2": rng.exponential(size=rows),
            "colour": rng.choice(["red", "green", "blue"], size=rows, p=[0.5, 0.3, 0.2])}))
    paths = (root / "reference.parquet", root / "current.parquet")
    for frame, path in zip(frames, paths, strict=True):
        frame.to_parquet(path, row_group_size=5_000)
    return paths

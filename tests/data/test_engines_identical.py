"""The same job on serial, local and a real local Ray cluster gives identical JSON apart from timings."""
from __future__ import annotations

import json

import pytest

from gapcheck.data.api import drift, leakage
from gapcheck.data.drift import DriftOptions
from gapcheck.engines import open_engine
from gapcheck.report.formats import ReportFormat, render
from tests.data.conftest import shifted_tables


def _json(result) -> dict:
    document = json.loads(render(ReportFormat.JSON, result))
    document.pop("timings")
    return document


def test_leakage_and_drift_identical_on_serial_local_and_ray(photo_splits, tmp_path):
    pytest.importorskip("ray")
    reference, current = shifted_tables(tmp_path, rows=12_000)
    broken = tmp_path / "broken"  # unreadable items must be reported identically too (no addresses, no order)
    broken.mkdir()
    (broken / "text.png").write_bytes(b"not an image")
    (broken / "truncated.png").write_bytes((photo_splits["train"] / "camera.png").read_bytes()[:300])
    (broken / "ok.png").write_bytes((photo_splits["train"] / "moon.png").read_bytes())
    splits = [f"train={photo_splits['train']}", f"val={photo_splits['leaky_val']}", f"broken={broken}"]
    images = [str(photo_splits["train"]), str(photo_splits["leaky_val"])]
    reports = {}
    for kind in ("serial", "local", "ray"):
        options = {"workers": 2} if kind != "serial" else {}
        with open_engine(kind, **options) as engine:
            reports[kind] = (_json(leakage(splits, engine=engine, shard_size=3)),
                             _json(drift(str(reference), str(current), DriftOptions(sample_size=5_000), engine=engine)),
                             _json(drift(images[0], images[1], engine=engine, shard_size=4)))
    assert reports["serial"] == reports["local"] == reports["ray"]
    leak, table, image = reports["serial"]
    assert leak["pair_counts"] == {"exact": 3, "near": 4}
    assert [b["item"] for b in leak["bad_items"]] == ["broken:text.png", "broken:truncated.png"]
    assert [f["feature"] for f in table["features"] if f["drift"]] == ["x1"]
    assert {f["feature"] for f in image["features"]} >= {"brightness", "mean_r", "aspect_ratio"}

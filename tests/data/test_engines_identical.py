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


def test_new_jobs_identical_on_serial_local_and_ray(tmp_path):
    """Issue #22's jobs on every engine: duplicates within a split, target encodings by construction, the
    multi-index near-duplicate search as an engine job, and drift on a parquet read in column blocks."""
    pytest.importorskip("ray")
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gapcheck.data import features, near
    from gapcheck.data.leakage import LeakageOptions
    from tests.data.test_near import _planted
    from tests.data.test_target_encoding import ctr_story

    train, val = ctr_story(rows=6_000)
    train.to_parquet(tmp_path / "train.parquet", row_group_size=2_000)
    val.iloc[:200].to_csv(tmp_path / "val.csv", index=False)
    val.iloc[:50].to_csv(tmp_path / "val_copy.csv", index=False)  # within the validation split: 50 copies
    rng = np.random.default_rng(5)
    rows, width = 45_000, 120  # one row group of 5.4M cells: read in two column blocks
    assert rows * width > features.BLOCK_CELLS
    for name, shift in (("ref", 0.0), ("cur", 0.5)):
        block = rng.standard_normal((width, rows), dtype=np.float32)
        block[7] += shift
        pq.write_table(pa.table({f"c{i}": block[i] for i in range(width)}), tmp_path / f"{name}.parquet")
    query, reference = _planted(rng, 60_000, 4_000, 8)
    splits = [f"train={tmp_path / 'train.parquet'}", f"validation={tmp_path / 'val*.csv'}"]
    options = LeakageOptions(group_column="user_id", label_column="y")
    reports = {}
    for kind in ("serial", "local", "ray"):
        with open_engine(kind, **({"workers": 2} if kind != "serial" else {})) as engine:
            pairs = near.engine_search(engine, threshold=0)(query, reference, 8)
            reports[kind] = (_json(leakage(splits, options, engine=engine)),
                             _json(drift(str(tmp_path / "ref.parquet"), str(tmp_path / "cur.parquet"), engine=engine)),
                             [a.tolist() for a in pairs])
    assert reports["serial"] == reports["local"] == reports["ray"]
    leak, wide, pairs = reports["serial"]
    codes = {f["code"] for f in leak["findings"]}
    assert {"duplicate_within_split", "target_leakage", "group_overlap"} <= codes
    assert not {"exact_duplicate", "near_duplicate"} & codes
    assert [f["feature"] for f in wide["features"] if f["drift"]] == ["c7"]
    assert len(pairs[0]) >= 1_000 and pairs == [a.tolist() for a in near.brute_pairs(query, reference, 8)]

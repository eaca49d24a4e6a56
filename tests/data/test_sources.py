from __future__ import annotations

import numpy as np
import pandas as pd

from gapcheck.data.api import drift
from gapcheck.data.sources import SourceKind, parse_split, plan
from gapcheck.engines import open_engine


def test_split_specs():
    assert (parse_split("train=/d/date=2024/x.parquet").name, parse_split("train=/d/date=2024/x.parquet").location) \
        == ("train", "/d/date=2024/x.parquet")
    assert parse_split("/d/date=2024/x.parquet").location == "/d/date=2024/x.parquet"  # '=' inside a path
    assert parse_split("val=memory://v").location == "memory://v"
    assert parse_split("data/train").name == "train"


def test_hive_style_paths_and_row_group_shards(tmp_path):
    folder = tmp_path / "date=2024-01-01"
    folder.mkdir()
    frame = pd.DataFrame({"x": np.arange(10_000, dtype=float) / 7})  # 0..9999 itself would be an identifier (info)
    frame.to_parquet(folder / "part.parquet", row_group_size=2_500)
    planned = plan(parse_split(str(folder)))
    assert planned.kind is SourceKind.table and len(planned.payloads) == 4 and planned.items == 10_000
    with open_engine("serial") as engine:
        result = drift(str(folder), str(folder / "part.parquet"), engine=engine)
    assert result.findings == () and result.reference.used == result.current.used == 10_000


def test_images_and_tables_in_one_split_are_refused(tmp_path):
    import pytest

    from gapcheck.errors import UsageError

    (tmp_path / "a.png").write_bytes(b"")
    (tmp_path / "b.csv").write_text("x\n1\n")
    with pytest.raises(UsageError, match="mixes images and tables"):
        plan(parse_split(f"s={tmp_path}"))


def test_csv_read_in_chunks_gives_the_same_report_as_in_one_piece(tmp_path, monkeypatch):
    import json

    from gapcheck.data import readers
    from gapcheck.data.api import leakage
    from gapcheck.data.leakage import LeakageOptions
    from gapcheck.report.formats import ReportFormat, render

    rng = np.random.default_rng(0)
    for name, shift in (("ref", 0.0), ("cur", 0.5)):
        pd.DataFrame({"x": rng.normal(size=2_500) + shift, "y": rng.integers(0, 2, 2_500)}).to_csv(
            tmp_path / f"{name}.csv", index=False)

    def reports():
        with open_engine("serial") as engine:
            out = (drift(str(tmp_path / "ref.csv"), str(tmp_path / "cur.csv"), engine=engine),
                   leakage([f"a={tmp_path / 'ref.csv'}", f"b={tmp_path / 'cur.csv'}"],
                           LeakageOptions(label_column="y"), engine=engine))
        return [{k: v for k, v in json.loads(render(ReportFormat.JSON, r)).items() if k != "timings"} for r in out]

    whole = reports()
    monkeypatch.setattr(readers, "CSV_CHUNK_ROWS", 1_000)  # three chunks per file
    # Identical, except that float sums grouped differently may differ in the last bit (counts, min/max, the row
    # sample and so every test statistic are exact whatever the chunking; across engines the chunking is the same).
    assert _same(reports(), whole)
    assert [f["feature"] for f in whole[0]["features"] if f["drift"]] == ["x"]


def _same(a, b) -> bool:
    import pytest

    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-12, abs=1e-300)
    return a == b

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
    frame = pd.DataFrame({"x": np.arange(10_000, dtype=float)})
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

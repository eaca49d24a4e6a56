"""What the console shows of a precision result: values beyond FP16's range that ONNX Runtime ran in FP32 (a pass
here, an overflow in a TensorRT FP16 engine) are a table, not only JSON; an empty 'kept' list is no empty table."""
from __future__ import annotations

from gapcheck.precision.result import PrecisionResult


def _titles(result: PrecisionResult) -> list[str]:
    return [getattr(v, "title", "") for v in result.views()]


def test_values_beyond_range_are_shown_and_an_empty_fix_table_is_not() -> None:
    hot = {"values": [{"value": "sum_1", "node": "node_sum_1", "module": "(model)"}], "count": 1,
           "note": "beyond 65504 in the FP32 reference"}
    result = PrecisionResult(precision="fp16", headline="FP16 passes as it is",
                             fix={"path": "m.onnx", "status": "verified", "kept": [], "modules": [], "nodes": []},
                             details={"beyond_fp16_range": hot})
    views = {getattr(v, "title", ""): v for v in result.views()}
    table = views["Values beyond FP16's range in the FP32 reference (1)"]
    assert table.rows == (("sum_1", "node_sum_1", "(model)"),)  # type: ignore[union-attr]
    assert not [t for t in views if t.startswith("Kept in FP32")]


def test_nothing_beyond_range_adds_no_table() -> None:
    result = PrecisionResult(precision="fp16", details={"beyond_fp16_range": {"values": [], "count": 0}},
                             fix={"status": "verified", "kept": [{"module": "m", "nodes": ["n"], "reason": "r"}]})
    titles = _titles(result)
    assert not [t for t in titles if t.startswith("Values beyond")]
    assert "Kept in FP32 (verified)" in titles

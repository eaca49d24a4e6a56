"""FP16: the planted overflow, a clean CNN, a model from the wild (transformers' T5 feed-forward), and the cases
ONNX Runtime computes right although the FP32 reference leaves FP16's range (no false alarm)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from gapcheck.compare import PRECISION_TOLERANCES, Tolerance, compare_arrays
from gapcheck.groups import InputSource, ModelSource
from gapcheck.model.precision import FP16_MAX, to_precision
from gapcheck.precision import PrecisionRequest, run_precision
from gapcheck.precision.graph import ValueRunner


def _run(factory: str, spec: str, fix: Path | None = None, samples: int = 3):
    return run_precision(PrecisionRequest(model=ModelSource(factory=factory),
                                          inputs=InputSource(specs=(spec,), num_samples=samples), fix_path=fix))


def _codes(result) -> list[tuple[str, str]]:
    return [(f.code, f.severity.value) for f in result.findings]


def _check_written(path: Path, module: torch.nn.Module, shape: tuple[int, ...], seed: int = 7) -> None:
    """The written model, on inputs the fix never saw: finite, and within FP16's tolerance of torch."""
    model = onnx.load(str(path))
    runner = ValueRunner(model, [])
    rtol, atol = PRECISION_TOLERANCES["fp16"]
    for sample in range(3):
        x = np.random.default_rng(seed + sample).standard_normal(shape).astype(np.float32)
        got = runner.run({"x": x})[model.graph.output[0].name]
        with torch.no_grad():
            expected = module(torch.from_numpy(x)).numpy()
        assert np.isfinite(got).all()
        stats = compare_arrays(got.astype(np.float32), expected, Tolerance(rtol, atol, scale_atol=True))
        assert stats.passed, stats


def test_planted_overflow_keeps_only_the_scores_in_fp32(tmp_path: Path):
    from sample_models.planted import build_fp16_overflow

    fix = tmp_path / "out" / "model.fp16.onnx"
    result = _run("sample_models.planted:build_fp16_overflow", "x:1x8x16:float32", fix)
    assert result.verdict == "pass", _codes(result)
    assert result.fix["status"] == "verified" and result.fix["runs"] == 1
    kept = {k["module"]: k["nodes"] for k in result.fix["kept"]}
    assert "attn.scores" in kept
    # What it must keep besides: only the op that consumes the scores (the Softmax written inline in attn.forward).
    rows = {r.module: r for r in result.rows}
    must = set(rows["attn.scores"].nodes) | {n for n in rows["attn"].nodes if "softmax" in n}
    assert set(result.fix["nodes"]) <= must, result.fix["nodes"]
    assert rows["attn.scores"].sensitivity == math.inf and rows["attn.scores"].overflow > 0
    assert result.rows[0].module == "attn.scores"  # ranked first
    assert ("fp16_overflow", "warning") in _codes(result) and ("precision_fix_verified", "info") in _codes(result)
    _check_written(fix, build_fp16_overflow(), (1, 8, 16))
    trt = result.details["tensorrt"]
    assert "not executed" in trt["note"] and all(f"{n}:fp32" in trt["trtexec"] for n in result.fix["nodes"])
    assert all(f"{n}:float32" in trt["polygraphy"] for n in result.fix["nodes"])


def test_planted_overflow_without_fix_is_a_gap_on_the_scores():
    result = _run("sample_models.planted:build_fp16_overflow", "x:1x8x16:float32")
    assert result.verdict == "gap" and result.fix is None
    overflow = [f for f in result.findings if f.code == "fp16_overflow"]
    assert [f.subject.module for f in overflow] == ["attn.scores"]


def test_plain_fp16_of_the_planted_model_really_breaks():
    """The premise: the whole model in FP16 gives Inf/NaN or misses the tolerance on the scores."""
    from gapcheck.groups import ExportSpec
    from sample_models.planted import build_fp16_overflow

    module = build_fp16_overflow()
    x = np.random.default_rng(0).standard_normal((1, 8, 16)).astype(np.float32)
    exported, _ = ExportSpec(no_cache=True).obtain(module, {"x": x})
    scores = [n.output[0] for n in exported.model.graph.node if n.op_type == "MatMul"]
    values = ValueRunner(to_precision(exported.model, "fp16"), scores).run({"x": x})
    assert any(not np.isfinite(v).all() for v in values.values())


def test_clean_cnn_needs_no_fix(tmp_path: Path):
    fix = tmp_path / "cnn.fp16.onnx"
    result = _run("sample_models.cnn:build_small_resnet", "x:1x3x32x32:float32", fix, samples=2)
    assert result.verdict == "pass", _codes(result)
    assert result.fix["nodes"] == [] and result.fix["status"] == "verified"
    assert all(r.passed for r in result.rows) and all(r.overflow == 0 for r in result.rows)
    assert not [f for f in result.findings if f.code in ("fp16_overflow", "precision_sensitive")]
    assert fix.is_file()  # the plain FP16 model, verified by the run


def test_t5_feed_forward_overflow_from_the_wild_is_fixed(tmp_path: Path):
    """transformers' own T5LayerFF with a feed-forward output beyond 65504 (T5's FP16 NaN): the residual carries the
    large values on, so the fix keeps the overflowing Linear, the residual adds and the consumers until the next
    norm brings them back; the written model passes."""
    from sample_models.precision import build_t5_ff_overflow

    fix = tmp_path / "t5.fp16.onnx"
    result = _run("sample_models.precision:build_t5_ff_overflow", "x:1x8x32:float32", fix)
    assert result.verdict == "pass", _codes(result)
    assert result.fix["status"] == "verified"
    kept = {k["module"] for k in result.fix["kept"]}
    assert "ff.0.DenseReluDense.wo" in kept
    total = len(onnx.load(str(fix)).graph.node)
    assert len(result.fix["nodes"]) < total // 2  # most of the model stays FP16
    flagged = {f.subject.module for f in result.findings if f.code == "fp16_overflow"}
    assert "ff.0.DenseReluDense.wo" in flagged and "ff.0" not in flagged  # named where it starts, not its parents
    _check_written(fix, build_t5_ff_overflow(), (1, 8, 32))


@pytest.mark.parametrize(("factory", "spec"), [
    ("sample_models.precision:build_t5_rmsnorm", "x:1x8x32:float32"),
    ("sample_models.precision:build_long_sum_pool", "x:1x1x40000:float32:-1,1"),
])
def test_values_beyond_range_that_onnx_runtime_computes_in_fp32_are_no_gap(factory: str, spec: str):
    """ONNX Runtime fuses T5's RMS norm (computed in FP32) and runs ReduceSum through casts: FP16 passes there. The
    values beyond FP16's range in the reference are still listed (a TensorRT engine may overflow), as no gap."""
    result = _run(factory, spec)
    assert result.verdict == "pass", _codes(result)
    beyond = result.details["beyond_fp16_range"]
    assert beyond["count"] >= 1 and "TensorRT" in beyond["note"]


def test_drop_round_trips_keeps_fp32_between_kept_nodes():
    """A value with several consumers, all kept in FP32, must not pass through FP16 (onnxconverter-common's cast pair)."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    big = helper.make_tensor("big", TensorProto.FLOAT, [1], [1e5])
    nodes = [helper.make_node("Mul", ["x", "big"], ["m"], name="mul"),
             helper.make_node("Sub", ["m", "big"], ["a"], name="sub_a"),
             helper.make_node("Sub", ["m", "big"], ["b"], name="sub_b"),
             helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [big]),
                              opset_imports=[helper.make_opsetid("", 17)])
    fixed = to_precision(model, "fp16", keep_fp32=["mul", "sub_a", "sub_b"])
    got = ValueRunner(fixed, []).run({"x": np.ones(4, np.float32)})["y"]
    assert np.allclose(got, 0.0), got  # 1e5 - 1e5 twice; Inf - 1e5 would give Inf
    assert FP16_MAX < 1e5


def test_a_kept_graph_output_read_inside_the_graph_stays_fp32():
    """Issue 20: a node kept in FP32 producing a graph output (also read by an FP16 node) wrote it as FP16: Inf."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from gapcheck.model.precision import to_precision

    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "c"], ["y"], "mul"), helper.make_node("Div", ["y", "d"], ["z"], "div")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4]), helper.make_tensor_value_info("z", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array(1e5, np.float32), "c"), numpy_helper.from_array(np.array(1e4, np.float32), "d")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    converted = to_precision(model, "fp16", ["mul"])
    onnx.checker.check_model(converted)
    assert [o.type.tensor_type.elem_type for o in converted.graph.output] == [TensorProto.FLOAT] * 2
    x = np.array([1, 2, 3, 0.5], np.float32)
    y, _ = ort.InferenceSession(converted.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(y, x * np.float32(1e5))

"""INT8: static QDQ on a small CNN calibrated with real photos (a folder through a declared stage) and verified on
other photos; the fix excludes the most sensitive modules and the written model meets the target; the faults."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from gapcheck.errors import BackendError, InputError, UsageError
from gapcheck.groups import InputSource, ModelSource
from gapcheck.precision import PrecisionRequest, parse_target, run_precision
from gapcheck.precision.graph import ValueRunner
from gapcheck.precision.targets import score

STAGE = "photo=tests.precision.stages:photo_32"
CNN = "sample_models.cnn:build_small_resnet"


def _request(photos, **kw) -> PrecisionRequest:
    calibration, verification = photos
    base = dict(model=ModelSource(factory=CNN), inputs=InputSource(file=verification), precision="int8",
                calibration=calibration, calibration_stage=STAGE)
    return PrecisionRequest(**{**base, **kw})


def _codes(result) -> list[str]:
    return [f.code for f in result.findings]


def test_static_int8_on_photos_fix_reaches_the_target(photos_32, tmp_path: Path):
    plain = run_precision(_request(photos_32, targets=(parse_target("cosine=0"),)))
    assert plain.details["mode"] == "static" and plain.details["calibration"]["samples"] == 16
    assert "calibration_unrepresentative" not in _codes(plain)  # real photos, verified on other photos
    cosine = plain.details["scores"]["cosine"]
    assert cosine < 1 - 1e-7
    target = 1 - (1 - cosine) / 3  # stricter than the fully quantized model reaches
    fix = tmp_path / "cnn.int8.onnx"
    result = run_precision(_request(photos_32, targets=(parse_target(f"cosine={target}"),), fix_path=fix))
    assert result.verdict == "pass", [f.message for f in result.findings]
    assert result.fix["status"] == "verified" and result.fix["modules"]
    ranking = [r.module for r in result.rows]
    assert result.fix["modules"] == ranking[:len(result.fix["modules"])]  # greedy by sensitivity
    assert "precision_target_missed" in _codes(result) and "precision_fix_verified" in _codes(result)
    trade = result.fix["trade"]
    assert trade[-1]["met"] or any(t["met"] for t in trade)
    # The written model, checked independently against torch on the verification photos.
    model = onnx.load(str(fix))
    assert any(n.op_type == "QuantizeLinear" for n in model.graph.node)
    excluded = set(result.fix["nodes"])
    assert not any(n.op_type == "DequantizeLinear" and n.output[0] in
                   {o for m in model.graph.node if m.name in excluded for o in m.output} for n in model.graph.node)
    from sample_models.cnn import build_small_resnet

    module = build_small_resnet().eval()
    x = np.load(photos_32[1])["x"]
    runner = ValueRunner(model, [])
    got = [runner.run({"x": x[i:i + 1]}) for i in range(len(x))]
    with torch.no_grad():
        ref = [{"output": module(torch.from_numpy(x[i:i + 1])).numpy()} for i in range(len(x))]
    assert score(ref, [{"output": g[model.graph.output[0].name]} for g in got]).cosine >= target


def test_a_target_no_exclusion_reaches_is_a_gap_and_nothing_is_written(photos_32, tmp_path: Path):
    fix = tmp_path / "never.onnx"
    result = run_precision(_request(photos_32, targets=(parse_target("max-rel-error=0"),), fix_path=fix))
    assert result.verdict == "gap"
    assert result.fix["status"] == "insufficient" and result.fix["path"] is None
    assert "precision_fix_insufficient" in _codes(result) and not fix.exists()


def test_calibrating_on_the_verification_samples_warns(photos_32):
    _, verification = photos_32
    result = run_precision(_request(photos_32, calibration=verification, calibration_stage=None,
                                    targets=(parse_target("cosine=0"),)))
    warned = [f for f in result.findings if f.code == "calibration_unrepresentative"]
    assert warned and "calibration samples too" in warned[0].message


def test_random_inputs_for_int8_warn():
    result = run_precision(PrecisionRequest(model=ModelSource(factory=CNN), precision="int8",
                                            inputs=InputSource(specs=("x:1x3x32x32:float32",), num_samples=4),
                                            targets=(parse_target("cosine=0"),)))
    assert any("random inputs" in f.message for f in result.findings if f.code == "calibration_unrepresentative")


@pytest.mark.parametrize("method", ["entropy", "percentile"])
def test_calibration_methods(photos_32, method: str):
    result = run_precision(_request(photos_32, calibration_method=method, targets=(parse_target("cosine=0"),)))
    assert result.details["calibration"]["method"] == method and result.verdict == "pass"


def test_calibration_from_an_npz_and_a_pt(photos_32, tmp_path: Path):
    from tests.precision.conftest import stacked
    from tests.precision.stages import photo_32

    arrays = stacked(photos_32[0], photo_32)
    np.savez(tmp_path / "cal.npz", x=arrays)
    torch.save({"x": torch.from_numpy(arrays)}, tmp_path / "cal.pt")
    for path in (tmp_path / "cal.npz", tmp_path / "cal.pt"):
        result = run_precision(_request(photos_32, calibration=path, calibration_stage=None,
                                        targets=(parse_target("cosine=0"),)))
        assert result.details["calibration"]["samples"] == len(arrays)


def test_empty_calibration_folder_is_an_input_error(photos_32, tmp_path: Path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no sample files"):
        run_precision(_request(photos_32, calibration=tmp_path / "empty"))


def test_calibration_samples_that_do_not_fit_are_an_input_error(photos_32, tmp_path: Path):
    np.savez(tmp_path / "wrong.npz", x=np.zeros((4, 3, 48, 48), np.float32))
    with pytest.raises(InputError, match="calibration sample 0: input 'x' has shape"):
        run_precision(_request(photos_32, calibration=tmp_path / "wrong.npz", calibration_stage=None))


def test_a_folder_of_raw_samples_needs_a_stage(photos_32):
    with pytest.raises(UsageError, match="declare their preprocessing"):
        run_precision(_request(photos_32, calibration_stage=None))


def test_a_model_onnx_runtime_cannot_quantize_is_a_backend_error():
    from onnx import TensorProto, helper

    from gapcheck.precision.int8 import Quantizer

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    model = helper.make_model(helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["y"], domain="custom.ops")],
                                                "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom.ops", 1)])
    quantizer = Quantizer(model, "static", [{"x": np.ones((1, 4), np.float32)}])
    try:
        with pytest.raises(BackendError, match="cannot quantize"):
            quantizer.quantize()
    finally:
        quantizer.close()


def test_text_model_with_token_ids_is_quantized_dynamically():
    result = run_precision(PrecisionRequest(
        model=ModelSource(factory="sample_models.transformer:build_transformer"), precision="int8",
        inputs=InputSource(specs=("tokens:1x16:int64:0,1000",), num_samples=3), targets=(parse_target("cosine=0"),)))
    assert result.details["mode"] == "dynamic" and result.details["calibration"]["samples"] == 0
    assert result.rows and result.details["quantized_nodes"] > 0


def test_targets_are_parsed_and_checked():
    assert str(parse_target("top1-agreement=0.99")) == "top1-agreement=0.99"
    for bad in ("cosine", "cosine=2", "cosine=nan", "accuracy=0.9"):
        with pytest.raises(UsageError):
            parse_target(bad)


def _graph_and_quantized(factory: str, spec: str, mode: str):
    from gapcheck.groups import ExportSpec
    from gapcheck.precision.graph import describe
    from gapcheck.precision.int8 import Quantizer

    module = ModelSource(factory=factory).load().module.eval()
    samples = InputSource(specs=(spec,), num_samples=5).samples(module=module)
    exported, _ = ExportSpec(no_cache=True).obtain(module, samples[0])
    graph = describe(exported.model, [p for p, _ in module.named_modules() if p])
    quantizer = Quantizer(graph.model, mode, samples[:3])
    try:
        return graph, quantizer.quantize(), samples[3:]
    finally:
        quantizer.close()


@pytest.mark.parametrize(("factory", "spec", "mode"), [(CNN, "x:1x3x32x32:float32", "static"),
                                                       ("sample_models.transformer:build_transformer",
                                                        "tokens:1x16:int64:0,1000", "dynamic")])
def test_sensitivity_pass_is_two_sessions_and_equals_each_module_rerun_alone(factory, spec, mode, monkeypatch):
    """The replay model (every module's own ops copied into one FP32 session, as qdq_loss_debug marks one augmented
    model) gives each module's own error exactly as re-running its subgraph alone did, with 2 sessions, not 2 + one
    per module."""
    from gapcheck.backends import onnxruntime as ort_backend
    from gapcheck.precision import int8
    from gapcheck.precision.graph import value_map, value_names

    graph, quantized, samples = _graph_and_quantized(factory, spec, mode)
    built = []
    original = ort_backend.OnnxRuntimeBackend.__init__

    def counting(self, *args, **kwargs):
        built.append(kwargs.get("name"))
        original(self, *args, **kwargs)

    monkeypatch.setattr(ort_backend.OnnxRuntimeBackend, "__init__", counting)
    errors, local = int8.value_errors(graph, quantized, samples)
    assert len(built) == 2 and len(local) >= 10
    monkeypatch.setattr(ort_backend.OnnxRuntimeBackend, "__init__", original)
    # Each module alone, the other way (its subgraph extracted, fed the same quantized values).
    renamed = {**value_map(graph.model, quantized, by_node=False), **int8.after_qdq(quantized)}
    names = [n for n in value_names(graph.model) if n in renamed]
    q = int8.ValueRunner(quantized, [renamed[n] for n in names])
    alone: dict[str, float] = {}
    sessions: dict = {}
    not_float = int8._not_float(graph.model)
    for feeds in samples:
        got = q.run(feeds)
        seen = {n: got[renamed[n]] for n in names if renamed[n] in got
                and (got[renamed[n]].dtype.kind == "f" or n in not_float)}
        for owner, (handed, received) in int8._units(graph, set(names)).items():
            error = int8._own_error(graph, handed, received, seen, feeds, sessions)
            if error is not None:
                alone[owner] = max(alone.get(owner, 0.0), error)
    assert set(alone) == set(local)
    assert all(local[m] == pytest.approx(alone[m], rel=1e-6, abs=1e-9) for m in alone)
    assert errors and all(np.isfinite(v) for v in errors.values())


def test_output_error_with_one_module_quantized_is_one_session_and_matches_onnx_runtime(monkeypatch):
    """--sensitivity alone: the outputs' error with only one module quantized, for every module from one spliced
    session; where ONNX Runtime quantizes the module on its own too (nodes_to_exclude = every other node; the fc
    Gemm, a convolution), the numbers are the same."""
    from gapcheck.backends import onnxruntime as ort_backend
    from gapcheck.precision import alone, int8
    from gapcheck.precision.graph import value_names

    module = ModelSource(factory=CNN).load().module.eval()
    samples = InputSource(specs=("x:1x3x32x32:float32",), num_samples=5).samples(module=module)
    from gapcheck.groups import ExportSpec
    from gapcheck.precision.graph import describe

    exported, _ = ExportSpec(no_cache=True).obtain(module, samples[0])
    graph = describe(exported.model, [p for p, _ in module.named_modules() if p])
    quantizer = int8.Quantizer(graph.model, "static", samples[:3])
    try:
        quantized = quantizer.quantize()
        units = int8._units(graph, set(value_names(graph.model)))
        built = []
        original = ort_backend.OnnxRuntimeBackend.__init__

        def counting(self, *args, **kwargs):
            built.append(1)
            original(self, *args, **kwargs)

        monkeypatch.setattr(ort_backend.OnnxRuntimeBackend, "__init__", counting)
        errors = alone.output_errors(graph, quantized, units, samples[3:])
        monkeypatch.setattr(ort_backend.OnnxRuntimeBackend, "__init__", original)
        assert len(built) == 1 and set(errors) == set(units) and errors["fc"] > 0
        fp32 = ValueRunner(graph.model, [])
        owners = graph.owners()
        for name in ("fc", "layer1.0.bn2"):  # a Gemm; a convolution (its BatchNorm folded in, named after it)
            only = ValueRunner(quantizer.quantize(sorted(set(graph.node_names) - set(owners[name]))), [])
            worst = 0.0
            for feeds in samples[3:]:
                a, b = only.run(feeds), fp32.run(feeds)
                worst = max(worst, int8._relative(np.concatenate([v.ravel() for v in a.values()]),
                                                  np.concatenate([v.ravel() for v in b.values()])))
            assert worst > 0 and errors[name] == pytest.approx(worst, rel=1e-4), name
    finally:
        quantizer.close()


def test_sensitivity_alone_ranks_and_orders_the_fix(photos_32, tmp_path: Path):
    result = run_precision(_request(photos_32, targets=(parse_target("cosine=0"),), sensitivity="alone"))
    assert result.details["sensitivity_measure"] == "alone"
    values = [r.alone for r in result.rows]
    assert all(v is not None for v in values) and values == sorted(values, reverse=True)
    assert [r.sensitivity for r in result.rows] == values
    with pytest.raises(UsageError, match="for INT8"):
        PrecisionRequest(model=ModelSource(factory=CNN), precision="fp16", sensitivity="alone")


def test_when_onnx_runtime_refuses_the_combined_models_each_module_runs_alone(monkeypatch):
    """The replay and splice models are an optimization: if ONNX Runtime refused one, every module is re-run (or
    spliced) alone, and the numbers are the same."""
    from gapcheck.precision import alone, int8
    from gapcheck.precision import graph as graph_module
    from gapcheck.precision.graph import value_names

    model_graph, quantized, samples = _graph_and_quantized(CNN, "x:1x3x32x32:float32", "static")
    units = int8._units(model_graph, set(value_names(model_graph.model)))
    errors, local = int8.value_errors(model_graph, quantized, samples)
    spliced = alone.output_errors(model_graph, quantized, units, samples)
    original = graph_module.ValueRunner

    class Refusing(original):  # type: ignore[misc, valid-type]
        def __init__(self, model, names):
            copies = [n.name for n in model.graph.node if n.name.startswith(("gapcheck.replay", "gapcheck.alone"))]
            if len({n.split("/")[0] for n in copies}) > 1:  # several modules in one model: refused
                raise BackendError("planted: ONNX Runtime refuses the combined model")
            super().__init__(model, names)

    monkeypatch.setattr(int8, "ValueRunner", Refusing)
    monkeypatch.setattr(alone, "ValueRunner", Refusing)
    errors_alone, local_alone = int8.value_errors(model_graph, quantized, samples)
    assert local_alone == pytest.approx(local) and errors_alone == pytest.approx(errors)
    # one session per module: ONNX Runtime may fuse a lone copy's float ops otherwise (measured: 2e-5 relative)
    assert alone.output_errors(model_graph, quantized, units, samples) == pytest.approx(spliced, rel=1e-4)

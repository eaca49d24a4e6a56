"""One cast rule for torch's FP32 values fed into a cut of an FP16 graph (localize.as_computed), on every
localization path: by names (a module's scope), by values (the graph cut at values torch has) and the owner search
inside a locally diverging subgraph. The rule is ONNX Runtime's dtype of that value in the whole graph; the by-values
paths used the types the graph declares, which a graph without value_info lacks: the cut was fed FP32 where its
nodes read FP16, ONNX Runtime refused it and the divergence stayed undetermined or at the wrong module."""
from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
import torch

from gapcheck.export_diff import localize
from gapcheck.export_diff.localize import as_computed
from gapcheck.export_diff.runner import export_diff
from sample_models import deployed
from tests.export_diff.test_fp16_files import _fp16_file, _run
from tests.export_diff.test_owner import Net, _planted


def test_the_rule_is_the_dtype_onnx_runtime_computed_the_value_in():
    value = np.linspace(-1, 1, 6, dtype=np.float32)
    assert as_computed(value, np.zeros(6, np.float16)).dtype == np.float16
    assert as_computed(value, np.zeros(6, np.float32)) is value
    assert as_computed(value, None) is value  # nothing computed: as it is (the cut says if it refuses)
    assert as_computed(value, np.zeros(6, np.int64)) is value  # indices where torch has floats: no cast across kinds
    assert as_computed(np.arange(6), np.zeros(6, np.int32)).dtype == np.int32


def _without_value_info(path) -> None:
    """The same file without the optional type annotations of its intermediate values (as tools that rewrite a
    graph may leave it): what ONNX Runtime computes is unchanged."""
    model = onnx.load(str(path))
    assert len(model.graph.value_info) > 0
    del model.graph.value_info[:]
    onnx.save(model, str(path))


def _spy(monkeypatch, name: str) -> list[str]:
    """The causes ``localize.<name>`` returned on the run (which path decided, and what)."""
    seen: list[str] = []
    original = getattr(localize, name)

    def spy(*args, **kwargs):
        result = original(*args, **kwargs)
        seen.append(getattr(result, "cause", None) or getattr(result, "module", None) or "none")
        return result
    monkeypatch.setattr(localize, name, spy)
    return seen


@pytest.mark.parametrize("value_info", ["declared", "stripped"])
@pytest.mark.parametrize("case", ["cnn", "transformer"])
def test_by_names_on_an_fp16_file_feeds_what_onnx_runtime_computes(tmp_path, monkeypatch, case, value_info):
    planted_name, module = {"cnn": ("fc.bias", "fc"), "transformer": ("block.mlp.fc1.bias", "block.mlp.fc1")}[case]
    _, planted = _fp16_file(tmp_path, case, planted=planted_name)
    if value_info == "stripped":
        _without_value_info(planted)
    by_names = _spy(monkeypatch, "localize")
    code, report = _run(tmp_path, case, planted)
    first = report["first_divergence"]
    assert (code, first["module"], first["cause"]) == (1, module, "local")
    assert by_names == ["local"]  # the module's own ops, fed torch's values cast to FP16, decided it


@pytest.mark.parametrize("value_info", ["declared", "stripped"])
def test_by_values_on_an_fp16_bert_without_value_info_finds_the_planted_eps(tmp_path, monkeypatch, value_info):
    """The TorchScript exporter hands BERT's LayerNorm its (deduplicated) weight through an Identity: no scope
    boundary fits, so the graph is cut by values. Stripped of value_info, the declared-types rule fed FP32 into the
    FP16 cut (refused: cause undetermined); ONNX Runtime's dtype is known for every value fed."""
    from onnxconverter_common import float16

    from gapcheck.cli.app import main
    from sample_models.zoo import bert_classifier

    fp32 = tmp_path / "bert.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(bert_classifier().eval(), (torch.randint(0, 1000, (1, 16)),), str(fp32), dynamo=False,
                          input_names=["input_ids"])
        model = float16.convert_float_to_float16(onnx.load(str(fp32)), keep_io_types=True)
    norm = [n for n in model.graph.node if n.op_type == "LayerNormalization"][2]
    next(a for a in norm.attribute if a.name == "epsilon").f = 0.5
    planted = tmp_path / "bert_eps.onnx"
    onnx.save(model, str(planted))
    if value_info == "stripped":
        _without_value_info(planted)
    by_values = _spy(monkeypatch, "localize_by_values")
    report = tmp_path / "report.json"
    code = main(["export-diff", "--model", "sample_models.zoo:bert_classifier", "--input",
                 "input_ids:1x16:int64:0,1000", "--onnx", str(planted), "--num-samples", "2", "--json", str(report),
                 "--no-progress"])
    import json

    first = json.loads(report.read_text())["first_divergence"]
    assert (code, first["module"], first["cause"]) == (1, "bert.encoder.layer.0.output.LayerNorm", "local")
    assert by_values == ["local"]


@pytest.fixture(scope="module")
def slimmed_fp16():
    from onnxconverter_common import float16

    torch.manual_seed(0)
    model = Net().eval()
    rng = np.random.default_rng(0)
    samples = [{"x": rng.standard_normal((1, 6, 8)).astype(np.float32)} for _ in range(2)]
    slim = deployed.slimmed(deployed.export(model, (torch.from_numpy(samples[0]["x"]),), ["x"], ["y"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model, samples, float16.convert_float_to_float16(slim, keep_io_types=True)


@pytest.mark.parametrize("value_info", ["declared", "stripped"])
@pytest.mark.parametrize(("kind", "module", "evidence"), [
    ("eps", "blocks.1.norm", "blocks.1.norm's epsilon differs"),
    ("activation", "blocks.1.mlp.act", "the ONNX graph computes Gelu where torch's blocks.1.mlp.act is SiLU")])
def test_the_owner_search_inside_an_fp16_cut_finds_the_op_without_a_value(slimmed_fp16, monkeypatch, value_info, kind,
                                                                           module, evidence):
    """onnxslim -> FP16: the LayerNorm and GELU have no value of their own; the error is first seen at ``head``, whose
    cut diverges locally with nothing to show for it (head.weight read by value is only FP16-rounded: max rel 2.3e-4,
    no difference), so the owner search runs inside the FP16 cut fed torch's values."""
    model, samples, fp16 = slimmed_fp16
    onnx_model = onnx.ModelProto()
    onnx_model.CopyFrom(fp16)
    if value_info == "stripped":
        del onnx_model.graph.value_info[:]
    assert export_diff(model, samples, onnx_model=onnx_model, precision="fp16").verdict == "pass"
    inside = _spy(monkeypatch, "_owner_inside")
    first = export_diff(_planted(model, kind), samples, onnx_model=onnx_model, precision="fp16").first_divergence
    assert first is not None and (first.module, first.cause) == (module, "local"), first
    assert any(d.startswith(evidence) for d in first.differences), first.differences
    assert not any("head.weight differs" in d for d in first.differences)
    assert inside == [module]

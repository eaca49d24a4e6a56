"""The deployment-tool corpus (sample_models/corpus.py), slow: 9 real architectures through onnxslim, ONNX Runtime's
transformer optimizer, an Optimum-style export, the TorchScript exporter's Conv+BN folding and stripped scopes.

Every clean tool file passes (0 false alarms); each family's planted 1% weight change and op change (padding mode,
epsilon, activation) is found at the module that owns it. GPT-2's ORT-optimized file gets the `bert` fusions:
onnxruntime 1.32's `gpt2` postprocess (`onnx_model_gpt2.py`, `Gpt2OnnxModel.postprocess`) reads `gemm_node.input[2]`
although Gemm's bias is optional, and the dynamo exporter writes GPT-2's Conv1D as a two-input Gemm: IndexError
(an ONNX Runtime bug; docs/export-diff.md). Needs timm and facenet-pytorch
(scripts/setup_deploy_corpus.sh). The table in docs/export-diff.md is `python -m sample_models.corpus`.

Below the families' tool files: ONNX Runtime's own ORT_ENABLE_ALL files of the CNNs (NCHWc layout), planted
query/value weights inside BERT's fused Attention, ALBERT's shared layer (dynamo, ORT optimizer, onnxslim) and
files with neither scopes nor weight names.
"""
from __future__ import annotations

import pytest

from sample_models.corpus import FAMILIES, Family, Plant, _cnn, _image, _timm, found_at, run

CLEAN = [pytest.param(f, tool, id=f"{f.name}-{tool}") for f in FAMILIES for tool in f.tools]
# Every plant, op changes included: the LayerNorm epsilon of ConvNeXt, DeiT and GPT-2 and the GELU -> SiLU of
# ConvNeXt and DeiT, which have no value of their own in these rewritten graphs, are found by the owner search
# (gapcheck/export_diff/owner.py; fast test: tests/export_diff/test_owner.py).
PLANTED = [pytest.param(f, plant, id=f"{f.name}-{plant.kind}") for f in FAMILIES for plant in f.plants]

@pytest.mark.slow
@pytest.mark.parametrize(("family", "tool"), CLEAN)
def test_clean_tool_file_passes(family, tool):
    result = run(family, tool)
    assert result.verdict == "pass", [f"{f.code}: {f.message}" for f in result.findings if f.is_gap]
    assert all(o.status == "pass" for o in result.outputs)


@pytest.mark.slow
@pytest.mark.parametrize(("family", "plant"), PLANTED)
def test_planted_change_is_found_at_its_module(family, plant):
    result = run(family, family.plant_tool, plant)
    assert result.verdict == "gap"
    assert found_at(result.first_divergence, plant), (result.first_divergence, plant)


# ONNX Runtime's own ORT_ENABLE_ALL file (SessionOptions.optimized_model_filepath, on a CPU): NCHWc Convs with their
# BatchNorm, activation and residual sum folded in, blocked values (gapcheck/export_diff/nchwc.py), FusedConv for
# grouped convs. The plants used to be found only at the first plain value after a ReorderOutput.
ORT_ALL = [f for f in FAMILIES if f.plant_tool == "onnxslim" and "padding" in {p.kind for p in f.plants}] + [
    _cnn("ghostnet_100", "blocks.1.0.conv_dw", "blocks.1.0.ghost1.primary_conv.2")]  # its conv_dw: BN, no activation


def _ort_all_run(family, plant=None):
    import torch

    from gapcheck.export_diff.runner import export_diff
    from sample_models import deployed
    from sample_models.corpus import planted

    module = family.build()
    inputs = [family.inputs(seed) for seed in range(2)]
    exported = deployed.export(module, tuple(torch.from_numpy(a) for a in inputs[0].values()), list(inputs[0]),
                               list(family.outputs), dynamo=False)
    optimized = deployed.ort_layout_optimized(exported)
    assert any(node.domain == "com.microsoft.nchwc" for node in optimized.graph.node)
    return export_diff(planted(module, plant) if plant else module, inputs, onnx_model=optimized)


@pytest.mark.slow
@pytest.mark.parametrize("family", [pytest.param(f, id=f.name) for f in ORT_ALL])
def test_clean_ort_enable_all_file_passes(family):
    result = _ort_all_run(family)
    assert result.verdict == "pass", [f"{f.code}: {f.message}" for f in result.findings if f.is_gap]


@pytest.mark.slow
@pytest.mark.parametrize(("family", "plant"), [pytest.param(f, p, id=f"{f.name}-{p.kind}") for f in ORT_ALL
                                               for p in f.plants])
def test_planted_change_in_ort_enable_all_file_is_found_at_its_module(family, plant):
    result = _ort_all_run(family, plant)
    assert result.verdict == "gap"
    assert found_at(result.first_divergence, plant), (result.first_divergence, plant)
    assert result.first_divergence.differences, result.first_divergence  # what differs: weight, padding, activation


@pytest.mark.slow
@pytest.mark.parametrize("parameter", ["query.weight", "value.weight"])
def test_planted_weight_inside_ort_fused_attention_names_its_linear(parameter):
    """BERT through ONNX Runtime's transformer optimizer: query/key/value are one Attention op with one qkv weight.
    Attention made peaked as trained attention is (a 1% query change in a freshly initialized BERT moves nothing)."""
    import copy

    import torch

    from gapcheck.export_diff.runner import export_diff
    from sample_models.corpus import tool_file

    family = next(f for f in FAMILIES if f.name == "bert")
    module = family.build()
    attention = module.encoder.layer[0].attention.self
    with torch.no_grad():
        attention.query.weight.mul_(6.0)
        attention.key.weight.mul_(6.0)
    inputs = [family.inputs(seed) for seed in range(2)]
    fused = tool_file(family, module, inputs[0], "ort-optimizer")
    assert export_diff(module, inputs, onnx_model=fused).verdict == "pass"
    changed = copy.deepcopy(module)
    with torch.no_grad():
        dict(changed.named_parameters())[f"encoder.layer.0.attention.self.{parameter}"].mul_(1.01)
    fd = export_diff(changed, inputs, onnx_model=fused).first_divergence
    linear = f"encoder.layer.0.attention.self.{parameter.split('.')[0]}"
    assert fd is not None and fd.module == linear and fd.cause == "local", fd


def _albert():
    """transformers' AlbertModel from a small config: one transformer layer shared by its 3 layers."""
    import torch
    from transformers import AlbertConfig, AlbertModel

    class KeywordAlbert(AlbertModel):
        def forward(self, input_ids, attention_mask, token_type_ids):  # type: ignore[override]
            return super().forward(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)

    config = AlbertConfig(vocab_size=100, embedding_size=16, hidden_size=32, num_hidden_layers=3,
                          num_attention_heads=2, intermediate_size=64, max_position_embeddings=32)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return KeywordAlbert(config).eval()


ALBERT_LAYER = "encoder.albert_layer_groups.0.albert_layers.0"
ALBERT_PLANTS = {"dynamo": ("eps", "weight", "activation"), "ort-optimizer": ("eps", "weight", "activation"),
                 "onnxslim": ("eps", "activation")}


def _albert_run(tool, kind=None):
    import torch

    from gapcheck.export_diff.runner import export_diff
    from sample_models import deployed
    from sample_models.corpus import Plant, _tokens, planted

    module = _albert()
    inputs = [_tokens(seed) for seed in range(2)]
    args, names = tuple(torch.from_numpy(a) for a in inputs[0].values()), list(inputs[0])
    outputs = ["last_hidden_state", "pooler_output"]
    if tool == "ort-optimizer":  # Optimum's export (TorchScript, dynamic axes), then ONNX Runtime's optimizer
        exported = deployed.export(module, args, names, outputs, dynamo=False,
                                   dynamic_axes={n: {0: "batch", 1: "sequence"} for n in names})
        onnx_model = deployed.ort_optimized(exported, num_heads=2, hidden_size=32)
    else:
        exported = deployed.export(module, args, names, outputs)
        onnx_model = deployed.slimmed(exported) if tool == "onnxslim" else exported
    plant = None
    if kind is not None:
        where = {"eps": "full_layer_layer_norm", "weight": "ffn", "activation": "activation"}[kind]
        plant = Plant(kind, f"{ALBERT_LAYER}.{where}")
    return export_diff(planted(module, plant) if plant else module, inputs, onnx_model=onnx_model), plant


@pytest.mark.slow
@pytest.mark.parametrize("tool", list(ALBERT_PLANTS))
def test_clean_albert_file_passes(tool):
    result, _ = _albert_run(tool)
    assert result.verdict == "pass", [f"{f.code}: {f.message}" for f in result.findings if f.is_gap]


@pytest.mark.slow
@pytest.mark.parametrize(("tool", "kind"), [(t, k) for t, kinds in ALBERT_PLANTS.items() for k in kinds])
def test_planted_change_in_albert_shared_layer_is_found_at_its_module(tool, kind):
    """ALBERT's shared layer runs 3 times: the change is blamed at its module, at the call it first shows in."""
    result, plant = _albert_run(tool, kind)
    assert result.verdict == "gap"
    assert found_at(result.first_divergence, plant), (result.first_divergence, plant)


# Neither scopes nor weight names: the tool's file with every node and initializer renamed (a name-normalising
# tool). Modules are matched by value; a module whose output is the model's output is named at that graph output.
NAMELESS = [("resnet18", "dynamo"), ("mobilenetv3_small_100", "onnxslim"), ("convnext_atto", "onnxslim"),
            ("deit_tiny", "dynamo"), ("gpt2", "dynamo"), ("bert", "optimum"), ("mtcnn_onet", "onnxslim")]


def _nameless_run(family, tool, plant=None):
    from gapcheck.export_diff.runner import export_diff
    from sample_models.corpus import planted, tool_file
    from tests.export_diff.test_nameless_graphs import nameless

    module = family.build()
    inputs = [family.inputs(seed) for seed in range(2)]
    onnx_model = nameless(tool_file(family, module, inputs[0], tool))
    return export_diff(planted(module, plant) if plant else module, inputs, onnx_model=onnx_model)


def _family(name):
    return next(f for f in FAMILIES if f.name == name)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "tool"), NAMELESS)
def test_clean_nameless_file_passes(name, tool):
    result = _nameless_run(_family(name), tool)
    assert result.verdict == "pass", [f"{f.code}: {f.message}" for f in result.findings if f.is_gap]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "tool", "plant"), [pytest.param(n, t, p, id=f"{n}-{t}-{p.kind}")
                                                     for n, t in NAMELESS for p in _family(n).plants])
def test_planted_change_in_nameless_file_is_found_at_its_module(name, tool, plant):
    result = _nameless_run(_family(name), tool, plant)
    assert result.verdict == "gap"
    assert found_at(result.first_divergence, plant), (result.first_divergence, plant)


# FP16 deployment files whose BatchNorms are folded into their Convs (timm mobilenetv2_100, trained-like statistics):
# onnxslim then onnxconverter_common's FP16 conversion (keep_io_types=True), or --precision fp16 on the FP32 onnxslim
# file. The folded Conv keeps the conv's weight name; before, the bare Conv2d was compared with conv -> batch_norm (FP16
# runs skipped the re-check by value): a false layer_divergence at conv_stem (exit 1) on a clean file, and a padding
# planted in a folded conv blamed on its BatchNorm. Fast test: tests/export_diff/test_fp16_folded.py.
MOBILENETV2 = _cnn("mobilenetv2_100", "blocks.2.2.conv_dw", "blocks.2.2.bn2.act")


def _fp16_run(tool: str, plant=None):
    import warnings

    from onnxconverter_common import float16

    from gapcheck.export_diff.runner import export_diff
    from gapcheck.model.onnx_file import computes_in_fp16
    from sample_models.corpus import planted, tool_file

    module = MOBILENETV2.build()
    inputs = [MOBILENETV2.inputs(seed) for seed in range(2)]
    onnx_model = tool_file(MOBILENETV2, module, inputs[0], tool.removesuffix("+fp16"))
    if tool.endswith("+fp16"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            onnx_model = float16.convert_float_to_float16(onnx_model, keep_io_types=True)
        assert computes_in_fp16(onnx_model)
    return export_diff(planted(module, plant) if plant else module, inputs, onnx_model=onnx_model, precision="fp16")


# torchscript-folded+fp16: the ReLU6s keep their names; under FP16 budgets scaled to their clipped range they failed
# with the error their passing Conv+BN input carries (0.1215 vs 0.12): now allowed their input's budget (passes.py)
FP16_TOOLS = ["onnxslim+fp16", "onnxslim", "torchscript-folded+fp16", "dynamo+fp16"]


@pytest.mark.slow
@pytest.mark.parametrize("tool", FP16_TOOLS)
def test_clean_fp16_folded_mobilenetv2_passes(tool):
    result = _fp16_run(tool)
    assert result.verdict == "pass", [f"{f.code}: {f.message}" for f in result.findings if f.is_gap]


@pytest.mark.slow
@pytest.mark.parametrize("tool", ["onnxslim+fp16", "onnxslim"])
def test_planted_padding_in_fp16_folded_mobilenetv2_is_found_at_its_conv(tool):
    plant = next(p for p in MOBILENETV2.plants if p.kind == "padding")
    result = _fp16_run(tool, plant)
    assert result.verdict == "gap"
    assert result.first_divergence.module == plant.module, result.first_divergence


# timm's Swin (window attention): norm1 runs before the window partition (Reshape/Transpose; a shifted block rolls
# first, Slice + Concat in the file), attn.qkv/attn.proj are Gemms on [windows x tokens, C] where torch has
# [windows, tokens, C]. An eps planted on norm1 was blamed on norm2 (inherited): the input errors of norm2's cut left
# out the proj output fed in torch's shape, so a correct input was the culprit. A 1% weight on a shifted block's qkv
# was blamed on attn.softmax (the block, attributed by its mask to the mask's Add, was fed there), on proj at
# drop_path1 (the owner search compared shapes, never [windows x tokens, C] with [windows, tokens, C]). Fast test:
# tests/export_diff/test_window_attention.py.
SWIN = Family("swin_tiny", _timm("swin_tiny_patch4_window7_224", img_size=112, window_size=7), _image(112),
              ("dynamo", "onnxslim", "no-scopes"),
              (Plant("eps", "layers.1.blocks.0.norm1"), Plant("eps", "layers.1.blocks.1.norm1"),
               Plant("eps", "layers.1.blocks.0.norm2"), Plant("activation", "layers.1.blocks.0.mlp.act"),
               Plant("weight", "layers.1.blocks.0.mlp.fc1"), Plant("weight", "layers.1.blocks.1.attn.qkv"),
               Plant("weight", "layers.1.blocks.1.attn.proj")), "onnxslim")


@pytest.mark.slow
@pytest.mark.parametrize("tool", SWIN.tools)
def test_clean_swin_file_passes(tool):
    result = run(SWIN, tool)
    assert result.verdict == "pass", [f"{f.code}: {f.message}" for f in result.findings if f.is_gap]


@pytest.mark.slow
@pytest.mark.parametrize("plant", [pytest.param(p, id=f"{p.kind}-{p.module}") for p in SWIN.plants])
def test_planted_change_in_swin_is_found_at_its_module(plant):
    result = run(SWIN, SWIN.plant_tool, plant)
    assert result.verdict == "gap"
    assert found_at(result.first_divergence, plant), (result.first_divergence, plant)

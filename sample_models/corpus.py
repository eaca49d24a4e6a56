"""The deployment-tool corpus: real architectures through the tools users run before they deploy.

Each family is a real architecture built from its library's code (timm, transformers; facenet-pytorch's MTCNN
ONet with the weights its wheel ships), exported, then rewritten by a tool nobody here wrote: onnxslim, ONNX
Runtime's transformer optimizer, an Optimum-style export (TorchScript, dynamic axes, BertModel without
pooler_output), the TorchScript exporter's own Conv+BatchNorm folding, all scopes stripped. export-diff must pass
every clean file (0 false alarms) and find a planted 1% weight change and a planted op change (padding mode,
epsilon, activation) of each family at the module that owns it. The plants are made on the torch side after the
file was written, so the deployed file is the clean tool output and the checkpoint differs from it.

``python -m sample_models.corpus`` prints the table (docs/export-diff.md); ``tests/export_diff/test_corpus.py``
(slow) asserts it.
"""
from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
import torch
from torch import nn

from sample_models import deployed

CNN_TOOLS = ("dynamo", "onnxslim", "torchscript-folded", "no-scopes")


@dataclass(frozen=True)
class Plant:
    kind: str  # weight, padding, eps, activation
    module: str


@dataclass(frozen=True)
class Family:
    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[int], dict[str, np.ndarray]]  # seed -> one sample
    tools: tuple[str, ...]
    plants: tuple[Plant, ...]
    plant_tool: str  # the tool whose file the plants are checked against
    outputs: tuple[str, ...] = ("output",)
    dynamic: bool = False  # the TorchScript export gets dynamic batch/sequence axes (as Optimum writes them)


def _timm(name: str, **kwargs) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        from sample_models.zoo import torchvision_models

        with torchvision_models():
            import timm
        torch.manual_seed(0)
        return deployed.trained_like(timm.create_model(name, pretrained=False, **kwargs))
    return build


def _image(size: int) -> Callable[[int], dict[str, np.ndarray]]:
    return lambda seed: {"x": np.random.default_rng(seed).standard_normal((1, 3, size, size)).astype(np.float32)}


def _tokens(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"input_ids": rng.integers(0, 100, (1, 12)).astype(np.int64), "attention_mask": np.ones((1, 12), np.int64),
            "token_type_ids": np.zeros((1, 12), np.int64)}


def _gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2Model

    class KeywordGPT2(GPT2Model):
        def forward(self, input_ids):  # type: ignore[override]
            return super().forward(input_ids=input_ids, use_cache=False)

    config = GPT2Config(vocab_size=100, n_positions=32, n_embd=32, n_layer=2, n_head=2, use_cache=False)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return KeywordGPT2(config).eval()


def _cnn(name: str, conv: str, act: str, size: int = 64) -> Family:
    return Family(name, _timm(name), _image(size), CNN_TOOLS,
                  (Plant("weight", conv), Plant("padding", conv), Plant("activation", act)), "onnxslim")


FAMILIES: tuple[Family, ...] = (
    _cnn("mobilenetv3_small_100", "blocks.1.0.conv_dw", "blocks.3.0.bn1.act"),
    _cnn("regnety_002", "s2.b1.conv2.conv", "s2.b1.conv2.bn.act"),
    _cnn("resnet18", "layer3.0.conv1", "layer2.1.act2"),
    _cnn("efficientnet_b0", "blocks.3.0.conv_dw", "blocks.4.0.bn1.act"),
    Family("convnext_atto", _timm("convnext_atto"), _image(64), ("dynamo", "onnxslim", "no-scopes"),
           (Plant("weight", "stages.1.blocks.0.mlp.fc1"), Plant("eps", "stages.1.blocks.0.norm"),
            Plant("activation", "stages.1.blocks.0.mlp.act")), "onnxslim"),
    Family("deit_tiny", _timm("deit_tiny_patch16_224", img_size=64), _image(64), ("dynamo", "onnxslim", "no-scopes"),
           (Plant("weight", "blocks.1.mlp.fc1"), Plant("eps", "blocks.1.norm2"), Plant("activation", "blocks.1.mlp.act")),
           "onnxslim"),
    Family("bert", deployed.tiny_bert, _tokens, ("optimum", "ort-optimizer", "optimum+onnxslim"),
           (Plant("weight", "encoder.layer.0.intermediate.dense"), Plant("eps", "encoder.layer.0.output.LayerNorm"),
            Plant("activation", "encoder.layer.0.intermediate.intermediate_act_fn")), "ort-optimizer",
           outputs=("last_hidden_state", "pooler_output"), dynamic=True),
    Family("gpt2", _gpt2, lambda seed: {"input_ids": _tokens(seed)["input_ids"]}, ("dynamo", "ort-optimizer", "no-scopes"),
           (Plant("weight", "h.0.mlp.c_fc"), Plant("eps", "h.0.ln_2"), Plant("activation", "h.0.mlp.act")),
           "ort-optimizer", outputs=("last_hidden_state",)),
    Family("mtcnn_onet", deployed.mtcnn_onet, _image(48), ("torchscript-folded", "onnxslim", "no-scopes"),
           (Plant("weight", "conv3"), Plant("activation", "prelu3")), "onnxslim", outputs=("b", "c", "a")),
)


def tool_file(family: Family, module: nn.Module, sample: dict[str, np.ndarray], tool: str) -> onnx.ModelProto:
    """The ONNX file ``tool`` hands the user for ``module``."""
    args = tuple(torch.from_numpy(a) for a in sample.values())
    names = list(sample)
    dynamic = {n: {0: "batch", 1: "sequence"} if sample[n].ndim == 2 else {0: "batch"} for n in names}
    if tool in ("optimum", "ort-optimizer", "optimum+onnxslim") and family.name == "bert":
        # Optimum's feature-extraction export of a BertModel: TorchScript, dynamic axes, last_hidden_state only
        full = deployed.export(module, args, names, list(family.outputs), dynamo=False, dynamic_axes=dynamic)
        base = deployed.without_output(full, "pooler_output")
        if tool == "ort-optimizer":
            return deployed.ort_optimized(base, num_heads=2, hidden_size=32)
        return deployed.slimmed(base) if tool == "optimum+onnxslim" else base
    if tool == "torchscript-folded":  # the TorchScript exporter folds each BatchNorm into its Conv
        return deployed.export(module, args, names, list(family.outputs), dynamo=False,
                               dynamic_axes=dynamic if family.dynamic else None)
    base = deployed.export(module, args, names, list(family.outputs))
    if tool == "onnxslim":
        return deployed.slimmed(base)
    if tool == "no-scopes":
        return deployed.without_scopes(base)
    if tool == "ort-optimizer":
        return deployed.ort_optimized(base, num_heads=2, hidden_size=32)
    return base


def planted(module: nn.Module, plant: Plant) -> nn.Module:
    """A copy of ``module`` with ``plant`` applied: the checkpoint no longer matches the deployed file there."""
    changed = copy.deepcopy(module)
    target = dict(changed.named_modules())[plant.module]
    with torch.no_grad():
        if plant.kind == "weight":
            target.weight.mul_(1.01)
        elif plant.kind == "padding":
            target.padding_mode = "reflect"  # same shapes, other border values (a TF-style padding port)
        elif plant.kind == "eps":
            target.eps = 0.1
    if plant.kind == "activation":
        parent_path, _, name = plant.module.rpartition(".")
        parent = dict(changed.named_modules())[parent_path]
        setattr(parent, name, _other_activation(target))
    return changed


def _other_activation(act: nn.Module) -> nn.Module:
    """Another activation, as a port that picked the wrong one would have: GELU -> SiLU, SiLU -> Hardswish,
    Hardswish -> SiLU, (P)ReLU -> LeakyReLU(0.1). (GELU's tanh approximation differs by ~1e-6 on the small
    activations of these seeded models: below any tolerance, and harmless there.)"""
    kind = type(act).__name__
    if "gelu" in kind.lower():
        return nn.SiLU()
    if kind in ("SiLU", "Swish"):
        return nn.Hardswish()
    if kind == "Hardswish":
        return nn.SiLU()
    return nn.LeakyReLU(0.1)


def found_at(first_divergence, plant: Plant) -> bool:
    """The first divergence names the planted module: itself, the fused group it is in, or its direct parent
    (a module whose own op is the planted one, as a BatchNormAct whose activation changed)."""
    if first_divergence is None:
        return False
    module = first_divergence.module
    parent = plant.module.rpartition(".")[0]
    return module == plant.module or plant.module in first_divergence.group or module == parent


def run(family: Family, tool: str, plant: Plant | None = None, samples: int = 2):
    from gapcheck.export_diff.runner import export_diff

    module = family.build()
    inputs = [family.inputs(seed) for seed in range(samples)]
    onnx_model = tool_file(family, module, inputs[0], tool)
    compared = planted(module, plant) if plant else module
    return export_diff(compared, inputs, onnx_model=onnx_model)


def table() -> list[str]:
    """The corpus table: per family and tool, the clean verdict; per family, where each plant was found."""
    rows = ["| family | tool | clean file | planted (on the tool's file) |", "|---|---|---|---|"]
    for family in FAMILIES:
        for tool in family.tools:
            result = run(family, tool)
            gaps = [f.code for f in result.findings if f.is_gap]
            compared = sum(1 for layer in result.layers if layer.status in ("pass", "fail"))
            clean = "pass" if not gaps else "FALSE ALARM: " + ", ".join(gaps)
            plants = ""
            if tool == family.plant_tool:
                found = []
                for plant in family.plants:
                    fd = run(family, tool, plant).first_divergence
                    where = fd.module if fd else "-"
                    verdict = f"found at {where}" if found_at(fd, plant) else f"MISSED ({where})"
                    found.append(f"{plant.kind} {plant.module}: {verdict}")
                plants = "; ".join(found)
            rows.append(f"| {family.name} | {tool} | {clean} ({compared} modules compared) | {plants} |")
    return rows


if __name__ == "__main__":
    print("\n".join(table()))

"""Real architectures built in code with seeded random weights: the zoo export-diff must pass without false alarms.

Nothing is downloaded: torchvision models are built with ``weights=None``, transformers models
from small configs (``from_config``), and every builder seeds torch first so two runs compare
the same weights.

torchvision: the wheel PyPI serves is built against the CUDA torch, so its compiled ops
(``torchvision::nms``) cannot load beside the CPU torch, and ``import torchvision`` fails in
its ``_meta_registrations``. Installed into the venv it would also break ``transformers``, which
imports torchvision whenever it finds it. So it lives outside ``site-packages``, in a folder of
its own that only this module reads (``scripts/setup_zoo.sh``)::

    .venv/bin/pip install --no-deps --target .venv/zoo-site torchvision==0.28.0

and :func:`torchvision_models` imports ``torchvision.models`` from there under a bare package
shell, for the time a model is built: ``torchvision/__init__.py`` is not run, so the C extension is never loaded; the model
definitions are pure Python. ``GAPCHECK_TORCHVISION_DIR`` points elsewhere; a torchvision that
imports normally (a matching CPU build) is used as it is.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

SEED = 0


TORCHVISION_DIR = Path(os.environ.get("GAPCHECK_TORCHVISION_DIR", Path(__file__).resolve().parents[1] / ".venv" / "zoo-site"))


@contextmanager
def torchvision_models() -> Iterator[ModuleType]:
    """``torchvision.models`` without loading torchvision's C extension (see the module docstring).

    A context: the package shell is taken out of ``sys.modules`` afterwards, so libraries that probe for
    torchvision (transformers does, and reads its version) do not find a half-installed one. The models
    built inside keep working; their classes simply are not importable by name once it closes.
    """
    if "torchvision" in sys.modules and getattr(sys.modules["torchvision"], "__version__", None):
        yield importlib.import_module("torchvision.models")  # a real, working torchvision
        return
    spec = importlib.machinery.PathFinder.find_spec("torchvision", [str(TORCHVISION_DIR)])
    if spec is None:
        try:  # a torchvision whose compiled ops match this torch imports as it is
            importlib.import_module("torchvision")
        except Exception as exc:  # noqa: BLE001 - ImportError, or the CUDA build's RuntimeError
            raise ImportError(
                f"no usable torchvision: install its model definitions with "
                f"'pip install --no-deps --target {TORCHVISION_DIR} torchvision==0.28.0' ({exc})"
            ) from exc
        yield importlib.import_module("torchvision.models")
        return
    before = set(sys.modules)
    # A package shell: submodules resolve through its __path__, its __init__ never runs.
    sys.modules["torchvision"] = importlib.util.module_from_spec(spec)
    try:
        yield importlib.import_module("torchvision.models")
    finally:
        for name in set(sys.modules) - before:
            if name == "torchvision" or name.startswith("torchvision."):
                del sys.modules[name]


def _seeded(build: Callable[[], nn.Module]) -> nn.Module:
    torch.manual_seed(SEED)
    model = build()
    return model.eval()


# --- torchvision ---------------------------------------------------------------------------------


def _tv(name: str, **kwargs) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        with torchvision_models() as models:
            if name.startswith("segmentation."):
                factory = getattr(importlib.import_module("torchvision.models.segmentation"), name.split(".", 1)[1])
            else:
                factory = getattr(models, name)
            return _seeded(lambda: factory(weights=None, **kwargs))

    build.__name__ = name.replace(".", "_")
    return build


def vit_tiny() -> nn.Module:
    """torchvision's VisionTransformer at test size (its reshapes over the batch get dynamo's inserted checks)."""
    with torchvision_models() as models:
        return _seeded(lambda: models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                                        hidden_dim=32, mlp_dim=64, num_classes=10))


def swin_tiny() -> nn.Module:
    """torchvision's SwinTransformer (shifted windows, relative position bias) at test size."""
    with torchvision_models() as models:
        return _seeded(lambda: models.SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2],
                                                      num_heads=[2, 2], window_size=[4, 4], num_classes=10))


def convnext_mini() -> nn.Module:
    """torchvision's ConvNeXt (depthwise conv, LayerNorm2d, layer scale, stochastic depth) at test size."""
    with torchvision_models() as models:
        from torchvision.models.convnext import CNBlockConfig

        return _seeded(lambda: models.ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)], num_classes=10))


resnet18 = _tv("resnet18")
resnet50 = _tv("resnet50")
mobilenet_v3_small = _tv("mobilenet_v3_small")
efficientnet_b0 = _tv("efficientnet_b0")
convnext_tiny = _tv("convnext_tiny")
regnet_y_400mf = _tv("regnet_y_400mf")
squeezenet1_1 = _tv("squeezenet1_1")
densenet121 = _tv("densenet121")
vit_b_16 = _tv("vit_b_16")
swin_t = _tv("swin_t")
fcn_resnet50 = _tv("segmentation.fcn_resnet50", weights_backbone=None, num_classes=21, aux_loss=False)
lraspp_mobilenet_v3_large = _tv("segmentation.lraspp_mobilenet_v3_large", weights_backbone=None, num_classes=21)


# --- transformers (small configs, no hub) ---------------------------------------------------------


def _hf(build_config: Callable[[], Any], model_class: str) -> nn.Module:
    import transformers

    config = build_config()
    config._attn_implementation = "eager"  # one attention kernel for torch and the exporter
    return _seeded(lambda: getattr(transformers, model_class)(config))


def _bert_config(**extra):
    from transformers import BertConfig

    return BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=128, max_position_embeddings=64, **extra)


def bert() -> nn.Module:
    """BertModel: returns a ModelOutput (last_hidden_state, pooler_output)."""
    return _hf(_bert_config, "BertModel")


def bert_classifier() -> nn.Module:
    """BertForSequenceClassification: a ModelOutput holding ``logits`` only."""
    return _hf(lambda: _bert_config(num_labels=3), "BertForSequenceClassification")


def _gpt2_config(use_cache: bool):
    from transformers import GPT2Config

    return GPT2Config(vocab_size=1000, n_positions=64, n_embd=64, n_layer=2, n_head=4, use_cache=use_cache)


def gpt2() -> nn.Module:
    """GPT2LMHeadModel without a cache: logits only."""
    return _hf(lambda: _gpt2_config(False), "GPT2LMHeadModel")


class GPT2WithPast(nn.Module):
    """GPT-2 with use_cache, returning logits and past_key_values per layer as {"key", "value"} (the legacy layout).

    Neither exporter can return transformers' ``DynamicCache`` object itself (see ``gpt2_dynamic_cache``);
    this is how such a model is exported for serving.
    """

    def __init__(self) -> None:
        super().__init__()
        self.model = _hf(lambda: _gpt2_config(True), "GPT2LMHeadModel")

    def forward(self, input_ids: torch.Tensor) -> dict:
        out = self.model(input_ids, use_cache=True)
        cache = getattr(out, "past_key_values", None) or out.cache
        return {"logits": out.logits,
                "past_key_values": tuple({"key": layer.keys, "value": layer.values} for layer in cache.layers)}


def gpt2_cache() -> nn.Module:
    return GPT2WithPast().eval()


def gpt2_dynamic_cache() -> nn.Module:
    """GPT2LMHeadModel with use_cache, returning its ``DynamicCache`` (registered with pytree the way transformers'
    export support does). The exporters cannot export it: export-diff must say so (exit 2), not report a gap."""
    from transformers.integrations.executorch import register_dynamic_cache_export_support

    register_dynamic_cache_export_support()
    return _hf(lambda: _gpt2_config(True), "GPT2LMHeadModel")


def vit_hf() -> nn.Module:
    from transformers import ViTConfig

    return _hf(lambda: ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, intermediate_size=128), "ViTModel")


def t5_encoder() -> nn.Module:
    from transformers import T5Config

    return _hf(lambda: T5Config(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4),
               "T5EncoderModel")


# --- the zoo table --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ZooModel:
    name: str
    factory: str  # pkg.module:callable, as --model takes it
    inputs: tuple[str, ...]
    exporters: tuple[str, ...] = ("dynamo", "torchscript")
    small: bool = False  # cheap enough for the default (CI) test run
    options: dict = field(default_factory=dict)
    # Exporters that cannot export this model: export-diff must say so (exit 2 with the exporter's error), not a gap.
    unexportable: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()  # the output names export-diff must report, when they are worth checking


def _m(name: str, inputs: tuple[str, ...], **kwargs) -> ZooModel:
    return ZooModel(name, f"sample_models.zoo:{name}", inputs, **kwargs)


IMAGE_32 = ("x:1x3x32x32:float32",)
IMAGE_224 = ("x:1x3x224x224:float32",)
IMAGE_128 = ("x:1x3x128x128:float32",)
TOKENS = ("input_ids:1x16:int64:0,1000",)

ZOO: tuple[ZooModel, ...] = (
    _m("vit_tiny", IMAGE_32, small=True),
    _m("swin_tiny", IMAGE_32, small=True),
    _m("convnext_mini", IMAGE_32, small=True),
    _m("resnet18", IMAGE_128, small=True),
    _m("squeezenet1_1", IMAGE_128, small=True),
    _m("mobilenet_v3_small", IMAGE_128, small=True),
    _m("resnet50", IMAGE_224),
    _m("efficientnet_b0", IMAGE_224),
    _m("convnext_tiny", IMAGE_224),
    _m("regnet_y_400mf", IMAGE_224),
    _m("densenet121", IMAGE_224),
    _m("vit_b_16", IMAGE_224),
    _m("swin_t", IMAGE_224),
    _m("fcn_resnet50", IMAGE_128),
    _m("lraspp_mobilenet_v3_large", IMAGE_128),
    # BertModel.forward takes use_cache, which the TorchScript exporter passes twice
    _m("bert", TOKENS, small=True, unexportable=("torchscript",), outputs=("last_hidden_state", "pooler_output")),
    _m("bert_classifier", TOKENS, small=True, outputs=("logits",)),
    _m("gpt2", TOKENS, unexportable=("torchscript",)),  # aten::diff has no opset-17 symbolic
    _m("gpt2_cache", TOKENS, small=True,
       outputs=("logits", "past_key_values.0.key", "past_key_values.0.value", "past_key_values.1.key",
                "past_key_values.1.value")),
    _m("gpt2_dynamic_cache", TOKENS, unexportable=("dynamo", "torchscript")),
    _m("vit_hf", ("pixel_values:1x3x32x32:float32",), small=True),
    _m("t5_encoder", TOKENS),
)

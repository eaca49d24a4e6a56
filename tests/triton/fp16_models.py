"""Models an FP16 Triton deployment serves in the tests: converted to FP16 as deployments do
(onnxconverter-common, ``keep_io_types=False``: FP16 inputs and outputs), declared ``TYPE_FP16`` in config.pbtxt."""
from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch import nn


class HalfNet(nn.Module):
    """Two outputs of the same shape and type (``y``, ``z``): a deployment that swaps them differs by value only."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.act = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(4, 5)
        self.aux = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = torch.flatten(self.pool(self.act(self.conv(x))), 1)
        return self.head(features), self.aux(features)


class LargeActivationNet(nn.Module):
    """Two large Linear layers (T5's feed-forward pattern, MatMul on (batch, 1, features)) whose outputs reach 1e5:
    fine in FP32, but beyond FP16's 65504, so an FP16 deployment returns Inf."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.wi = nn.Linear(4, 8)
        self.act = nn.ReLU()
        self.wo = nn.Linear(8, 5)
        with torch.no_grad():
            self.wi.weight.mul_(3000.0)
            self.wo.weight.mul_(3000.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = torch.flatten(self.pool(self.conv(x)), 2).transpose(1, 2)  # (batch, 1, 4)
        return torch.flatten(self.wo(self.act(self.wi(tokens))), 1)


def build_half() -> HalfNet:
    torch.manual_seed(0)
    return HalfNet().eval()


def build_large_activation() -> LargeActivationNet:
    torch.manual_seed(0)
    return LargeActivationNet().eval()


def fp16_onnx(module: nn.Module, outputs: list[str], planted: str | None = None) -> onnx.ModelProto:
    """``module`` exported, then converted to FP16 with FP16 inputs and outputs; ``planted`` gets +0.25."""
    from onnxconverter_common import float16

    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.zeros(1, 3, 8, 8),), buffer, input_names=["x"], output_names=outputs,
                          dynamic_axes={name: {0: "batch"} for name in ["x", *outputs]}, dynamo=False,
                          opset_version=17)
        model = float16.convert_float_to_float16(onnx.load_from_string(buffer.getvalue()), keep_io_types=False)
    if planted:
        tensor = next(t for t in model.graph.initializer if t.name == planted)
        tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor) + np.float16(0.25), planted))
    return model


def fp16_config(name: str, outputs: list[str], parameters: dict[str, str] | None = None) -> str:
    """A Python-backend config that declares every tensor FP16, as a deployment of an FP16 file does."""
    params = "".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in (parameters or {}).items())
    declared = ", ".join(f'{{ name: "{o}" data_type: TYPE_FP16 dims: [ 5 ] }}' for o in outputs)
    return (f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n'
            'input [ { name: "x" data_type: TYPE_FP16 dims: [ 3, 8, 8 ] } ]\n'
            f"output [ {declared} ]\ninstance_group [ {{ kind: KIND_CPU count: 1 }} ]\n{params}")


class Bert(nn.Module):
    """A transformers BERT built from its config (random weights), called as users wrap it for serving."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import BertConfig, BertModel

        self.bert = BertModel(BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=128, max_position_embeddings=64))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.bert(input_ids=input_ids, attention_mask=attention_mask)
        return out.last_hidden_state, out.pooler_output


def build_bert() -> Bert:
    torch.manual_seed(0)
    return Bert().eval()


def bert_fp16_onnx(planted: str | None = None) -> onnx.ModelProto:
    """The BERT exported with token-id inputs and converted to FP16 (int64 inputs, FP16 outputs)."""
    from onnxconverter_common import float16

    names = ["input_ids", "attention_mask", "last_hidden_state", "pooler_output"]
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(build_bert(), (torch.randint(0, 1000, (1, 16)), torch.ones(1, 16, dtype=torch.int64)),
                          buffer, input_names=names[:2], output_names=names[2:], dynamo=False, opset_version=17,
                          dynamic_axes={name: {0: "batch"} if name == "pooler_output" else {0: "batch", 1: "tokens"}
                                        for name in names})
        model = float16.convert_float_to_float16(onnx.load_from_string(buffer.getvalue()), keep_io_types=False)
    if planted:
        tensor = next(t for t in model.graph.initializer if t.name == planted)
        tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor) + np.float16(0.1), planted))
    return model


BERT_CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] }},
        {{ name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] }} ]
output [ {{ name: "last_hidden_state" data_type: TYPE_FP16 dims: [ -1, 64 ] }},
         {{ name: "pooler_output" data_type: TYPE_FP16 dims: [ 64 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""

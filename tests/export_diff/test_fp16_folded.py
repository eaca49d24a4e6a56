"""export-diff on an FP16 file whose BatchNorms are folded into their Convs (onnxslim, or the TorchScript exporter,
then onnxconverter_common's FP16 conversion, as deployments do).

The folded Conv keeps the conv's weight name, so by name the bare ``Conv2d`` output would be compared with
conv -> batch_norm: a false ``layer_divergence`` at the first conv ("conv.weight differs from the checkpoint") on a
clean file. The re-check by value runs under the run's FP16 budgets and compares the fused group as a group.
"""
from __future__ import annotations

import json
import warnings

import onnx
import pytest
import torch
from torch import nn

from gapcheck.cli.app import main
from gapcheck.model.onnx_file import computes_in_fp16
from sample_models import deployed

SPEC = "x:1x3x32x32:float32"


class _BatchNormAct(nn.BatchNorm2d):
    """BatchNorm with its activation inside, as timm's ``BatchNormAct2d``: the module's output is after the
    activation, so no ONNX value holds it once a tool folds the BatchNorm into the Conv."""

    def __init__(self, channels: int, act: bool = True) -> None:
        super().__init__(channels)
        self.act = nn.ReLU6() if act else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(super().forward(x))


class _ConvBnNet(nn.Module):
    """Conv -> BatchNormAct blocks without conv biases (a small MobileNet-like stem and body), a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1, bias=False), _BatchNormAct(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), _BatchNormAct(16)
        self.conv3, self.bn3 = nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False), _BatchNormAct(16, act=False)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.bn2(self.conv2(self.bn1(self.conv1(x))))
        x = x + self.bn3(self.conv3(x))
        return self.fc(self.pool(x).flatten(1))


def build() -> nn.Module:
    """Seeded, with trained-like BatchNorm statistics: folding changes each conv's weight by far more than 5%."""
    torch.manual_seed(0)
    return deployed.trained_like(_ConvBnNet()).eval()


def build_padding_planted() -> nn.Module:
    """The same weights, ``conv2`` padding its border by reflection (a port with another padding mode)."""
    model = build()
    model.conv2.padding_mode = "reflect"
    return model


def _fp16_file(tmp_path, tool: str) -> str:
    module = build()
    example = torch.randn(1, 3, 32, 32)
    base = deployed.export(module, (example,), ["x"], ["output"], dynamo=tool == "onnxslim")
    folded = deployed.slimmed(base) if tool == "onnxslim" else base  # the TorchScript exporter folds BN itself
    assert not any(n.op_type == "BatchNormalization" for n in folded.graph.node)
    assert any(t.name == "conv1.weight" for t in folded.graph.initializer) or tool == "torchscript"
    from onnxconverter_common import float16

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "values truncated to fp16"
        model = float16.convert_float_to_float16(folded, keep_io_types=True)
    assert computes_in_fp16(model)
    path = tmp_path / f"{tool}_fp16.onnx"
    onnx.save(model, str(path))
    return str(path)


def _run(tmp_path, factory: str, onnx_file: str, *extra: str) -> tuple[int, dict]:
    report = tmp_path / "report.json"
    code = main(["export-diff", "--model", f"tests.export_diff.test_fp16_folded:{factory}", "--input", SPEC,
                 "--onnx", onnx_file, "--num-samples", "2", "--json", str(report), "--no-progress", "--no-cache",
                 *extra])
    return code, json.loads(report.read_text()) if report.exists() else {}


@pytest.mark.parametrize("tool", ["onnxslim", "torchscript"])
def test_clean_fp16_file_with_folded_batchnorm_passes(tmp_path, tool):
    code, report = _run(tmp_path, "build", _fp16_file(tmp_path, tool))
    assert code == 0, [f["message"] for f in report.get("findings", []) if f["severity"] == "gap"]
    assert report["precision"] == "fp16"
    layers = {layer["module"]: layer for layer in report["layers"]}
    # the folded conv is compared as its group (conv -> batch_norm), and agrees
    assert layers["conv1"]["status"] == "pass" and "fused group" in str(layers["conv1"]["note"])
    assert "differs from the checkpoint" not in json.dumps(report["findings"])


def test_fp32_file_asked_fp16_budgets_with_folded_batchnorm_passes(tmp_path):
    """--precision fp16 on the FP32 onnxslim file: converted for the run, compared under FP16 budgets, clean."""
    model = deployed.slimmed(deployed.export(build(), (torch.randn(1, 3, 32, 32),), ["x"], ["output"]))
    path = tmp_path / "slim.onnx"
    onnx.save(model, str(path))
    code, report = _run(tmp_path, "build", str(path), "--precision", "fp16")
    assert code == 0, [f["message"] for f in report.get("findings", []) if f["severity"] == "gap"]
    assert report["precision"] == "fp16"


@pytest.mark.parametrize("tool", ["onnxslim", "torchscript"])
def test_planted_padding_in_fp16_folded_file_is_named_at_the_conv(tmp_path, tool):
    code, report = _run(tmp_path, "build_padding_planted", _fp16_file(tmp_path, tool))
    assert code == 1
    first = report["first_divergence"]
    assert (first["module"], first["cause"]) == ("conv2", "local"), first  # not bn2 nor act2: the conv owns it


def test_a_relu6_under_fp16_budgets_is_allowed_the_error_its_input_is_allowed():
    """FP16 budgets scale with the tensor's range: a ReLU6 (range clipped to 6) reading a Conv+BatchNorm value that
    ranges to 24 failed with the very error its passing input carried (timm mobilenetv2_100 through the TorchScript
    exporter and FP16: exit 1 at blocks.4.2.bn2.act). The activation is allowed its input's budget."""
    from types import SimpleNamespace

    import numpy as np
    from onnx import helper

    from gapcheck.compare import TolerancePolicy
    from gapcheck.export_diff.passes import LayerAccumulator, _activation_inputs, _compare_layer

    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["conv"]), helper.make_node("Clip", ["conv", "lo", "hi"], ["act"]),
         helper.make_node("Mul", ["act", "act"], ["sq"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("sq", onnx.TensorProto.FLOAT, None)])
    assert _activation_inputs(helper.make_model(graph), {"act", "sq"}) == {"act": "conv"}  # Mul is no activation
    conv = np.linspace(-24, 24, 64, dtype=np.float32)
    reference = np.clip(conv, 0, 6)
    actual = reference + np.float32(0.1215) * (reference > 0)  # the input's own error, carried through
    capture = SimpleNamespace(modules={"act": SimpleNamespace(output=reference)})
    policy = TolerancePolicy(precision="fp16")

    def compare(input_absmax):
        return _compare_layer(LayerAccumulator(), capture, "act", "act", {"act": actual}, 0, policy, "fp16",
                              input_absmax=input_absmax)
    assert not compare(None).passed  # 0.1215 over 0.02 x 6
    assert compare(24.0).passed  # within 0.02 x 24, as the input is
    assert not _compare_layer(LayerAccumulator(), capture, "act", "act", {"act": reference + np.float32(1.0)}, 0,
                              policy, "fp16", input_absmax=24.0).passed  # a real change still fails

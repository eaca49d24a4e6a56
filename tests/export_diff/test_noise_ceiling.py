"""A 1% change of one weight in a layer with tiny activations: under the 1e-4 absolute floor, caught by the ceiling."""
from __future__ import annotations

import json

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from gapcheck.cli.app import main


class SmallActivations(torch.nn.Module):
    """The middle layer's outputs are ~1e-3 (its weights are scaled down), as deep layers of some real nets are."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.act = torch.nn.ReLU()
        self.small = torch.nn.Linear(32, 32)
        self.head = torch.nn.Linear(32, 4)
        with torch.no_grad():
            self.small.weight.mul_(1e-3)
            self.small.bias.mul_(1e-3)

    def forward(self, x):
        return self.head(self.small(self.act(self.fc1(x))))


def build() -> torch.nn.Module:
    torch.manual_seed(0)
    return SmallActivations().eval()


ARGS = ["export-diff", "--model", "tests.export_diff.test_noise_ceiling:build", "--input", "x:1x16:float32",
        "--num-samples", "2", "--no-progress", "--no-cache", "--exporter", "torchscript"]


def test_clean_passes_and_a_one_percent_weight_change_in_a_tiny_layer_is_found(tmp_path, capsys):
    exported = tmp_path / "clean.onnx"
    assert main([*ARGS, "--save-onnx", str(exported)]) == 0, capsys.readouterr().out
    model = onnx.load(str(exported))
    weights = build().small.weight.detach().numpy()
    for init in model.graph.initializer:  # the initializer holding small.weight (as stored, maybe transposed)
        values = numpy_helper.to_array(init)
        if values.shape in (weights.shape, weights.T.shape) and np.allclose(np.abs(values).max(), np.abs(weights).max()):
            changed = values.copy()
            flat = np.abs(changed).argmax()
            changed.flat[flat] *= np.float32(1.01)
            init.CopyFrom(numpy_helper.from_array(changed, init.name))
            break
    else:
        raise AssertionError("small.weight not found among the initializers")
    planted = tmp_path / "planted.onnx"
    onnx.save(model, str(planted))
    report = tmp_path / "r.json"
    code = main([*ARGS, "--onnx", str(planted), "--json", str(report)])
    assert code == 1, capsys.readouterr().out
    doc = json.loads(report.read_text())
    small = next(layer for layer in doc["layers"] if layer["module"] == "small")
    assert small["status"] == "fail" and small["error"]["max_abs"] < 1e-4  # under the old floor: missed before
    assert doc["first_divergence"]["module"] == "small"

"""model/export: both exporters name the graph after the model (input names as given, outputs by key path)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from gapcheck.model.export import export_onnx
from gapcheck.model.outputs import named_tensor_leaves, output_names


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 3)

    def forward(self, features, mask):
        hidden = self.body(features) * mask
        return {"logits": hidden, "pooled": (hidden.mean(dim=1),)}


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_graph_inputs_keep_the_given_names_and_outputs_the_models_key_paths(exporter):
    sample = {"features": np.ones((2, 4), np.float32), "mask": np.ones((2, 3), np.float32)}
    names = output_names(TwoHeads().eval(), sample)
    assert names == ["logits", "pooled.0"]
    result = export_onnx(TwoHeads().eval(), sample, exporter=exporter, fallback=False, output_names=names)
    assert [i.name for i in result.model.graph.input] == ["features", "mask"]
    assert [o.name for o in result.model.graph.output] == names
    assert result.exporter == exporter


def test_named_tensor_leaves_names_a_bare_tensor_output_and_skips_non_tensors():
    assert [n for n, _ in named_tensor_leaves(torch.zeros(1))] == ["output"]
    assert [n for n, _ in named_tensor_leaves((torch.zeros(1), None, 3, [torch.ones(1)]))] == ["0", "3.0"]

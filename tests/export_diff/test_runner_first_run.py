"""Comparing an ONNX file (or the deployment audit's export): one run of the model on the first sample both checks
that it accepts the inputs and gives the values compared; a clean run makes no other."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from gapcheck.export_diff.runner import export_diff
from gapcheck.model.export import export_onnx

RUNS: list[int] = []


class Counted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(6, 3)
        self.bn = nn.BatchNorm1d(3).eval()

    def forward(self, x):
        RUNS.append(1)
        return {"logits": self.bn(self.fc(x)), "hidden": self.fc(x)}


def test_the_first_sample_runs_the_model_once_and_outputs_keep_their_names():
    module = Counted().eval()
    samples = [{"x": np.full((2, 6), float(i), np.float32)} for i in range(3)]
    exported = export_onnx(module, samples[0], exporter="torchscript").model
    RUNS.clear()
    result = export_diff(module, samples, onnx_model=exported)
    assert result.verdict == "pass", [f.message for f in result.findings]
    assert len(RUNS) == len(samples)  # no separate input check, no float64 run on a clean model
    graph_outputs = tuple(o.name for o in exported.graph.output)  # the torch outputs are named as the file's, by position
    assert len(graph_outputs) == 2 and result.model_outputs == graph_outputs
    assert {o.name for o in result.outputs} == set(graph_outputs) and all(o.status == "pass" for o in result.outputs)
    assert {x.module for x in result.layers if x.stats is not None} >= {"fc", "bn"}

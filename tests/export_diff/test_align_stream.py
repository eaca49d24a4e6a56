"""The search by value (gapcheck/export_diff/align.py) never holds every ONNX value of a sample at once: ONNX
Runtime's values come in runs of about ``VALUE_CHUNK_BYTES``, each fed to every module's search and dropped, and
the answer is the same as with all values at hand."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from gapcheck.backends.onnxruntime import OnnxRuntimeBackend
from gapcheck.export_diff import align
from gapcheck.export_diff.runner import export_diff
from sample_models import deployed


@pytest.fixture(scope="module")
def planted_slimmed():
    """onnxslim's Conv+BN fusion and a 1% weight change on conv2: the run diverges, so the search by value runs."""
    model = deployed.conv_bn_net()
    rng = np.random.default_rng(0)
    samples = [{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(2)]
    onnx_model = deployed.slimmed(deployed.export(model, (torch.from_numpy(samples[0]["x"]),), ["x"], ["y"]))
    changed = copy.deepcopy(model)
    with torch.no_grad():
        changed.conv2.weight.mul_(1.01)
    return changed, samples, onnx_model


def _runs(monkeypatch) -> list[int]:
    """How many values each run of the value search asked ONNX Runtime for."""
    sizes: list[int] = []
    infer = OnnxRuntimeBackend.infer

    def counting(self, feeds, output_names=None):
        if self.name == "onnxruntime-values" and output_names is not None:
            sizes.append(len(output_names))
        return infer(self, feeds, output_names)

    monkeypatch.setattr(OnnxRuntimeBackend, "infer", counting)
    return sizes


def _summary(result):
    return ([(layer.module, layer.status, layer.note) for layer in result.layers], result.first_divergence)


def test_values_are_fetched_in_bounded_runs_with_the_same_answer(planted_slimmed, monkeypatch):
    model, samples, onnx_model = planted_slimmed
    whole = export_diff(model, samples, onnx_model=onnx_model)
    assert whole.first_divergence is not None and whole.first_divergence.module == "conv2"
    sizes = _runs(monkeypatch)
    monkeypatch.setattr(align, "_FIRST_RUN_VALUES", 2)
    monkeypatch.setattr(align, "VALUE_CHUNK_BYTES", 1)  # one value per run after the first
    streamed = export_diff(model, samples, onnx_model=onnx_model)
    assert _summary(streamed) == _summary(whole)
    total = len(align._float_values(onnx_model))
    assert total > 3
    search = sizes[:total - 1]  # the search's runs (2 values, then 1 each); the other samples' check follows
    assert search == [2] + [1] * (total - 2)

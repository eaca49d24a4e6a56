"""Does an ONNX file belong to the model: evidence only from parameters and outputs, never from scope names."""
from __future__ import annotations

import torch
from torch import nn

from gapcheck.model.export import export_onnx
from gapcheck.model.fit import attribute_by_weights, check_fit
from gapcheck.model.mapping import index_graph
from sample_models.cnn import build_small_resnet


def _export(module, shape=(1, 3, 32, 32), exporter="dynamo"):
    return export_onnx(module, {"x": torch.randn(*shape).numpy()}, exporter=exporter).model


def test_own_exports_fit_with_both_exporters():
    module = build_small_resnet()
    for exporter in ("dynamo", "torchscript"):
        fit = check_fit(_export(module, exporter=exporter), module, 1)
        assert fit.fits, (exporter, fit.evidence)


def test_other_shapes_unknown_parameters_and_output_counts_are_evidence():
    model = build_small_resnet(num_classes=10)
    other = _export(build_small_resnet(num_classes=7))
    fit = check_fit(other, model, 1)
    assert not fit.fits
    assert "fc.weight is [7, 16] in the graph, [10, 16] in the model" in fit.evidence[0]
    assert fit.details["parameters_reshaped"]["fc.weight"] == {"onnx": [7, 16], "model": [10, 16]}
    outputs = check_fit(_export(model), model, 2)
    assert any("the graph has 1 outputs, the model returns 2" in e for e in outputs.evidence)

    class Wider(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(3 * 32 * 32, 5)

        def forward(self, x):
            return self.proj(x.flatten(1))

    unknown = check_fit(_export(Wider().eval()), model, 1)
    assert any("proj.weight [5, 3072]" in e for e in unknown.evidence)


def test_unknown_scopes_alone_are_context_not_evidence():
    module = build_small_resnet()
    fit = check_fit(_export(module), module, 1, unknown_scopes=("_empty_nn_module_stack_from_metadata_hook",))
    assert fit.fits and fit.details["unknown_modules"] == ["_empty_nn_module_stack_from_metadata_hook"]


def test_weights_matched_by_value_name_the_consuming_node():
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4)).eval()
    model = _export(module, shape=(1, 8))
    for node in model.graph.node:
        node.name = ""
        del node.metadata_props[:]
    mapped = attribute_by_weights(model, module, index_graph(model))
    assert set(mapped) == {"0", "2"} and all(m.how == "weights" for m in mapped.values())
    produced = {o for n in model.graph.node for o in n.output}
    assert all(m.value in produced for m in mapped.values())

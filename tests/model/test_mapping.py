"""Module paths to ONNX values, for both exporters' scope conventions."""
from __future__ import annotations

import onnx
import torch
from onnx import helper

from gapcheck.model.export import export_onnx
from gapcheck.model.mapping import map_modules, node_scopes, node_source, with_extra_outputs
from sample_models.cnn import build_small_resnet


def test_dynamo_metadata_scopes_and_source():
    node = helper.make_node("Relu", ["a"], ["b"], name="node_relu")
    entry = node.metadata_props.add()
    entry.key, entry.value = "pkg.torch.onnx.name_scopes", "['', 'layer1', 'layer1.0', 'layer1.0.relu', 'relu']"
    trace = node.metadata_props.add()
    trace.key = "pkg.torch.onnx.stack_trace"
    trace.value = ('File "/src/model.py", line 12, in forward\n    y = self.layer1(x)\n'
                   'File "/venv/lib/torch/nn/modules/container.py", line 250, in forward\n'
                   'File "/src/blocks.py", line 30, in forward\n    return self.relu(x)')
    assert node_scopes(node) == ("layer1", "layer1.0", "layer1.0.relu")
    assert node_source(node) == "/src/blocks.py:30"


def test_torchscript_node_names_become_fully_qualified_scopes():
    node = helper.make_node("Conv", ["a"], ["b"], name="/layer1/layer1.0/conv1/Conv")
    assert node_scopes(node) == ("layer1", "layer1.0", "layer1.0.conv1")
    assert node_scopes(helper.make_node("Relu", ["a"], ["b"], name="/Relu")) == ()
    nested = helper.make_node("Conv", ["a"], ["b"], name="/layer2/layer2.0/downsample/downsample.0/Conv")
    assert node_scopes(nested) == ("layer2", "layer2.0", "layer2.0.downsample", "layer2.0.downsample.0")


def test_both_exporters_map_the_same_modules_and_fold_conv_into_batchnorm():
    module = build_small_resnet()
    sample = {"x": torch.randn(1, 3, 32, 32).numpy()}
    paths = [p for p, _ in module.named_modules() if p]
    for exporter in ("dynamo", "torchscript"):
        model = export_onnx(module, sample, exporter=exporter).model
        mapping = map_modules(model, paths)
        assert mapping["fc"].mapped and "Gemm" in mapping["fc"].op_types, exporter
        assert mapping["layer1.0"].mapped and "Add" in mapping["layer1.0"].op_types
        produced = {o for n in model.graph.node for o in n.output}
        assert all(m.value in produced for m in mapping.values() if m.mapped)
    dynamo = map_modules(export_onnx(module, sample).model, paths)
    assert not dynamo["conv1"].mapped and dynamo["bn1"].op_types == ("Conv",)  # BatchNorm folded into the Conv


def test_with_extra_outputs_copies_and_deduplicates():
    model = export_onnx(build_small_resnet(), {"x": torch.randn(1, 3, 32, 32).numpy()}).model
    inner = model.graph.node[3].output[0]
    marked = with_extra_outputs(model, [inner, inner, model.graph.output[0].name])
    assert [o.name for o in marked.graph.output].count(inner) == 1
    assert len(model.graph.output) == 1 and len(marked.graph.output) == 2
    assert isinstance(marked, onnx.ModelProto)


def test_torchscript_children_of_nested_containers_resolve_to_their_real_paths():
    node = helper.make_node("Conv", ["a"], ["b"], name="/features/features.1/block/block.0/block.0.0/Conv")
    assert node_scopes(node)[-1] == "features.1.block.0.0"


def test_repeated_calls_and_inserted_scopes_resolve_against_the_models_paths():
    from gapcheck.model.mapping import canonical_scope

    known = {"layer1", "layer1.0", "layer1.0.relu", "relu_1", "block", "block.conv"}
    assert canonical_scope("layer1.0.relu_1", known) == "layer1.0.relu"  # the second call of layer1.0.relu
    assert canonical_scope("layer1.0.relu_2", known) == "layer1.0.relu"
    assert canonical_scope("relu_1", known) == "relu_1"  # a module really named relu_1 keeps its name
    assert canonical_scope("block_1.conv", known) == "block.conv"  # a container called twice
    assert canonical_scope("_empty_nn_module_stack_from_metadata_hook", known) is None  # dynamo's inserted checks
    assert canonical_scope("layer9", known) is None


def test_torchscript_export_of_a_block_calling_relu_twice_maps_both_calls_to_relu():
    from gapcheck.model.mapping import index_graph

    module = build_small_resnet()
    sample = {"x": torch.randn(1, 3, 32, 32).numpy()}
    model = export_onnx(module, sample, exporter="torchscript").model
    paths = [p for p, _ in module.named_modules() if p]
    index = index_graph(model, paths)
    assert not index.unknown_scopes
    mapping = map_modules(model, paths, index)
    relu = mapping["layer1.0.relu"]
    assert relu.mapped and len(relu.node_names) == 2  # both calls' Relu nodes
    assert relu.value == model.graph.node[[n.name for n in model.graph.node].index(relu.node_names[-1])].output[0]

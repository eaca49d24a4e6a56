"""model/onnx_file: ONNX files read the hostile-input way and written atomically."""
from __future__ import annotations

import pytest
from onnx import TensorProto, helper

from gapcheck.errors import InputError, UsageError
from gapcheck.model.onnx_file import load_onnx, save_onnx


def _relu():
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    return helper.make_model(graph)


def test_save_creates_folders_replaces_the_file_whole_and_reads_back(tmp_path):
    target = tmp_path / "out" / "model.onnx"
    target.parent.mkdir()
    target.write_bytes(b"an older, longer file that must not leave a tail behind" * 100)
    save_onnx(_relu(), target)
    assert load_onnx(target).graph.node[0].op_type == "Relu"
    assert [p.name for p in target.parent.iterdir()] == ["model.onnx"]


def test_save_never_writes_through_a_link_and_load_refuses_what_is_not_onnx(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (tmp_path / "model.onnx").symlink_to(victim)
    with pytest.raises(UsageError, match="symbolic link"):
        save_onnx(_relu(), tmp_path / "model.onnx")
    assert victim.read_text() == "mine"
    with pytest.raises(InputError, match="not a valid ONNX model"):
        load_onnx(victim)

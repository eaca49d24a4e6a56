"""ONNX Runtime errors while RUNNING (issue 23, attacker round 5 #3, #4): a node of the user's file that cannot
execute (a Conv whose kernel_shape contradicts its weights) is an input error, exit 2, like a file ORT refuses to
load; an error about the values gapcheck fed, or a node failing on a dynamic dimension gapcheck chose, stays a
backend error, exit 3. ORT's own C++ error log never reaches stderr (value names with ESC/BEL). Real ORT errors."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import onnx.helper as oh
import pytest
from onnx import TensorProto as T
from onnx import numpy_helper

from gapcheck.backends.onnxruntime import ModelRunError, OnnxRuntimeBackend
from gapcheck.errors import BackendError, ExitCode, exit_code_for


def bad_kernel_model(batch: int | str = "batch", name: str = "conv"):
    """Conv kernel_shape [5,5] against 3x3 weights: ORT loads it and fails when the node runs."""
    weights = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    node = oh.make_node("Conv", ["x", "w"], ["y"], name=name, kernel_shape=[5, 5])
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", T.FLOAT, [batch, 3, 8, 8])],
                          [oh.make_tensor_value_info("y", T.FLOAT, None)], [weights])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize("batch", ["batch", 1])
def test_a_node_whose_attributes_contradict_its_weights_is_the_files_fault(batch):
    backend = OnnxRuntimeBackend(bad_kernel_model(batch))
    with pytest.raises(ModelRunError) as caught:
        backend.infer({"x": np.zeros((1, 3, 8, 8), np.float32)})
    assert exit_code_for(caught.value) == ExitCode.USAGE
    message = str(caught.value)
    assert "kernel_shape is not compatible with W shape" in message and "x 1x3x8x8 float32" in message
    assert "[ONNXRuntimeError]" not in message


def _reshape_to_3(dim):
    shape = oh.make_tensor("s", T.INT64, [1], [3])
    return oh.make_model(oh.make_graph([oh.make_node("Reshape", ["x", "s"], ["y"])], "g",
                                       [oh.make_tensor_value_info("x", T.FLOAT, [dim])],
                                       [oh.make_tensor_value_info("y", T.FLOAT, [3])], [shape]),
                         opset_imports=[oh.make_opsetid("", 17)])


def test_a_node_failing_on_a_dynamic_dimension_we_chose_stays_a_backend_error():
    backend = OnnxRuntimeBackend(_reshape_to_3(None))
    with pytest.raises(BackendError) as caught:
        backend.infer({"x": np.zeros(2, np.float32)})
    assert caught.value.exit_code == ExitCode.BACKEND


def test_a_node_failing_on_a_fully_static_input_is_the_files_fault():
    backend = OnnxRuntimeBackend(_reshape_to_3(2))  # declares 2 values, reshapes them to 3: no feed can run it
    with pytest.raises(ModelRunError, match=r"Reshape node.*Status Message: input_shape_size == "):
        backend.infer({"x": np.zeros(2, np.float32)})


def test_the_cli_says_exit_2_for_it(tmp_path, capsys):
    """Through export-diff (a Conv of the file whose kernel_shape contradicts its weights): exit 2, was exit 3."""
    import warnings

    import onnx
    import torch

    from gapcheck.cli.app import main
    from tests.nightly.models import build_tiny

    path = tmp_path / "bad.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(build_tiny().eval(), (torch.zeros(1, 3, 8, 8),), str(path), dynamo=False, input_names=["x"])
    model = onnx.load(str(path))
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    next(a for a in conv.attribute if a.name == "kernel_shape").ints[:] = [5, 5]
    onnx.save(model, str(path))
    assert main(["export-diff", "--model", "tests.nightly.models:build_tiny", "--input", "x:1x3x8x8:float32",
                 "--num-samples", "2", "--onnx", str(path), "--no-progress"]) == 2
    assert "kernel_shape is not compatible with W shape" in capsys.readouterr().err


@pytest.mark.parametrize("feed", [np.zeros((1, 3, 8, 8), np.float64), np.zeros((1, 3, 9, 8), np.float32),
                                  np.zeros((3, 8, 8), np.float32)], ids=["dtype", "dims", "rank"])
def test_errors_about_our_feeds_are_never_blamed_on_the_file(feed):
    backend = OnnxRuntimeBackend(bad_kernel_model(1))
    with pytest.raises(BackendError) as caught:
        backend.infer({"x": feed})
    assert caught.value.exit_code == ExitCode.BACKEND


def test_ort_logs_nothing_raw_to_stderr_from_a_hostile_value_name(tmp_path):
    """A node named with ESC/BEL: ORT's own error log (severity 3) wrote it raw to stderr; the reason still travels
    in the exception. The process's file descriptor 2 is checked, where ORT's C++ logger writes."""
    path = tmp_path / "esc.onnx"
    path.write_bytes(bad_kernel_model(name="r\x1b]0;PWNED\x07\x1b[2J").SerializeToString())
    code = textwrap.dedent(f"""
        import numpy as np, onnx
        from gapcheck.backends.onnxruntime import ModelRunError, OnnxRuntimeBackend
        backend = OnnxRuntimeBackend(onnx.load({str(path)!r}))
        try:
            backend.infer({{"x": np.zeros((1, 3, 8, 8), np.float32)}})
        except ModelRunError as exc:
            print("refused" if "kernel_shape" in str(exc) else "other")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == b"refused"
    assert b"\x1b" not in done.stderr and b"\x07" not in done.stderr

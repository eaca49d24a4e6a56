"""``export-diff --pad-check --triton-url``: the padding check on a live Triton server serving a sequence model.

The deployment planted here is the one the issue names: an attention mask dropped on the way to the server
(the served model gets a mask of ones). torch and ONNX Runtime are padding-invariant; only the server is not.
"""
from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import onnx
import pytest
import torch

from gapcheck.cli.app import main
from gapcheck.triton.local_server import LocalTritonServer
from sample_models import padding as planted

T = 32
# Runs inside Triton's Python-backend stub: feeds cast to the ONNX inputs' own dtypes (int64 token ids).
SEQ_MODEL_PY = '''
import json
import os

import numpy as np
import onnxruntime
import triton_python_backend_utils as pb_utils

DTYPES = {"tensor(int64)": np.int64, "tensor(float)": np.float32}


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        self.session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        self.inputs = {i.name: DTYPES[i.type] for i in self.session.get_inputs()}
        self.output_names = [o["name"] for o in config["output"]]
        self.drop_mask = params.get("drop_mask") == "1"

    def execute(self, requests):
        responses = []
        for request in requests:
            feeds = {name: pb_utils.get_input_tensor_by_name(request, name).as_numpy().astype(dtype)
                     for name, dtype in self.inputs.items()}
            if self.drop_mask:
                feeds["mask"] = np.ones_like(feeds["mask"])  # planted: the mask never reaches the model
            results = self.session.run(self.output_names, feeds)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor(name, value) for name, value in zip(self.output_names, results)]))
        return responses
'''


def _config(name: str, drop_mask: bool) -> str:
    params = 'parameters { key: "drop_mask" value: { string_value: "1" } }\n' if drop_mask else ""
    return (f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n'
            'input [ { name: "ids" data_type: TYPE_INT64 dims: [ -1 ] }, '
            '{ name: "mask" data_type: TYPE_INT64 dims: [ -1 ] } ]\n'
            f'output [ {{ name: "hidden" data_type: TYPE_FP32 dims: [ -1, {planted.DIM} ] }}, '
            f'{{ name: "logits" data_type: TYPE_FP32 dims: [ {planted.CLASSES} ] }} ]\n'
            f"instance_group [ {{ kind: KIND_CPU count: 1 }} ]\n{params}")


def _export_clean() -> onnx.ModelProto:
    """The clean sequence model with both the batch and the sequence axis dynamic (what a real deployment has)."""
    buffer = io.BytesIO()
    ids = torch.ones(2, T, dtype=torch.long)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(planted.build_clean(), (ids, ids), buffer, input_names=["ids", "mask"],
                          output_names=["hidden", "logits"], dynamo=False, opset_version=17,
                          dynamic_axes={"ids": {0: "b", 1: "t"}, "mask": {0: "b", 1: "t"}, "hidden": {0: "b", 1: "t"},
                                        "logits": {0: "b"}})
    return onnx.load_from_string(buffer.getvalue())


@pytest.fixture(scope="module")
def seq_triton(tmp_path_factory: pytest.TempPathFactory):
    model = _export_clean()
    onnx_path = tmp_path_factory.mktemp("seq_onnx") / "seq.onnx"
    onnx.save_model(model, str(onnx_path))
    repo = tmp_path_factory.mktemp("seq_repo")
    for name, drop in (("seq", False), ("seq_nomask", True)):
        (repo / name / "1").mkdir(parents=True)
        onnx.save_model(model, str(repo / name / "1" / "model.onnx"))
        (repo / name / "1" / "model.py").write_text(SEQ_MODEL_PY)
        (repo / name / "config.pbtxt").write_text(_config(name, drop))
    server = LocalTritonServer(repo, workdir=tmp_path_factory.mktemp("seq_work"))
    with server.running(timeout_s=90):
        yield server, onnx_path


def _run(server: LocalTritonServer, onnx_path: Path, model: str, report: Path) -> int:
    return main(["export-diff", "--model", "sample_models.padding:build_clean", "--onnx", str(onnx_path),
                 "--input", f"ids:1x{T}:int64:1,100", "--input", f"mask:1x{T}:int64:1,2", "--pad-check",
                 "--pad-side", "both", "--triton-url", server.url("grpc"), "--triton-model", model,
                 "--no-progress", "--json", str(report)])


def test_clean_served_sequence_model_is_padding_invariant_on_the_server(seq_triton, tmp_path, capsys):
    server, onnx_path = seq_triton
    report = tmp_path / "r.json"
    code = _run(server, onnx_path, "seq", report)
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    doc = json.loads(report.read_text())
    variants = doc["padding"]["variants"]
    assert {v["backend"] for v in variants} == {"torch", "onnxruntime", "triton-grpc"}
    assert all(v["passed"] for v in variants)
    assert not [f for f in doc["findings"] if f["code"] in ("padding_dependence", "mask_ignored")]


def test_a_mask_dropped_by_the_server_is_a_padding_gap_of_the_server_only(seq_triton, tmp_path, capsys):
    server, onnx_path = seq_triton
    report = tmp_path / "r.json"
    code = _run(server, onnx_path, "seq_nomask", report)
    captured = capsys.readouterr()
    assert code == 1, captured.out + captured.err
    doc = json.loads(report.read_text())
    gaps = [f for f in doc["findings"] if f["code"] in ("padding_dependence", "mask_ignored")]
    assert gaps and {f["subject"]["endpoint"] for f in gaps} == {"triton-grpc"}, gaps
    variants = doc["padding"]["variants"]
    for backend in ("torch", "onnxruntime"):
        assert all(v["passed"] for v in variants if v["backend"] == backend), backend
    assert not all(v["passed"] for v in variants if v["backend"] == "triton-grpc")

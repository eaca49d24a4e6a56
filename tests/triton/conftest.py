"""A real Triton server for the whole test session, serving planted deployments of one tiny ONNX model.

The bundled tritonserver has no onnxruntime backend, so each deployment is a Python-backend
model (``model.py`` below) that runs the ONNX file with ONNX Runtime inside the server. Its
config.pbtxt declares what the test wants, and config parameters switch on planted faults.
"""
from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from gapcheck.triton.client import TritonEndpoint
from gapcheck.triton.local_server import LocalTritonServer, restriction_args

SECRET_HEADER = "x-gapcheck-token"
SECRET_VALUE = "s3cr3t-t0ken-4f9a1c"
METADATA_HEADER = "x-metadata-token"
METADATA_VALUE = "m3ta-0nly-77b2"
# The production-hardened server: repository and config APIs need Triton's usual access token.
ACCESS_HEADER = "triton-access-token"
ACCESS_TOKEN = "hardened-9c1e77-t0k3n"
# What PyTriton restricts by default (pytriton.triton.DEFAULT_PROTECTED_ENDPOINTS) behind triton-access-token.
PYTRITON_RESTRICTED = ("shared-memory", "model-repository", "statistics", "trace", "logging")

# Runs inside Triton's Python-backend stub (numpy 1.x, onnxruntime from .venv-triton).
MODEL_PY = '''
import json
import os

import numpy as np
import onnxruntime
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        if params.get("fail_to_load") == "1":
            raise RuntimeError("planted load failure")
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        self.session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        self.onnx_inputs = {i.name: i for i in self.session.get_inputs()}
        self.input_names = [i["name"] for i in config["input"]]
        self.output_names = [o["name"] for o in config["output"]]
        self.channel_swap = params.get("channel_swap") == "1"
        self.swap_outputs = params.get("swap_outputs") == "1"

    def execute(self, requests):
        responses = []
        for request in requests:
            feeds = {}
            for served_name, onnx_name in zip(self.input_names, self.onnx_inputs):
                array = pb_utils.get_input_tensor_by_name(request, served_name).as_numpy()
                if array.dtype.kind == "f":  # token ids pass as they are
                    # what a careless server-side step does with FP16 (an FP16 file is fed what it takes)
                    half = self.onnx_inputs[onnx_name].type == "tensor(float16)"
                    array = array.astype(np.float16 if half else np.float32)
                if self.channel_swap:
                    array = np.ascontiguousarray(array[:, ::-1])  # planted RGB<->BGR swap
                feeds[onnx_name] = array
            graph_outputs = [o.name for o in self.session.get_outputs()]
            # the config's names when the file has them, else the file's outputs in order (INPUT__0/OUTPUT__0 configs)
            asked = self.output_names if set(self.output_names) <= set(graph_outputs) else graph_outputs
            results = self.session.run(asked, feeds)
            if self.swap_outputs:
                results = results[::-1]  # planted: each served output holds the other tensor
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor(name, value) for name, value in zip(self.output_names, results)]))
        return responses
'''


class TinyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.act = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.pool(self.act(self.conv(x))), 1))


def make_tiny_onnx(seed: int = 0) -> onnx.ModelProto:
    torch.manual_seed(seed)
    module = TinyNet().eval()
    buffer = io.BytesIO()
    with warnings.catch_warnings():  # the legacy exporter is deprecated, and fine for a fixture
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            module, (torch.zeros(1, 3, 8, 8),), buffer, input_names=["x"], output_names=["y"],
            dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, dynamo=False, opset_version=17,
        )
    return onnx.load_from_string(buffer.getvalue())


def python_config(name: str, *, input_type: str = "TYPE_FP32", input_name: str = "x", max_batch_size: int = 8,
                  input_dims: str = "3, 8, 8", output_dims: str = "5", extra: str = "",
                  parameters: dict[str, str] | None = None, output_name: str = "y") -> str:
    params = "".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in (parameters or {}).items())
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: {max_batch_size}\n'
        f'input [ {{ name: "{input_name}" data_type: {input_type} dims: [ {input_dims} ] }} ]\n'
        f'output [ {{ name: "{output_name}" data_type: TYPE_FP32 dims: [ {output_dims} ] }} ]\n'
        f"instance_group [ {{ kind: KIND_CPU count: 1 }} ]\n{params}{extra}"
    )


def write_python_model(repo: Path, name: str, config: str, versions: dict[int, onnx.ModelProto]) -> None:
    model_dir = repo / name
    for version, model in versions.items():
        (model_dir / str(version)).mkdir(parents=True, exist_ok=True)
        onnx.save_model(model, str(model_dir / str(version) / "model.onnx"))
        (model_dir / str(version) / "model.py").write_text(MODEL_PY)
    (model_dir / "config.pbtxt").write_text(config)


@dataclass(frozen=True)
class Deployments:
    """The running server and the ONNX models it was built from."""

    server: LocalTritonServer
    onnx_model: onnx.ModelProto  # what every deployment should serve
    old_onnx_model: onnx.ModelProto  # version 1 of "tiny_versions": other weights

    def url(self, protocol: str) -> str:
        return self.server.url(protocol)

    def endpoint(self, protocol: str, **options: object) -> TritonEndpoint:
        return TritonEndpoint(self.server.url(protocol), protocol, **options)


@pytest.fixture(scope="session")
def tiny_onnx() -> onnx.ModelProto:
    return make_tiny_onnx(seed=0)


@pytest.fixture(scope="session")
def tiny_onnx_path(tiny_onnx: onnx.ModelProto, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("onnx") / "tiny.onnx"
    onnx.save_model(tiny_onnx, str(path))
    return path


@pytest.fixture(scope="session")
def triton(tiny_onnx: onnx.ModelProto, tmp_path_factory: pytest.TempPathFactory) -> Deployments:
    repo = tmp_path_factory.mktemp("triton_repo")
    old = make_tiny_onnx(seed=1)
    write_python_model(repo, "tiny", python_config("tiny"), {1: tiny_onnx})
    write_python_model(repo, "tiny_fp16", python_config("tiny_fp16", input_type="TYPE_FP16"), {1: tiny_onnx})
    write_python_model(repo, "tiny_swap", python_config("tiny_swap", parameters={"channel_swap": "1"}),
                       {1: tiny_onnx})
    # Version 2 is on disk, but the version policy still serves version 1 (the old weights).
    write_python_model(repo, "tiny_versions",
                       python_config("tiny_versions", extra="version_policy: { specific: { versions: [ 1 ] } }\n"),
                       {1: old, 2: tiny_onnx})
    # Batch axis forgotten: no batching, and dims without the batch axis.
    write_python_model(repo, "tiny_nobatch", python_config("tiny_nobatch", max_batch_size=0), {1: tiny_onnx})
    write_python_model(repo, "tiny_renamed", python_config("tiny_renamed", input_name="input"), {1: tiny_onnx})
    # named as a PyTorch-backend deployment names its tensors (INPUT__0, OUTPUT__0): the same model
    write_python_model(repo, "tiny_torchnames", python_config("tiny_torchnames", input_name="INPUT__0",
                                                              output_name="OUTPUT__0"), {1: tiny_onnx})
    write_python_model(repo, "broken", python_config("broken", parameters={"fail_to_load": "1"}), {1: tiny_onnx})
    server = LocalTritonServer(repo, workdir=tmp_path_factory.mktemp("triton_work"))
    with server.running(timeout_s=90):
        yield Deployments(server=server, onnx_model=tiny_onnx, old_onnx_model=old)


@pytest.fixture(scope="session")
def fp16_triton(tmp_path_factory: pytest.TempPathFactory) -> LocalTritonServer:
    """A server of FP16 deployments (FP16 files, every tensor declared TYPE_FP16): one clean, and each planted fault
    a user's FP16 deployment can hide: a changed weight, its two outputs swapped, a server-side channel swap, and
    a model whose FP16 arithmetic overflows."""
    from tests.triton.fp16_models import build_half, build_large_activation, fp16_config, fp16_onnx

    repo = tmp_path_factory.mktemp("fp16_repo")
    two = ["y", "z"]
    clean = fp16_onnx(build_half(), two)
    write_python_model(repo, "half", fp16_config("half", two), {1: clean})
    write_python_model(repo, "half_weight", fp16_config("half_weight", two),
                       {1: fp16_onnx(build_half(), two, planted="head.bias")})
    write_python_model(repo, "half_swap", fp16_config("half_swap", two, {"swap_outputs": "1"}), {1: clean})
    write_python_model(repo, "half_bgr", fp16_config("half_bgr", two, {"channel_swap": "1"}), {1: clean})
    write_python_model(repo, "half_overflow", fp16_config("half_overflow", ["y"]),
                       {1: fp16_onnx(build_large_activation(), ["y"])})
    server = LocalTritonServer(repo, workdir=tmp_path_factory.mktemp("fp16_work"))
    with server.running(timeout_s=90):
        yield server


@pytest.fixture(scope="session")
def secured_triton(tiny_onnx: onnx.ModelProto, tmp_path_factory: pytest.TempPathFactory) -> LocalTritonServer:
    """A second server whose inference and config APIs need a secret header, and metadata another one.

    With :data:`SECRET_HEADER` alone, metadata stays closed: clients must make do with the model config.
    """
    repo = tmp_path_factory.mktemp("secured_repo")
    write_python_model(repo, "tiny", python_config("tiny"), {1: tiny_onnx})
    restriction = f"inference,model-config:{SECRET_HEADER}={SECRET_VALUE}"
    metadata = f"metadata:{METADATA_HEADER}={METADATA_VALUE}"
    server = LocalTritonServer(
        repo, workdir=tmp_path_factory.mktemp("secured_work"),
        extra_args=(f"--http-restricted-api={restriction}", f"--grpc-restricted-protocol={restriction}",
                    f"--http-restricted-api={metadata}", f"--grpc-restricted-protocol={metadata}"),
    )
    with server.running(timeout_s=90):
        yield server


@pytest.fixture(scope="session")
def hardened_triton(tiny_onnx: onnx.ModelProto, tmp_path_factory: pytest.TempPathFactory) -> LocalTritonServer:
    """A server hardened as PyTriton does by default, plus model-config: repository, shared memory, statistics,
    trace, logging and config need ``triton-access-token``.

    Health, metadata and inference stay open (as in production); model control (loading a twin) needs the token.
    Readiness is strict, as Triton's default is: one model that fails to load makes the server unready.
    """
    repo = tmp_path_factory.mktemp("hardened_repo")
    write_python_model(repo, "tiny", python_config("tiny"), {1: tiny_onnx})
    write_python_model(repo, "tiny_fp16", python_config("tiny_fp16", input_type="TYPE_FP16"), {1: tiny_onnx})
    server = LocalTritonServer(repo, workdir=tmp_path_factory.mktemp("hardened_work"), strict_readiness=True,
                               extra_args=restriction_args((*PYTRITON_RESTRICTED, "model-config"), ACCESS_HEADER,
                                                           ACCESS_TOKEN))
    with server.running(timeout_s=90):
        yield server


@pytest.fixture(params=["http", "grpc"])
def protocol(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def sample() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)}


def model_py_bytes() -> bytes:
    return MODEL_PY.encode()

"""A real tritonserver for the nightly tests, with restricted repository/model-control APIs, and a golden bundle.

The bundled server has no onnxruntime backend, so the served model is a Python-backend model that runs
its version folder's ``model.onnx`` in ONNX Runtime. Two things can be planted from the test without
restarting the server: ``drift.txt`` in the model folder holds an offset added to every output (read on
every request: a slowly growing error), and a different ``model.onnx`` loaded through the (restricted)
model-control API swaps the served model.
"""
from __future__ import annotations

import json
import os
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import onnx
import pytest

from gapcheck.golden import RecordRequest, load_bundle, record_bundle
from gapcheck.triton.client import TritonEndpoint, connect
from gapcheck.triton.local_server import LocalTritonServer, restriction_args

ADMIN_HEADER = "x-admin-token"
ADMIN_TOKEN = "adm1n-t0ken-7c2e"
FACTORY = "tests/nightly/models.py:build_tiny"
INPUT = "x:1x3x8x8:float32"

MODEL_PY = '''
import json
import os
import os

import numpy as np
import onnxruntime
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        self.drift_file = os.path.join(args["model_repository"], "drift.txt")
        self.session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        self.input_names = [i["name"] for i in config["input"]]
        self.onnx_inputs = [i.name for i in self.session.get_inputs()]
        self.output_names = [o["name"] for o in config["output"]]

    def execute(self, requests):
        offset = 0.0
        if os.path.exists(self.drift_file):
            with open(self.drift_file) as handle:
                offset = float(handle.read().strip() or 0)
        responses = []
        for request in requests:
            feeds = {o: pb_utils.get_input_tensor_by_name(request, s).as_numpy()
                     for s, o in zip(self.input_names, self.onnx_inputs)}
            results = self.session.run(self.output_names, feeds)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor(n, (v + np.float32(offset)).astype(v.dtype)) for n, v in zip(self.output_names, results)]))
        return responses
'''


def model_config(name: str, onnx_model: onnx.ModelProto, max_batch_size: int = 8) -> str:
    def entries(values) -> str:
        parts = []
        for v in values:
            dims = [d.dim_value for d in v.type.tensor_type.shape.dim][1:]
            parts.append(f'{{ name: "{v.name}" data_type: TYPE_FP32 dims: [ {", ".join(map(str, dims))} ] }}')
        return ", ".join(parts)
    return (f'name: "{name}"\nbackend: "python"\nmax_batch_size: {max_batch_size}\n'
            f"input [ {entries(onnx_model.graph.input)} ]\noutput [ {entries(onnx_model.graph.output)} ]\n"
            'instance_group [ { kind: KIND_CPU count: 1 } ]\n'
            'dynamic_batching { }\n')


def write_model(repo: Path, name: str, onnx_model: onnx.ModelProto, version: int = 1) -> Path:
    folder = repo / name
    (folder / str(version)).mkdir(parents=True, exist_ok=True)
    onnx.save_model(onnx_model, str(folder / str(version) / "model.onnx"))
    (folder / str(version) / "model.py").write_text(MODEL_PY)
    (folder / "config.pbtxt").write_text(model_config(name, onnx_model))
    return folder


def hardened_server(repo: Path, workdir: Path, ports=None) -> LocalTritonServer:
    """Repository index and model control need the admin header (what a hardened deployment does)."""
    return LocalTritonServer(repo, workdir=workdir, ports=ports,
                             extra_args=restriction_args(("model-repository",), ADMIN_HEADER, ADMIN_TOKEN))


@dataclass
class Served:
    server: LocalTritonServer
    repo: Path
    model: str

    def url(self, protocol: str = "grpc", model: str | None = None) -> str:
        return f"{protocol}://{self.server.url(protocol)}/{model or self.model}"

    def set_drift(self, offset: float, model: str | None = None) -> None:
        (self.repo / (model or self.model) / "drift.txt").write_text(repr(float(offset)))

    def swap(self, onnx_model: onnx.ModelProto, model: str | None = None) -> None:
        """Replace the served model file and reload it through the restricted model-control API."""
        name = model or self.model
        onnx.save_model(onnx_model, str(self.repo / name / "1" / "model.onnx"))
        admin = TritonEndpoint(self.server.http_url, "http", headers={ADMIN_HEADER: ADMIN_TOKEN})
        with connect(admin) as conn:
            conn.load_model(name)


@pytest.fixture(scope="session", autouse=True)
def isolated_export_cache(tmp_path_factory: pytest.TempPathFactory):
    """Recording goes through the export cache: keep it out of the user's home."""
    previous = os.environ.get("GAPCHECK_CACHE_DIR")
    os.environ["GAPCHECK_CACHE_DIR"] = str(tmp_path_factory.mktemp("export_cache"))
    yield
    if previous is None:
        os.environ.pop("GAPCHECK_CACHE_DIR", None)
    else:
        os.environ["GAPCHECK_CACHE_DIR"] = previous


@pytest.fixture(scope="session")
def tiny_golden(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("golden") / "bundle"
    record_bundle(RecordRequest(out=out, factory=FACTORY, input_specs=(INPUT,), num_samples=12, exporter="torchscript"))
    return out


@pytest.fixture(scope="session")
def golden_onnx(tiny_golden: Path) -> onnx.ModelProto:
    return onnx.load(str(load_bundle(tiny_golden).onnx_path))


@pytest.fixture(scope="session")
def other_onnx(tmp_path_factory: pytest.TempPathFactory) -> onnx.ModelProto:
    """The same architecture with other weights: what a wrong model swapped in looks like."""
    from gapcheck.inputs import parse_input_spec, random_samples
    from gapcheck.model.export import export_onnx
    from tests.nightly.models import build_tiny

    module = build_tiny(seed=7).eval()
    # named as golden record names a bare tensor output, so the served config fits both models
    return export_onnx(module, random_samples([parse_input_spec(INPUT)])[0], exporter="torchscript",
                       output_names=["output"]).model


@pytest.fixture(scope="session")
def served(golden_onnx: onnx.ModelProto, tmp_path_factory: pytest.TempPathFactory):
    """One hardened server for the session; every test gets its own model names."""
    repo = tmp_path_factory.mktemp("nightly_repo")
    for name in ("stable", "swapped", "drifting", "locking", "cli", "http"):
        write_model(repo, name, golden_onnx)
    server = hardened_server(repo, tmp_path_factory.mktemp("nightly_work"))
    with server.running(timeout_s=120):
        yield Served(server, repo, "stable")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Hook(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.received.append({"path": self.path, "headers": dict(self.headers), "body": body,  # type: ignore[attr-defined]
                                     "json": json.loads(body)})
        status = self.server.status  # type: ignore[attr-defined]
        self.send_response(status)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def webhook_server():
    """A local HTTP server on 127.0.0.1 that records every POST (``.received``); ``.status`` sets its answer."""
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    server.received = []  # type: ignore[attr-defined]
    server.status = 200  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/T0K3N-in-path"  # type: ignore[attr-defined]
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def validate_report(document: dict, command: str) -> None:
    """Validate a JSON report against the schema gapcheck ships for ``command``."""
    import jsonschema

    schema_path = Path(__file__).resolve().parents[2] / "gapcheck" / "schemas" / f"{command}.schema.json"
    jsonschema.validate(document, json.loads(schema_path.read_text()))


@pytest.fixture(autouse=True)
def _histories_closed():
    """run_nightly closes its history on a thread (History.close_behind); no test leaves one closing behind it."""
    from gapcheck.nightly.history import wait_for_closes

    yield
    wait_for_closes()

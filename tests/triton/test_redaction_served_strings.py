"""A server's own strings (model metadata, config, repository index) pass the same redaction as its error texts
(attacker D1): a server that writes the credential it was sent into its output names, platform or config leaks it
nowhere, over HTTP and gRPC, in the client and in every command that shows them (triton-audit, nightly)."""
from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from gapcheck.cli.app import main
from gapcheck.triton.client import TritonEndpoint, connect
from tests.triton.hostile_kserve import kserve

SECRET = "S3CRETPLANTED9f8e7d"
EVIL = [f"o\x1b]0;{SECRET}\x07{i}" for i in range(3)]


def _metadata(inputs: list[tuple[str, list[int]]], outputs: list[tuple[str, list[int]]]) -> dict[str, Any]:
    def io(entries: list[tuple[str, list[int]]]) -> list[dict[str, Any]]:
        return [{"name": name, "datatype": "FP32", "shape": [-1, *dims]} for name, dims in entries]
    return {"name": "m", "versions": ["1"], "platform": "onnxruntime_onnx " + SECRET,
            "inputs": io(inputs), "outputs": io(outputs)}


def _config(inputs: list[tuple[str, list[int]]], outputs: list[tuple[str, list[int]]]) -> dict[str, Any]:
    def io(entries: list[tuple[str, list[int]]]) -> list[dict[str, Any]]:
        return [{"name": name, "data_type": "TYPE_FP32", "dims": dims} for name, dims in entries]
    return {"name": "m", "platform": "onnxruntime_onnx", "backend": "onnxruntime", "max_batch_size": 4,
            "input": io(inputs), "output": io(outputs),
            "parameters": {f"key-{SECRET}": {"string_value": f"token={SECRET.lower()}"}}}


@contextmanager
def evil_http(inputs: list[tuple[str, list[int]]], outputs: list[tuple[str, list[int]]]) -> Iterator[str]:
    served = outputs + [(name, [5]) for name in EVIL]

    def respond(method: str, path: str, body: bytes) -> tuple[Any, ...]:
        if path == "/v2":
            return 200, {"name": f"triton {SECRET}", "version": "2.0", "extensions": []}
        if path.endswith("/infer"):  # zeros of the declared shapes: a gap, not an outage
            request, _ = json.JSONDecoder().raw_decode(body.decode("latin-1"))
            count = int(request["inputs"][0]["shape"][0])
            return 200, {"model_name": "m", "outputs": [
                {"name": name, "datatype": "FP32", "shape": [count, *dims], "data": [0.0] * count * _size(dims)}
                for name, dims in outputs]}
        if path.endswith("/config"):
            return 200, _config(inputs, served)
        if path.startswith("/v2/models/m"):
            return 200, _metadata(inputs, served)
        if path == "/v2/repository/index":
            return 200, [{"name": "m", "version": "1", "state": "UNAVAILABLE", "reason": f"bad key {SECRET}"}]
        return 404, {"error": "not found"}

    with kserve(respond) as url:
        yield url


def _size(dims: list[int]) -> int:
    size = 1
    for dim in dims:
        size *= dim
    return size


def _no_secret(text: str) -> None:
    assert SECRET not in text and SECRET.lower() not in text and "9f8e7d" not in text


def test_http_metadata_config_and_index_are_redacted_where_they_enter() -> None:
    with evil_http([("x", [3, 8, 8])], [("y", [5])]) as url:
        endpoint = TritonEndpoint(url, headers={"Authorization": f"Bearer {SECRET}"}, retries=0)
        with connect(endpoint) as conn:
            answers = [conn.server_metadata(), conn.model_metadata("m"), conn.model_config("m"),
                       conn.repository_index()]
    text = json.dumps(answers)
    _no_secret(text)
    metadata, config = answers[1], answers[2]
    # only the secret is replaced: the rest of each string, control characters included, stays for the renderers
    assert [o["name"] for o in metadata["outputs"]] == ["y"] + [f"o\x1b]0;***\x07{i}" for i in range(3)]
    assert metadata["platform"] == "onnxruntime_onnx ***" and config["output"][1]["name"] == "o\x1b]0;***\x070"
    assert config["parameters"] == {"key-***": {"string_value": "***"}}  # a word sharing 8 characters: whole
    assert answers[3][0]["reason"] == "bad key ***" and answers[0]["name"] == "triton ***"


class _Service:
    """The gRPC face of the same server (metadata and config only)."""

    def __init__(self) -> None:
        from tritonclient.grpc import model_config_pb2 as mc
        from tritonclient.grpc import service_pb2 as pb

        tensor = pb.ModelMetadataResponse.TensorMetadata
        self.metadata = pb.ModelMetadataResponse(
            name="m", versions=["1"], platform=f"onnx {SECRET}",
            inputs=[tensor(name="x", datatype="FP32", shape=[-1, 3, 8, 8])],
            outputs=[tensor(name=n, datatype="FP32", shape=[-1, 5]) for n in ["y", *EVIL]])
        self.config = pb.ModelConfigResponse(config=mc.ModelConfig(
            name="m", platform="onnxruntime_onnx", max_batch_size=4,
            input=[mc.ModelInput(name="x", data_type=mc.TYPE_FP32, dims=[3, 8, 8])],
            output=[mc.ModelOutput(name=n, data_type=mc.TYPE_FP32, dims=[5]) for n in ["y", *EVIL]]))

    def handlers(self) -> grpc.GenericRpcHandler:
        from tritonclient.grpc import service_pb2 as pb

        def unary(fn: Any, request: Any) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(fn, request_deserializer=request.FromString,
                                                       response_serializer=lambda m: m.SerializeToString())
        return grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {
            "ModelMetadata": unary(lambda r, c: self.metadata, pb.ModelMetadataRequest),
            "ModelConfig": unary(lambda r, c: self.config, pb.ModelConfigRequest),
        })


def test_grpc_metadata_and_config_are_redacted_where_they_enter() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((_Service().handlers(),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        endpoint = TritonEndpoint(f"grpc://127.0.0.1:{port}", headers={"triton-access-token": SECRET}, retries=0)
        with connect(endpoint) as conn:
            metadata, config = conn.model_metadata("m"), conn.model_config("m")
    finally:
        server.stop(None)
    _no_secret(json.dumps([metadata, config]))
    assert metadata["outputs"][1]["name"] == "o\x1b]0;***\x070" and metadata["platform"] == "onnx ***"
    assert [o["name"] for o in config["output"]][1:] == [f"o\x1b]0;***\x07{i}" for i in range(3)]


def test_triton_audit_shows_the_served_names_redacted(tiny_onnx_path: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "audit.json"
    with evil_http([("x", [3, 8, 8])], [("y", [5])]) as url:
        code = main(["triton-audit", "--onnx", str(tiny_onnx_path), "--triton-url", f"{url}/m",
                     "--triton-header", f"triton-access-token:{SECRET}", "--json", str(report)])
    out = capsys.readouterr()
    text = report.read_text()
    for shown in (out.out, out.err, text):
        _no_secret(shown)
    assert code == 1  # the extra served outputs are still a gap, named with the secret hidden
    findings = [f for f in json.loads(text)["findings"] if f["code"] == "triton_name_mismatch"]
    assert any("'o?]0;***?0'" in f["message"] and "does not exist in the ONNX graph" in f["message"]
               for f in findings), findings


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny golden bundle (recorded through an export cache of its own, out of the user's home)."""
    from gapcheck.golden.record import RecordRequest, record_bundle

    cache = pytest.MonkeyPatch()
    cache.setenv("GAPCHECK_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    out = tmp_path_factory.mktemp("golden") / "bundle"
    try:
        record_bundle(RecordRequest(out=out, factory="tests/nightly/models.py:build_tiny",
                                    input_specs=("x:1x3x8x8:float32",), num_samples=4, exporter="torchscript"))
        yield out
    finally:
        cache.undo()


def test_nightly_shows_the_served_names_redacted_in_every_report(bundle: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from gapcheck.golden import load_bundle

    monkeypatch.setenv("GAPCHECK_CACHE_DIR", str(tmp_path / "cache"))
    golden = load_bundle(bundle)
    inputs = [(i.name, list(i.shape[1:])) for i in golden.input_infos]
    outputs = [(o.name, list(o.shape[1:])) for o in golden.output_infos]
    reports = {ext: tmp_path / f"r.{ext}" for ext in ("json", "html", "sarif")}
    with evil_http(inputs, outputs) as url:
        code = main(["nightly", "--golden", str(bundle), "--endpoint", f"prod={url}/m", "--history",
                     str(tmp_path / "h.sqlite"), "--triton-header", f"Authorization:Bearer {SECRET}",
                     *[arg for ext, path in reports.items() for arg in (f"--{ext}", str(path))]])
    out = capsys.readouterr()
    texts = [out.out, out.err, *(path.read_text() for path in reports.values())]
    for text in texts:
        _no_secret(text)
    assert code == 1, out.out[-3000:]
    findings = json.loads(reports["json"].read_text())["findings"]
    assert any(f["code"] == "triton_name_mismatch" and "'o?]0;***?0'" in f["message"] for f in findings)

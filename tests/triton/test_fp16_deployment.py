"""export-diff against a Triton deployment that computes in FP16: an FP16 file served with every tensor declared
TYPE_FP16 (conftest's ``fp16_triton``), compared with the user's checkpoint and gapcheck's own FP32 export.

The samples are sent as FP16 (the server refuses FP32 for an FP16 input) and the outputs compared with FP16 budgets;
the FP16 declarations are the deployment's precision, not config gaps. What an FP16 deployment can hide beyond
FP16 rounding stays a gap: a changed weight, outputs that hold each other's tensor, a server-side channel swap, an
overflow.
"""
from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
import torch

from gapcheck.cli.app import main
from tests.triton.fp16_models import build_half, build_large_activation, fp16_onnx

HALF = "tests.triton.fp16_models:build_half"
LARGE = "tests.triton.fp16_models:build_large_activation"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The user's checkpoints (state dicts) of the two served architectures."""
    folder = tmp_path_factory.mktemp("fp16_checkpoints")
    out = {}
    for factory, build in ((HALF, build_half), (LARGE, build_large_activation)):
        path = folder / f"{build.__name__}.pt"
        torch.save(build().state_dict(), path)
        out[factory] = str(path)
    return out


def _run(server, checkpoints, tmp_path, model: str, protocol: str = "http", *extra: str,
         factory: str = HALF) -> tuple[int, dict]:
    report = tmp_path / f"{model}_{protocol}.json"
    code = main(["export-diff", "--checkpoint", checkpoints[factory], "--model", factory, "--input",
                 "x:1x3x8x8:float32", "--num-samples", "2", "--no-progress", "--triton-url", server.url(protocol),
                 "--protocol", protocol, "--triton-model", model, "--json", str(report), *extra])
    return code, json.loads(report.read_text()) if report.exists() else {}


def _by_code(report: dict, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == code]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_clean_fp16_deployment_passes_with_fp16_budgets_and_says_so(fp16_triton, checkpoints, tmp_path, protocol):
    code, report = _run(fp16_triton, checkpoints, tmp_path, "half", protocol)
    assert code == 0, [f["message"] for f in report["findings"]]
    assert report["precision"] == "fp16"
    [said] = _by_code(report, "fp16_deployment")
    assert said["severity"] == "info" and said["evidence"]["fp16_inputs"] == ["x"]
    assert "the FP32 samples are cast to FP16 as they are sent" in said["message"]
    assert "compared with FP16 budgets" in said["message"]
    assert not _by_code(report, "triton_dtype_mismatch")
    served = [o for o in report["outputs"] if o["backend"] == f"triton-{protocol}"]
    assert len(served) == 2 and all(o["status"] == "pass" for o in served)
    # what the server was sent is the FP16 copy of the samples: other bytes than torch's, and said so above
    assert all(r["sha256"][f"triton-{protocol}"] != r["sha256"]["torch"] for r in report["inputs"])


@pytest.mark.parametrize(("model", "protocol"), [("half_weight", "http"), ("half_swap", "grpc"),
                                                 ("half_swap", "http"), ("half_bgr", "grpc")])
def test_what_an_fp16_deployment_hides_beyond_rounding_is_a_gap(fp16_triton, checkpoints, tmp_path, model, protocol):
    """A head.bias changed by 0.25, the two outputs served swapped (same names, shapes and FP16 type: only the
    values tell), a server-side RGB/BGR swap: exit 1, on the deployment only (ONNX Runtime matches torch)."""
    code, report = _run(fp16_triton, checkpoints, tmp_path, model, protocol)
    assert (code, report["precision"]) == (1, "fp16")
    gaps = [f for f in report["findings"] if f["severity"] == "gap"]
    assert gaps and {f["code"] for f in gaps} == {"deployment_mismatch"}
    failed = {o["name"] for o in report["outputs"] if o["status"] == "fail"}
    assert len(failed) == (1 if model == "half_weight" else 2)  # the bias feeds one of the two heads


def test_an_fp16_deployment_whose_arithmetic_overflows_is_a_gap_at_the_module(fp16_triton, checkpoints, tmp_path):
    """Activations near 1e5 (T5's feed-forward pattern): the FP16 deployment returns Inf; the FP16 comparison
    names the Linear that overflows."""
    code, report = _run(fp16_triton, checkpoints, tmp_path, "half_overflow", "grpc", factory=LARGE)
    assert (code, report["precision"]) == (1, "fp16")
    assert [f["subject"]["module"] for f in _by_code(report, "fp16_overflow")] == ["wo"]
    assert any(o["backend"] == "triton-grpc" and o["status"] == "fail" for o in report["outputs"])


def test_fp32_asked_on_an_fp16_deployment_is_judged_with_fp32_budgets_and_says_why(fp16_triton, checkpoints,
                                                                                    tmp_path):
    code, report = _run(fp16_triton, checkpoints, tmp_path, "half", "http", "--precision", "fp32")
    assert (code, report["precision"]) == (1, "fp32")
    [said] = _by_code(report, "precision_not_the_files")
    assert said["severity"] == "warning"
    assert "the deployment computes in FP16 but precision fp32 was asked" in said["message"]
    assert "compared with FP32 budgets" in _by_code(report, "fp16_deployment")[0]["message"]
    assert {f["code"] for f in report["findings"] if f["severity"] == "gap"} == {"deployment_mismatch"}


def test_the_deployments_own_fp16_file_is_compared_as_written(fp16_triton, checkpoints, tmp_path):
    """--onnx with the FP16 file the server loads (FP16 inputs and outputs): clean, inputs cast for both."""
    path = tmp_path / "half_fp16.onnx"
    onnx.save(fp16_onnx(build_half(), ["y", "z"]), str(path))
    code, report = _run(fp16_triton, checkpoints, tmp_path, "half", "grpc", "--onnx", str(path))
    assert (code, report["precision"]) == (0, "fp16"), [f["message"] for f in report["findings"]]
    assert {"fp16_file", "fp16_deployment"} <= {f["code"] for f in report["findings"]}
    assert "as the file does" in _by_code(report, "fp16_deployment")[0]["message"]


def test_an_fp32_file_against_an_fp16_config_stays_a_config_gap(fp16_triton, checkpoints, tmp_path):
    """--onnx names the file the server should load: an FP32 file under an FP16 config is a real mismatch."""
    path = tmp_path / "half_fp32.onnx"
    with torch.no_grad():
        torch.onnx.export(build_half(), (torch.zeros(1, 3, 8, 8),), str(path), input_names=["x"],
                          output_names=["y", "z"], dynamic_axes={n: {0: "b"} for n in "xyz"}, dynamo=False)
    code, report = _run(fp16_triton, checkpoints, tmp_path, "half", "http", "--onnx", str(path))
    assert code == 1
    assert len(_by_code(report, "triton_dtype_mismatch")) == 3 and not _by_code(report, "fp16_deployment")
    assert _by_code(report, "deployment_not_compared")


def test_triton_audit_of_an_fp16_deployment_against_its_own_file_passes(fp16_triton, tmp_path):
    path = tmp_path / "half_fp16.onnx"
    onnx.save(fp16_onnx(build_half(), ["y", "z"]), str(path))
    code = main(["triton-audit", "--triton-url", fp16_triton.url("http"), "--protocol", "http", "--triton-model",
                 "half", "--onnx", str(path), "--json", str(tmp_path / "audit.json")])
    findings = json.loads((tmp_path / "audit.json").read_text())["findings"]
    assert code == 0, findings
    assert not [f for f in findings if f["code"] == "triton_dtype_mismatch"]


def test_layers_compared_on_the_server_of_an_fp16_deployment(fp16_triton, checkpoints, tmp_path):
    """--triton-layers: the twin on the server names the module a server-side channel swap first changes."""
    from tests.triton.conftest import model_py_bytes

    model_py = tmp_path / "model.py"
    model_py.write_bytes(model_py_bytes())
    code, report = _run(fp16_triton, checkpoints, tmp_path, "half_bgr", "http", "--triton-layers", "--twin-file",
                        str(model_py))
    assert (code, report["precision"]) == (1, "fp16")
    [finding] = _by_code(report, "server_layer_divergence")
    assert finding["evidence"]["module"] == "conv"


@pytest.fixture(scope="module")
def bert_triton(tmp_path_factory: pytest.TempPathFactory):
    """A transformers BERT converted to FP16 and served (token-id inputs, FP16 outputs), clean and with a bias of
    the first layer's feed-forward changed by 0.1."""
    from gapcheck.triton.local_server import LocalTritonServer
    from tests.triton.conftest import write_python_model
    from tests.triton.fp16_models import BERT_CONFIG, bert_fp16_onnx

    repo = tmp_path_factory.mktemp("bert_fp16_repo")
    write_python_model(repo, "bert", BERT_CONFIG.format(name="bert"), {1: bert_fp16_onnx()})
    write_python_model(repo, "bert_planted", BERT_CONFIG.format(name="bert_planted"),
                       {1: bert_fp16_onnx(planted="bert.encoder.layer.0.intermediate.dense.bias")})
    server = LocalTritonServer(repo, workdir=tmp_path_factory.mktemp("bert_fp16_work"))
    with server.running(timeout_s=90):
        yield server


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_real_bert_served_in_fp16_passes_and_its_changed_bias_is_a_gap(bert_triton, tmp_path, protocol):
    """A real architecture: only the outputs are FP16 (the token ids stay int64); gapcheck's own export is compared
    in FP16 (its FP16 copy reads last_hidden_state again for the pooler: it must load)."""
    from tests.triton.fp16_models import build_bert

    checkpoint = tmp_path / "bert.pt"
    torch.save(build_bert().state_dict(), checkpoint)
    results = {}
    for model in ("bert", "bert_planted"):
        report = tmp_path / f"{model}.json"
        code = main(["export-diff", "--checkpoint", str(checkpoint), "--model", "tests.triton.fp16_models:build_bert",
                     "--input", "input_ids:1x16:int64:0,1000", "--input", "attention_mask:1x16:int64:1,2",
                     "--num-samples", "4", "--no-progress", "--triton-url", bert_triton.url(protocol), "--protocol",
                     protocol, "--triton-model", model, "--json", str(report)])
        results[model] = code, json.loads(report.read_text())
    code, clean = results["bert"]
    assert (code, clean["precision"]) == (0, "fp16"), [f["message"] for f in clean["findings"]]
    assert _by_code(clean, "fp16_deployment")[0]["evidence"]["fp16_inputs"] == []
    code, planted = results["bert_planted"]
    assert code == 1 and {f["code"] for f in planted["findings"] if f["severity"] == "gap"} == {"deployment_mismatch"}


@pytest.mark.slow
def test_the_padding_check_against_a_bert_served_in_fp16(bert_triton, tmp_path):
    """--pad-check sends the padded sequences to the FP16 deployment too, compared with FP16 budgets."""
    from tests.triton.fp16_models import build_bert

    checkpoint, report = tmp_path / "bert.pt", tmp_path / "pad.json"
    torch.save(build_bert().state_dict(), checkpoint)
    code = main(["export-diff", "--checkpoint", str(checkpoint), "--model", "tests.triton.fp16_models:build_bert",
                 "--input", "input_ids:1x16:int64:0,1000", "--input", "attention_mask:1x16:int64:1,2", "--no-progress",
                 "--triton-url", bert_triton.url("grpc"), "--triton-model", "bert", "--pad-check", "--pad-lengths", "24",
                 "--json", str(report)])
    doc = json.loads(report.read_text())
    assert (code, doc["precision"]) == (0, "fp16"), [f["message"] for f in doc["findings"]]
    served = [v for v in doc["padding"]["variants"] if v["backend"] == "triton-grpc"]
    assert served and all(v["passed"] and v["max_abs"] is not None for v in served)


# --- gapcheck nightly against the same FP16 deployments ------------------------------------------------------------

@pytest.fixture(scope="module")
def half_golden(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A golden bundle of the HalfNet the FP16 deployments serve (FP32 samples and reference, FP32 budgets)."""
    from gapcheck.golden import RecordRequest, record_bundle

    out = tmp_path_factory.mktemp("fp16_golden") / "bundle"
    record_bundle(RecordRequest(out=out, factory=HALF, input_specs=("x:1x3x8x8:float32",), num_samples=12,
                                exporter="torchscript"))
    return out


def _night(server, golden: Path, tmp_path: Path, model: str, protocol: str) -> tuple[int, dict, Path]:
    history, report = tmp_path / f"{model}_{protocol}.sqlite", tmp_path / f"night_{model}_{protocol}.json"
    code = main(["nightly", "--golden", str(golden), "--history", str(history), "--retries", "1", "--endpoint",
                 f"{model}={protocol}://{server.url(protocol)}/{model}", "--json", str(report),
                 "--triton-output-map", "0=y,1=z"])  # the bundle names HalfNet's tuple outputs 0, 1; served: y, z
    return code, json.loads(report.read_text()) if report.exists() else {}, history


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_nightly_on_a_clean_fp16_deployment_passes_with_fp16_budgets(fp16_triton, half_golden, tmp_path, protocol):
    """Sent as FP16 (the server refuses FP32 for x), compared with the bundle's policy at FP16, said once; the
    history row says fp16; each request's digest is of the FP16 bytes sent, not the bundle's FP32 samples."""
    from gapcheck.golden import load_bundle
    from gapcheck.nightly.history import History
    from gapcheck.nightly.probe import InputDigests
    from gapcheck.tensors import fingerprint

    code, report, history = _night(fp16_triton, half_golden, tmp_path, "half", protocol)
    assert code == 0, [f["message"] for f in report.get("findings", [])]
    [said] = _by_code(report, "fp16_deployment")
    assert said["severity"] == "info" and said["evidence"]["fp16_inputs"] == ["x"]
    assert said["evidence"]["fp16_outputs"] == ["y", "z"] and said["evidence"]["budgets"] == "fp16"
    assert "cast to FP16 as they are sent" in said["message"] and "FP16 budgets" in said["message"]
    assert "FP16 bytes sent" in said["evidence"]["input_sha256"]
    codes = {f["code"] for f in report["findings"]}
    assert not codes & {"triton_dtype_mismatch", "golden_output_type", "golden_mismatch"}
    [endpoint] = report["endpoints"]
    assert endpoint["status"] == "pass" and all(o["passed"] for o in endpoint["outputs"])
    assert {o["rtol"] for o in endpoint["outputs"]} == {1e-2}  # FP16's budget, not the recorded FP32 1e-4
    bundle = load_bundle(half_golden)
    x = bundle.inputs["x"]
    recorded = InputDigests(bundle.manifest, bundle.inputs, bundle.num_samples)
    for request in endpoint["requests"]:
        a, b = request["first_sample"], request["first_sample"] + request["count"]
        assert request["input_sha256"]["x"] == fingerprint(x[a:b].astype("float16"))
        assert request["input_sha256"]["x"] != recorded.of(a, b, {"x": x[a:b]})["x"]
    with History(history) as h:
        [row] = h.endpoint_history("half")
    assert (row.precision, row.status) == ("fp16", "pass")


@pytest.mark.parametrize(("model", "protocol"), [("half_weight", "http"), ("half_swap", "grpc")])
def test_nightly_on_an_fp16_deployment_that_serves_another_model_is_a_gap(fp16_triton, half_golden, tmp_path, model,
                                                                         protocol):
    """A head.bias changed by 0.25; outputs that hold each other's tensor (declared FP16 all the same): exit 1."""
    code, report, history = _night(fp16_triton, half_golden, tmp_path, model, protocol)
    assert code == 1, [f["message"] for f in report.get("findings", [])]
    gaps = {f["code"] for f in report["findings"] if f["severity"] == "gap"}
    assert gaps == {"golden_mismatch"} and len(_by_code(report, "fp16_deployment")) == 1
    failed = {o["output"] for o in report["endpoints"][0]["outputs"] if not o["passed"]}
    assert failed == ({"0"} if model == "half_weight" else {"0", "1"})
    from gapcheck.nightly.history import History

    with History(history) as h:
        [row] = h.endpoint_history(model)
    assert row.precision == "fp16" and row.verdict == "gap"


_API = ("server_live", "server_ready", "server_metadata", "model_ready", "model_metadata", "model_config",
        "repository_index")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_audit_takes_what_readiness_read_and_finds_the_same(fp16_triton, monkeypatch, protocol):
    """audit_deployment(read=...) (nightly: readiness's metadata and config) makes only the round trips readiness did
    not (the server's metadata and readiness) and reports what the audit without it reports."""
    from gapcheck.triton import audit as audit_module
    from gapcheck.triton.audit import ModelRead, audit_deployment
    from gapcheck.triton.client import TritonEndpoint, connect

    calls: list[str] = []

    class Counting:
        def __init__(self, conn) -> None:
            self._conn = conn

        def __getattr__(self, name: str):
            value = getattr(self._conn, name)
            if name not in _API:
                return value

            def counted(*args, **kwargs):
                calls.append(name)
                return value(*args, **kwargs)
            return counted

        def __enter__(self):
            self._conn.__enter__()
            return self

        def __exit__(self, *exc):
            return self._conn.__exit__(*exc)

    monkeypatch.setattr(audit_module, "connect", lambda endpoint: Counting(connect(endpoint)))
    endpoint = TritonEndpoint(fp16_triton.url(protocol), protocol)
    graph = fp16_onnx(build_half(), ["y", "z"], planted=None)
    graph.graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.FLOAT  # an FP32 input: one dtype finding
    alone = audit_deployment(endpoint, "half", onnx_model=graph)
    asked_alone, calls[:] = list(calls), []
    with connect(endpoint) as conn:
        read = ModelRead(conn.model_metadata("half"), conn.model_config("half"))
    taken = audit_deployment(endpoint, "half", onnx_model=graph, read=read)
    assert sorted(calls) == ["server_metadata", "server_ready"] and len(asked_alone) >= 6
    assert [(f.code, f.message) for f in taken.findings] == [(f.code, f.message) for f in alone.findings]
    assert "triton_dtype_mismatch" in {f.code for f in taken.findings}
    assert taken.served == alone.served and taken.model_state == alone.model_state == "READY"

"""Production-hardened Triton servers: restricted APIs narrow the audit, never turn into exit 3; tokens never shown."""
from __future__ import annotations

import json
import logging
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from gapcheck.backends.triton import TritonBackend
from gapcheck.cli.app import main
from gapcheck.errors import EndpointError, ExitCode
from gapcheck.findings import Severity
from gapcheck.triton import audit
from gapcheck.triton.audit import audit_deployment
from gapcheck.triton.client import RestrictedApiError, TritonEndpoint, connect
from gapcheck.triton.twin import compare_intermediates_on_server
from tests.triton.conftest import (
    ACCESS_HEADER,
    ACCESS_TOKEN,
    METADATA_HEADER,
    SECRET_HEADER,
    SECRET_VALUE,
    model_py_bytes,
    python_config,
)


def endpoint(server, protocol, **options):
    return TritonEndpoint(f"{protocol}://{server.url(protocol)}", **options)


def test_audit_without_token_checks_what_is_allowed_and_names_the_rest(hardened_triton, tiny_onnx, protocol):
    result = audit_deployment(endpoint(hardened_triton, protocol), "tiny", onnx_model=tiny_onnx)
    assert result.verdict == "pass"
    restricted = {f.evidence["api"]: f for f in result.findings if f.code == audit.API_RESTRICTED}
    assert set(restricted) == {"model-repository", "model-config"}
    assert all(f.severity is Severity.INFO for f in restricted.values())
    assert restricted["model-repository"].message == "served versions not listed: model-repository API restricted"
    assert restricted["model-config"].evidence["expected_header"] == ACCESS_HEADER
    # What metadata shows is still compared: names, data types, full shapes with the batch axis.
    assert result.served.source == "model metadata" and result.served.max_batch_size is None
    assert result.served.inputs[0].shape == (None, 3, 8, 8) and result.served.versions == ("1",)
    assert result.restricted_apis == ("model-repository", "model-config")


def test_a_real_gap_is_still_found_behind_the_restriction(hardened_triton, tiny_onnx, protocol):
    result = audit_deployment(endpoint(hardened_triton, protocol), "tiny_fp16", onnx_model=tiny_onnx)
    (finding,) = [f for f in result.findings if f.code == audit.DTYPE_MISMATCH]
    assert finding.evidence == {"served": "TYPE_FP16", "onnx": "TYPE_FP32"} and result.verdict == "gap"


def test_access_token_opens_the_full_audit_and_is_never_printed(hardened_triton, tiny_onnx_path, protocol, tmp_path,
                                                                 capsys, caplog):
    caplog.set_level(logging.DEBUG)
    report = tmp_path / "audit.json"
    code = main(["--debug", "triton-audit", "--triton-url", f"{protocol}://{hardened_triton.url(protocol)}",
                 "--triton-model", "tiny", "--onnx", str(tiny_onnx_path),
                 "--triton-header", f"{ACCESS_HEADER}:{ACCESS_TOKEN}", "--json", str(report)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = json.loads(report.read_text())
    assert doc["endpoint"]["restricted_apis"] == [] and doc["served"]["source"] == "model config"
    assert doc["served"]["max_batch_size"] == 8
    assert ACCESS_TOKEN not in captured.out + captured.err + report.read_text() + caplog.text


def test_cli_without_token_exits_0_and_lists_the_restriction(hardened_triton, tiny_onnx_path, capsys, tmp_path):
    junit = tmp_path / "audit.xml"
    code = main(["triton-audit", "--triton-url", f"grpc://{hardened_triton.grpc_url}", "--triton-model", "tiny",
                 "--onnx", str(tiny_onnx_path), "--junit", str(junit)])
    out = capsys.readouterr().out
    assert code == 0 and "triton_api_restricted" in out and "served versions not listed" in out
    # One skipped case per restricted API, each under its own name (CI tools merge cases sharing a name).
    cases = list(ET.parse(junit).getroot().iter("testcase"))
    names = [c.get("name") for c in cases]
    assert len(names) == len(set(names))
    skipped = sorted(c.get("name").rsplit("(", 1)[-1] for c in cases if c.find("skipped") is not None)
    assert skipped == ["model-config)", "model-repository)"]


def test_parity_backend_runs_on_what_is_allowed(hardened_triton, protocol, sample):
    with TritonBackend(endpoint(hardened_triton, protocol), "tiny") as backend:
        assert [s.name for s in backend.input_specs()] == ["x"]
        assert backend.infer(sample)["y"].shape == (2, 5)
        assert backend.restricted == []  # health and metadata are open on this server


def test_backend_reads_tensors_from_config_when_metadata_is_restricted(secured_triton, protocol, sample):
    header = {SECRET_HEADER: SECRET_VALUE}  # opens inference and config; metadata needs another header
    with TritonBackend(endpoint(secured_triton, protocol, headers=header), "tiny") as backend:
        assert [(s.name, s.dtype, s.shape) for s in backend.input_specs()] == [("x", "float32", (None, 3, 8, 8))]
        assert backend.infer(sample)["y"].shape == (2, 5)
        assert backend.restricted == ["model metadata not checked: metadata API restricted"]


def test_audit_reads_the_config_when_metadata_is_restricted(secured_triton, tiny_onnx, protocol):
    result = audit_deployment(endpoint(secured_triton, protocol, headers={SECRET_HEADER: SECRET_VALUE}), "tiny",
                              onnx_model=tiny_onnx)
    assert result.verdict == "pass" and result.served.source == "model config"
    (finding,) = [f for f in result.findings if f.code == audit.API_RESTRICTED]
    assert finding.evidence["api"] == "metadata" and finding.evidence["expected_header"] == METADATA_HEADER


def test_audit_with_nothing_readable_is_a_usage_error_in_the_servers_words(secured_triton, tiny_onnx_path, capsys):
    code = main(["triton-audit", "--triton-url", f"http://{secured_triton.http_url}", "--triton-model", "tiny",
                 "--onnx", str(tiny_onnx_path)])
    err = capsys.readouterr().err
    assert code == ExitCode.USAGE
    assert "restricted, expecting header" in err and "--triton-header" in err


def test_layers_on_a_server_whose_model_control_is_restricted_exit_2_with_the_servers_words(
        hardened_triton, tiny_onnx, protocol, sample):
    feeds = sample
    with pytest.raises(RestrictedApiError) as info:
        compare_intermediates_on_server(endpoint(hardened_triton, protocol), "tiny", tiny_onnx,
                                        [tiny_onnx.graph.node[0].output[0]], feeds)
    assert info.value.exit_code == ExitCode.USAGE
    assert "comparing layers of 'tiny' on the server needs" in info.value.message
    assert "is restricted, expecting header" in info.value.message


def test_twin_with_the_token_runs_on_the_hardened_server(hardened_triton, tiny_onnx, protocol, sample):
    feeds = sample
    value = tiny_onnx.graph.node[0].output[0]
    outputs = compare_intermediates_on_server(
        endpoint(hardened_triton, protocol, headers={ACCESS_HEADER: ACCESS_TOKEN}), "tiny", tiny_onnx, [value], feeds,
        extra_files={"model.py": model_py_bytes()})
    assert outputs[value].shape[0] == 2 and np.isfinite(outputs["y"]).all()


def test_export_diff_parity_runs_against_the_hardened_server(hardened_triton, tiny_onnx_path, protocol, capsys):
    from tests.triton.test_export_diff_parity import ARGS

    code = main([*ARGS, "--onnx", str(tiny_onnx_path), "--triton-url", f"{protocol}://{hardened_triton.url(protocol)}",
                 "--triton-model", "tiny"])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    assert "triton_api_restricted" in captured.out and f"triton-{protocol}" in captured.out


def test_export_diff_triton_layers_without_model_control_exit_2_in_the_servers_words(hardened_triton,
                                                                                     tiny_onnx_path, capsys):
    from tests.triton.test_export_diff_parity import ARGS

    code = main([*ARGS, "--onnx", str(tiny_onnx_path), "--triton-url", f"grpc://{hardened_triton.grpc_url}",
                 "--triton-model", "tiny", "--triton-layers"])
    err = capsys.readouterr().err
    assert code == ExitCode.USAGE, err
    assert "is restricted, expecting header" in err and f"--triton-header {ACCESS_HEADER}:TOKEN" in err


@pytest.fixture(scope="module")
def health_restricted_triton(tiny_onnx, tmp_path_factory):
    """Health (liveness, readiness) and the repository restricted: nothing says whether a model is ready."""
    from gapcheck.triton.local_server import LocalTritonServer, restriction_args
    from tests.triton.conftest import python_config, write_python_model

    repo = tmp_path_factory.mktemp("health_repo")
    write_python_model(repo, "tiny", python_config("tiny"), {1: tiny_onnx})
    write_python_model(repo, "broken", python_config("broken", parameters={"fail_to_load": "1"}), {1: tiny_onnx})
    server = LocalTritonServer(repo, workdir=tmp_path_factory.mktemp("health_work"),
                               extra_args=restriction_args(("health", "model-repository"), ACCESS_HEADER, ACCESS_TOKEN))
    with server.running(timeout_s=90):
        yield server


def test_audit_with_health_restricted_still_passes_and_names_what_was_skipped(health_restricted_triton, tiny_onnx,
                                                                             protocol):
    result = audit_deployment(endpoint(health_restricted_triton, protocol), "tiny", onnx_model=tiny_onnx)
    assert result.verdict == "pass" and result.served.source == "model config"
    (health,) = [f for f in result.findings if f.code == audit.API_RESTRICTED and f.evidence["api"] == "health"]
    assert health.evidence["not_checked"] == ["server liveness not checked", "server readiness not checked",
                                              "model readiness not checked"]


def test_a_model_that_failed_to_load_is_still_not_ready_when_readiness_cannot_be_asked(health_restricted_triton,
                                                                                       tiny_onnx, protocol, sample):
    result = audit_deployment(endpoint(health_restricted_triton, protocol), "broken", onnx_model=tiny_onnx)
    assert result.verdict == "gap" and [f.code for f in result.findings if f.is_gap] == [audit.NOT_READY]
    with TritonBackend(endpoint(health_restricted_triton, protocol), "tiny") as backend:
        assert backend.infer(sample)["y"].shape == (2, 5)
        assert backend.restricted == ["server liveness not checked: health API restricted",
                                      "model readiness not checked: health API restricted"]


def test_strict_readiness_a_failed_other_model_is_a_warning_not_a_failure(hardened_triton, tiny_onnx, tiny_onnx_path,
                                                                           capsys):
    """Production's --strict-readiness: one model failing to load makes the whole server unready. The audit of a
    healthy model still passes (exit 0), says why the server is unready, and does not wait long for it."""
    token = {ACCESS_HEADER: ACCESS_TOKEN}
    broken = python_config("strict_broken", parameters={"fail_to_load": "1"})
    files = {"file:1/model.onnx": tiny_onnx.SerializeToString(), "file:1/model.py": model_py_bytes()}
    endpoint = TritonEndpoint(hardened_triton.url("http"), "http", headers=token, retries=0)
    with connect(endpoint) as conn:
        with pytest.raises(EndpointError, match="strict_broken"):
            conn.load_model("strict_broken", config=_config_json(broken), files=files)
        try:
            assert conn.server_ready() is False
            code = main(["triton-audit", "--triton-url", f"http://{hardened_triton.url('http')}", "--triton-model",
                         "tiny", "--onnx", str(tiny_onnx_path), "--triton-retries", "1"])
            out = capsys.readouterr().out
            assert code == ExitCode.NO_GAP, out
            assert "triton_server_not_ready" in out and "strict-readiness" in out
        finally:  # an unloaded failed model still counts against readiness: load it healthy instead
            conn.load_model("strict_broken", config=_config_json(python_config("strict_broken")), files=files)
    with connect(TritonEndpoint(hardened_triton.url("http"), "http")) as conn:
        assert conn.server_ready() is True  # the other tests see a ready server again


def _config_json(pbtxt: str) -> str:
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    return json_format.MessageToJson(text_format.Parse(pbtxt, model_config_pb2.ModelConfig()),
                                     preserving_proto_field_name=True)

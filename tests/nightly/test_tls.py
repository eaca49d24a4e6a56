"""TLS with a private CA, through the one Triton group: nightly reaches a grpcs:// endpoint with --triton-ssl-root-cert
or ``[triton] ssl_root_cert``, and export-diff and triton-audit honour ``[triton] ssl_*`` too (they used to ignore it)."""
from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from gapcheck.cli.app import main
from gapcheck.triton.local_server import LocalTritonServer
from tests.nightly.conftest import FACTORY, INPUT, write_model
from tests.triton.test_tls import make_certificates


@pytest.fixture(scope="module")
def tls_served(golden_onnx: onnx.ModelProto, tmp_path_factory: pytest.TempPathFactory):
    certs = make_certificates(tmp_path_factory.mktemp("nightly_certs"))
    repo = tmp_path_factory.mktemp("nightly_tls_repo")
    write_model(repo, "tiny", golden_onnx)
    server = LocalTritonServer(repo, workdir=tmp_path_factory.mktemp("nightly_tls_work"), extra_args=(
        "--grpc-use-ssl=true", f"--grpc-server-cert={certs['cert']}", f"--grpc-server-key={certs['key']}"))
    with server.running(timeout_s=120):
        yield server, certs


def _config(tmp_path: Path, ca: Path) -> Path:
    path = tmp_path / "gapcheck.toml"
    path.write_text(f'[triton]\nssl_root_cert = "{ca}"\nretries = 0\ntimeout_s = 20\n')
    return path


def test_nightly_reaches_a_grpcs_endpoint_with_a_private_ca(tls_served, tiny_golden, tmp_path, capsys):
    server, certs = tls_served
    base = ["nightly", "--golden", str(tiny_golden), "--endpoint", f"tls=grpcs://{server.grpc_url}/tiny", "--no-audit"]
    code = main([*base, "--history", str(tmp_path / "a.sqlite"), "--triton-ssl-root-cert", str(certs["ca"]),
                 "--json", str(tmp_path / "r.json")])
    assert code == 0, capsys.readouterr().err
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["endpoints"][0]["status"] in ("pass", "new")
    # the same from the [triton] section of a config file
    assert main([*base, "--history", str(tmp_path / "b.sqlite"), "--config", str(_config(tmp_path, certs["ca"]))]) == 0
    # without the CA the server's certificate is not trusted: the endpoint fails (exit 3), it is never a pass
    assert main([*base, "--history", str(tmp_path / "c.sqlite"), "--triton-retries", "0",
                 "--triton-deadline", "30"]) == 3


def test_export_diff_and_triton_audit_honour_the_triton_section_tls(tls_served, golden_onnx, tmp_path, capsys):
    server, certs = tls_served
    config = _config(tmp_path, certs["ca"])
    onnx_path = tmp_path / "tiny.onnx"
    onnx.save_model(golden_onnx, str(onnx_path))
    url = f"grpcs://{server.grpc_url}"
    assert main(["triton-audit", "--triton-url", url, "--triton-model", "tiny", "--onnx", str(onnx_path),
                 "--config", str(config)]) == 0, capsys.readouterr().err
    code = main(["export-diff", "--model", FACTORY, "--input", INPUT, "--exporter", "torchscript", "--no-progress",
                 "--no-cache", "--triton-url", url, "--triton-model", "tiny", "--config", str(config),
                 "--json", str(tmp_path / "d.json")])
    assert code == 0, capsys.readouterr().out
    backends = {o["backend"] for o in json.loads((tmp_path / "d.json").read_text())["outputs"]}
    assert "triton-grpc" in backends  # the deployment was reached over TLS and compared
    # without the section, the same command cannot verify the server (exit 3)
    assert main(["triton-audit", "--triton-url", url, "--triton-model", "tiny", "--onnx", str(onnx_path),
                 "--triton-retries", "0"]) == 3

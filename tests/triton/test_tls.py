"""TLS against a live server: grpcs:// with the CA, the probe's ALPN path for a bare host:port, and no CA = exit 3."""
from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gapcheck.cli.app import main
from gapcheck.errors import ExitCode
from gapcheck.triton.audit import audit_deployment
from gapcheck.triton.client import TlsOptions, TritonEndpoint
from gapcheck.triton.local_server import LocalTritonServer
from tests.triton.conftest import python_config, write_python_model


def _cert(subject: str, key, issuer_name, issuer_key, *, ca: bool) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
               .issuer_name(issuer_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_certificates(folder: Path) -> dict[str, Path]:
    """A throw-away CA and a server certificate for 127.0.0.1 (PEM files)."""
    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gapcheck test CA")])
    ca = _cert("gapcheck test CA", ca_key, ca_name, ca_key, ca=True)
    server = _cert("127.0.0.1", server_key, ca_name, ca_key, ca=False)
    paths = {"ca": folder / "ca.pem", "cert": folder / "server.pem", "key": folder / "server.key"}
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths["key"].write_bytes(server_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                      serialization.NoEncryption()))
    return paths


@pytest.fixture(scope="module")
def tls_triton(tiny_onnx, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls")
    certs = make_certificates(folder)
    repo = tmp_path_factory.mktemp("tls_repo")
    write_python_model(repo, "tiny", python_config("tiny"), {1: tiny_onnx})
    server = LocalTritonServer(repo, workdir=tmp_path_factory.mktemp("tls_work"), extra_args=(
        "--grpc-use-ssl=true", f"--grpc-server-cert={certs['cert']}", f"--grpc-server-key={certs['key']}"))
    with server.running(timeout_s=90):
        yield server, certs


def test_grpcs_url_with_the_ca_audits(tls_triton, tiny_onnx_path, capsys):
    server, certs = tls_triton
    code = main(["triton-audit", "--triton-url", f"grpcs://{server.grpc_url}", "--triton-model", "tiny",
                 "--onnx", str(tiny_onnx_path), "--triton-ssl-root-cert", str(certs["ca"])])
    assert code == 0, capsys.readouterr().err


def test_bare_host_port_with_tls_is_probed_through_alpn(tls_triton, tiny_onnx):
    server, certs = tls_triton
    endpoint = TritonEndpoint(server.grpc_url, tls=TlsOptions(root_certificates=str(certs["ca"])))
    assert endpoint.resolve().protocol == "grpc"
    result = audit_deployment(endpoint, "tiny", onnx_model=tiny_onnx)
    assert result.protocol_detected and result.endpoint == f"grpcs://{server.grpc_url}"


def test_grpcs_without_the_ca_is_an_endpoint_failure(tls_triton, tiny_onnx_path, capsys):
    server, _ = tls_triton
    code = main(["triton-audit", "--triton-url", f"grpcs://{server.grpc_url}", "--triton-model", "tiny",
                 "--onnx", str(tiny_onnx_path), "--triton-retries", "0", "--triton-timeout", "3"])
    assert code == ExitCode.BACKEND
    assert server.grpc_url in capsys.readouterr().err


def test_plain_grpc_on_a_tls_port_names_the_mismatch(tls_triton, tiny_onnx_path, capsys):
    server, _ = tls_triton
    code = main(["triton-audit", "--triton-url", f"grpc://{server.grpc_url}", "--triton-model", "tiny",
                 "--onnx", str(tiny_onnx_path), "--triton-retries", "2", "--triton-timeout", "3"])
    err = capsys.readouterr().err
    assert code == ExitCode.USAGE, err
    assert f"{server.grpc_url} expects TLS: use grpcs://" in err and "Traceback" not in err


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_tls_on_a_plain_port_names_the_mismatch_in_one_line(triton, protocol, tiny_onnx_path, capsys):
    scheme = "https" if protocol == "http" else "grpcs"
    code = main(["triton-audit", "--triton-url", f"{scheme}://{triton.url(protocol)}", "--triton-model", "tiny",
                 "--onnx", str(tiny_onnx_path), "--triton-retries", "2", "--triton-timeout", "3"])
    err = capsys.readouterr().err
    assert code == ExitCode.USAGE, err
    name = "HTTP" if protocol == "http" else "gRPC"
    assert f"{triton.url(protocol)} answered {name} without TLS: use {protocol}://" in err
    assert len(err.strip().splitlines()) == 1  # no gRPC core log line beside it

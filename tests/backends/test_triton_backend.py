"""TritonBackend and its client without a server: URL handling, redaction, retry policy, fast failure."""
from __future__ import annotations

import pytest
from tritonclient.utils import InferenceServerException

from gapcheck.backends.triton import TritonBackend
from gapcheck.errors import EndpointError, ExitCode, UsageError
from gapcheck.triton.client import TlsOptions, TritonEndpoint, connect, parse_url, redact, secrets_in
from gapcheck.triton.local_server import free_ports


@pytest.mark.parametrize(
    ("url", "address", "ssl"),
    [
        ("localhost:8001", "localhost:8001", False),
        ("http://localhost:8000/", "localhost:8000", False),
        ("https://triton.example:443", "triton.example:443", True),
        ("grpc://10.0.0.1:8001", "10.0.0.1:8001", False),
    ],
)
def test_parse_url(url, address, ssl):
    endpoint = parse_url(url)
    assert (endpoint.address, endpoint.ssl) == (address, ssl)
    assert "pw" not in endpoint.display


@pytest.mark.parametrize("url", ["ftp://host:1", "host:1/v2/models", "", "grpc://user:pw@10.0.0.1:8001"])
def test_parse_url_rejects_what_is_not_host_port(url):
    with pytest.raises(UsageError):
        parse_url(url)


def test_secrets_are_header_values_and_url_credentials():
    secrets = secrets_in("http://alice:hunter22@host:8000", {"Authorization": "Bearer tok-123"})
    text = redact("sent Bearer tok-123 as alice:hunter22 (hunter22)", secrets)
    assert "tok-123" not in text and "hunter22" not in text and text.count("***") == 3


def test_unknown_protocol_is_a_usage_error():
    with pytest.raises(UsageError, match="protocol"):
        TritonEndpoint("localhost:8001", protocol="websocket")


@pytest.mark.parametrize("options", [{"timeout_s": 0}, {"retries": -1}])
def test_endpoint_rejects_a_non_positive_timeout_and_negative_retries(options):
    with pytest.raises(UsageError, match="timeout must be positive and retries non-negative"):
        TritonEndpoint("localhost:8001", **options)


def test_endpoint_rejects_a_url_with_a_path_when_made():
    with pytest.raises(UsageError, match="host:port"):
        TritonEndpoint("localhost:8000/v2/models")


def test_endpoint_repr_and_display_url_never_show_secrets():
    headers = {"Authorization": "Bearer tok-123"}
    endpoint = TritonEndpoint("https://host:8000", "http", headers=headers, retries=1)
    headers["Authorization"] = "changed"  # the endpoint keeps its own copy
    assert endpoint.headers == {"Authorization": "Bearer tok-123"}
    assert endpoint.display_url == "https://host:8000"
    text = repr(endpoint)
    assert "tok-123" not in text
    assert "https://host:8000" in text and "retries=1" in text
    assert "Bearer tok-123" in endpoint.secrets


def test_an_endpoint_with_url_credentials_is_refused_without_echoing_them():
    with pytest.raises(UsageError) as refused:  # gapcheck never sends them; dropping them would run unauthenticated
        TritonEndpoint("https://alice:hunter22@host:8000", "http")
    assert "hunter22" not in str(refused.value) and "alice" not in str(refused.value)


def test_tls_options_imply_tls_and_endpoints_compare_by_value():
    endpoint = TritonEndpoint("host:8001", tls=TlsOptions(root_certificates="ca.pem"))
    assert endpoint.address.ssl and endpoint.display_url == "https://host:8001"
    assert TritonEndpoint("host:8001", headers={"k": "v"}) == TritonEndpoint("host:8001", headers={"k": "v"})
    assert TritonEndpoint("host:8001", headers={"k": "v"}) != TritonEndpoint("host:8001", headers={"k": "w"})


def _connection(retries=2):
    return connect(TritonEndpoint("127.0.0.1:1", protocol="http", retries=retries,
                                  headers={"authorization": "Bearer abc-secret"}), backoff_s=0.0)


def test_transient_failures_are_retried_then_reported_once():
    attempts = []

    def flaky():
        attempts.append(1)
        raise InferenceServerException("server busy (token Bearer abc-secret)", status="503")

    with pytest.raises(EndpointError) as info:
        _connection().call("inference", flaky)
    assert len(attempts) == 3
    assert "after 3 attempts" in str(info.value) and "abc-secret" not in str(info.value)
    assert info.value.exit_code is ExitCode.BACKEND


def test_permanent_failures_are_not_retried():
    attempts = []

    def bad_request():
        attempts.append(1)
        raise InferenceServerException("unexpected shape for input 'x'", status="400")

    with pytest.raises(EndpointError, match="unexpected shape"):
        _connection().call("inference", bad_request)
    assert len(attempts) == 1


def test_a_retry_that_succeeds_returns_the_answer():
    answers = iter([False, False, True])
    assert _connection().call("readiness", lambda: next(answers), retry_if=lambda ok: not ok) is True


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_server_down_fails_fast_with_an_endpoint_error(protocol):
    (port,) = free_ports(1)
    with pytest.raises(EndpointError) as info:
        TritonBackend(TritonEndpoint(f"127.0.0.1:{port}", protocol=protocol, retries=2, timeout_s=2,
                                     headers={"x-api-key": "k-very-secret"}), "tiny")
    message = str(info.value)
    assert f"127.0.0.1:{port}" in message and "after 3 attempts" in message
    assert "k-very-secret" not in message

"""Servers and repositories an attacker (or bad luck) controls: huge answers, torn answers, garbage protobuf,
secrets reflected back, links planted in a model repository.

Each fake server lives on 127.0.0.1 in a thread of the test process; every case must end with a gapcheck
error and an exit code of 2 or 3, quickly, and never print a header value or URL credentials.
"""
from __future__ import annotations

import os
import socket
import time
from concurrent import futures

import grpc
import pytest

from gapcheck.cli.app import main
from gapcheck.errors import EndpointError, ExitCode, UsageError
from gapcheck.triton.client import TritonEndpoint, connect
from gapcheck.triton.repository import write_model_repository
from tests.triton.test_hostile_endpoints import _read_request, fake_server

SECRET = "Bearer sk-live-91d0e4aa"


def _audit(url: str, onnx_path, *extra: str) -> int:
    return main(["triton-audit", "--triton-url", url, "--triton-model", "tiny", "--onnx", str(onnx_path),
                 "--triton-retries", "0", "--triton-timeout", "5", "--triton-header", f"authorization:{SECRET}",
                 *extra])


def huge_declared(conn: socket.socket) -> None:
    """Declares 4 GiB and starts sending it as fast as the socket takes it."""
    _read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 4294967296\r\n\r\n")
    block = b"[" * 65536
    for _ in range(64 * 1024):
        conn.sendall(block)


def huge_chunked(conn: socket.socket) -> None:
    """No length at all: chunks of 64 KiB, quickly, 'forever' (64 MiB)."""
    _read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    block = b"%x\r\n" % 65536 + b" " * 65536 + b"\r\n"
    for _ in range(1024):
        conn.sendall(block)


def torn(conn: socket.socket) -> None:
    """Promises 1000 bytes, sends 12, hangs up."""
    _read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"name\": \"tr")


def reflector(conn: socket.socket) -> None:
    """A 400 whose error message repeats every request header back, the secret included."""
    request = _read_request(conn).decode("latin-1")
    if " /v2/health/" in request:  # live and ready, so the audit goes on to ask for metadata
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        return
    body = ('{"error": "bad request, headers were: ' + request.replace("\r\n", " | ").replace('"', "'") + '"}').encode()
    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: "
                 + str(len(body)).encode() + b"\r\n\r\n" + body)


@pytest.mark.parametrize("handler", [huge_declared, huge_chunked], ids=["content-length", "chunked"])
def test_huge_http_answers_are_cut_off_by_bytes_not_only_by_the_deadline(handler, tiny_onnx_path, capsys):
    with fake_server(handler) as port:
        endpoint = TritonEndpoint(f"http://127.0.0.1:{port}", timeout_s=30, retries=0, max_response_bytes=1 << 20)
        started = time.monotonic()
        with connect(endpoint) as conn, pytest.raises(EndpointError, match="response size limit of 1048576 bytes"):
            conn.server_metadata()
        assert time.monotonic() - started < 10  # far inside the deadline: the size, not the timer, stopped it
        code = _audit(f"http://127.0.0.1:{port}", tiny_onnx_path)
    err = capsys.readouterr().err
    # The CLI's default limit (256 MiB) is above what the chunked server sends before hanging up.
    assert code == ExitCode.BACKEND and " failed: " in err and "sk-live" not in err


def test_a_server_that_hangs_up_mid_answer_is_an_endpoint_error(tiny_onnx_path, capsys):
    with fake_server(torn) as port:
        code = _audit(f"http://127.0.0.1:{port}", tiny_onnx_path)
    err = capsys.readouterr().err
    assert code == ExitCode.BACKEND and f"http://127.0.0.1:{port}" in err and "server metadata" in err
    assert "sk-live" not in err and "Traceback" not in err


@pytest.mark.parametrize("debug", [[], ["--debug"]], ids=["plain", "debug"])
def test_a_server_reflecting_the_secret_header_never_gets_it_printed(debug, tiny_onnx_path, capsys):
    with fake_server(reflector) as port:
        code = main([*debug, "triton-audit", "--triton-url", f"http://127.0.0.1:{port}", "--triton-model", "tiny",
                     "--onnx", str(tiny_onnx_path), "--triton-retries", "0", "--triton-header",
                     f"authorization:{SECRET}"])
    captured = capsys.readouterr()
    assert code == ExitCode.BACKEND and "bad request" in captured.err
    assert "sk-live" not in captured.err + captured.out and "91d0e4aa" not in captured.err + captured.out


@pytest.mark.parametrize("debug", [[], ["--debug"]], ids=["plain", "debug"])
def test_url_credentials_are_refused_and_never_printed(debug, tiny_onnx_path, capsys):
    with socket.socket() as spare:  # a port nobody listens on
        spare.bind(("127.0.0.1", 0))
        port = spare.getsockname()[1]
    for scheme in ("http", "grpc"):
        code = main([*debug, "triton-audit", "--triton-url", f"{scheme}://alice:hunter2pw@127.0.0.1:{port}",
                     "--triton-model", "tiny", "--onnx", str(tiny_onnx_path), "--triton-retries", "0",
                     "--triton-timeout", "2"])
        captured = capsys.readouterr()
        # gapcheck never sends URL credentials: running without them silently would be worse than stopping
        assert code == ExitCode.USAGE and "credentials" in captured.err, captured.err
        assert "hunter2pw" not in captured.err + captured.out and "alice" not in captured.err + captured.out


def test_control_characters_in_a_url_are_a_usage_error_and_never_echoed(tiny_onnx_path, capsys):
    code = main(["triton-audit", "--triton-url", "http://127.0.0.1:8000/\x1b[2Jtiny", "--onnx", str(tiny_onnx_path)])
    captured = capsys.readouterr()
    assert code == ExitCode.USAGE and "\x1b" not in captured.err + captured.out


class _Raw(grpc.GenericRpcHandler):
    """Answers every gRPC method with the same raw bytes (no protobuf serializer)."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    def service(self, handler_call_details):  # noqa: ANN001 - grpc's interface
        return grpc.unary_unary_rpc_method_handler(lambda request, context: self.payload)


@pytest.fixture
def raw_grpc_server():
    servers = []

    def start(payload: bytes) -> int:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2),
                             options=[("grpc.max_send_message_length", 64 << 20)])
        server.add_generic_rpc_handlers((_Raw(payload),))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return port

    yield start
    for server in servers:
        server.stop(0)


def test_garbage_protobuf_on_the_grpc_port_is_an_endpoint_error_without_retries(raw_grpc_server, tiny_onnx_path,
                                                                                 capsys):
    port = raw_grpc_server(b"\xff\xff\xff\xff\x0f garbage, not a protobuf message")
    endpoint = TritonEndpoint(f"grpc://127.0.0.1:{port}", timeout_s=5, retries=3)
    started = time.monotonic()
    with connect(endpoint) as conn, pytest.raises(EndpointError, match="server metadata failed:"):
        conn.server_metadata()
    assert time.monotonic() - started < 1.0  # not retried: garbage does not get better by asking again
    code = _audit(f"grpc://127.0.0.1:{port}", tiny_onnx_path)
    err = capsys.readouterr().err
    assert code == ExitCode.BACKEND and "sk-live" not in err and "Traceback" not in err


def test_huge_grpc_messages_are_refused_by_size(raw_grpc_server):
    port = raw_grpc_server(b"\x0a\x03abc" + b"\x12" + b"\x80\x80\x80\x01" + b"x" * (2 << 20))  # 2 MiB message
    endpoint = TritonEndpoint(f"grpc://127.0.0.1:{port}", timeout_s=5, retries=3, max_response_bytes=1 << 20)
    started = time.monotonic()
    with connect(endpoint) as conn, pytest.raises(EndpointError, match="RESOURCE_EXHAUSTED"):
        conn.server_metadata()
    assert time.monotonic() - started < 1.0  # not retried


def test_response_limits_out_of_range_are_usage_errors():
    with pytest.raises(UsageError, match="response size limit"):
        TritonEndpoint("http://127.0.0.1:8000", max_response_bytes=10)


@pytest.mark.parametrize("planted", ["config.pbtxt", "1", "1/model.onnx"])
def test_links_planted_in_an_existing_repository_are_never_written_through(planted, tiny_onnx, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "bashrc").write_text("precious\n")
    repo = tmp_path / "repo"
    (repo / "net" / "1").mkdir(parents=True)
    link = repo / "net" / planted
    if link.exists():
        link.rmdir()
    os.symlink(victim if planted == "1" else victim / "bashrc", link)
    with pytest.raises(UsageError, match="symbolic link"):
        write_model_repository(tiny_onnx, repo, "net")
    assert (victim / "bashrc").read_text() == "precious\n" and sorted(os.listdir(victim)) == ["bashrc"]


def test_a_hostile_config_in_an_existing_repository_is_replaced_and_checked(tiny_onnx, tmp_path):
    repo = tmp_path / "repo"
    (repo / "net").mkdir(parents=True)
    (repo / "net" / "config.pbtxt").write_text('name: "evil"\nbackend: "python"\nparameters { key: "x" }\n\x00\x1b[2J')
    model_dir = write_model_repository(tiny_onnx, repo, "net")
    text = (model_dir / "config.pbtxt").read_text()
    assert 'name: "net"' in text and "evil" not in text and "\x1b" not in text


def test_python_backend_copy_never_rewrites_through_a_link(tiny_onnx, tmp_path):
    from gapcheck.errors import InputError
    from gapcheck.triton.local_server import python_backend_copy

    repo = tmp_path / "repo"
    write_model_repository(tiny_onnx, repo, "net")
    victim = tmp_path / "victim.pbtxt"
    victim.write_text((repo / "net" / "config.pbtxt").read_text())
    (repo / "net" / "config.pbtxt").unlink()
    os.symlink(victim, repo / "net" / "config.pbtxt")
    with pytest.raises(InputError, match="symbolic link"):
        python_backend_copy(repo, tmp_path / "served")
    assert "onnxruntime_onnx" in victim.read_text()

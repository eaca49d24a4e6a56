"""Endpoints that misbehave: a slow-loris, a black hole, garbage JSON, the wrong protocol, secrets in headers.

The fake servers are plain sockets on 127.0.0.1 in a thread of the test process.
"""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from tritonclient.utils import InferenceServerException

from gapcheck.cli.app import main
from gapcheck.errors import EndpointError, ExitCode, UsageError
from gapcheck.triton.audit import audit_deployment
from gapcheck.triton.client import ProtocolMismatchError, TritonEndpoint, connect

SECRET = "Bearer sk-live-7f3a9b2c"


@contextmanager
def fake_server(handle: Callable[[socket.socket], None]) -> Iterator[int]:
    """Serve each connection with ``handle`` in its own thread until the block ends; yields the port."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            threading.Thread(target=_guarded, args=(handle, conn, stop), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def _guarded(handle: Callable[[socket.socket], None], conn: socket.socket, stop: threading.Event) -> None:
    conn.settimeout(1.0)
    try:
        handle(conn)
    except OSError:
        pass
    finally:
        conn.close()


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def slow_loris(conn: socket.socket) -> None:
    """A big Content-Length, then one byte every 0.5 s: every read succeeds, the answer never ends."""
    _read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n")
    for _ in range(120):
        time.sleep(0.5)
        conn.sendall(b" ")


def answer(body: bytes) -> Callable[[socket.socket], None]:
    def handle(conn: socket.socket) -> None:
        while _read_request(conn):
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\n\r\n" + body)
    return handle


def black_hole(conn: socket.socket) -> None:
    """Accepts, reads, never answers."""
    end = time.monotonic() + 60
    while time.monotonic() < end:
        try:
            if not conn.recv(4096):
                return
        except TimeoutError:
            continue


def test_slow_loris_http_ends_within_the_total_deadline(tiny_onnx_path, capsys):
    with fake_server(slow_loris) as port:
        started = time.monotonic()
        code = main(["triton-audit", "--triton-url", f"http://127.0.0.1:{port}", "--triton-model", "tiny", "--onnx",
                     str(tiny_onnx_path), "--timeout", "2", "--retries", "0"])
        elapsed = time.monotonic() - started
    assert code == ExitCode.BACKEND
    assert elapsed < 15, f"took {elapsed:.1f}s"  # generous on a loaded machine; unbounded it ran > 90 s
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port}" in err and "total deadline of 2s" in err


def test_black_hole_grpc_ends_within_the_total_deadline(tiny_onnx):
    with fake_server(black_hole) as port:
        started = time.monotonic()
        with pytest.raises(EndpointError):
            audit_deployment(TritonEndpoint(f"grpc://127.0.0.1:{port}", timeout_s=1.5, retries=0), "tiny",
                             onnx_model=tiny_onnx)
        assert time.monotonic() - started < 15


@pytest.mark.parametrize(("body", "words"), [(b"<html>not json</html>", "not valid JSON"),
                                             (b"[1, 2, 3]", "JSON list, not an object")])
def test_garbage_json_is_an_endpoint_error_naming_the_endpoint(tiny_onnx_path, body, words, capsys):
    with fake_server(answer(body)) as port:
        code = main(["triton-audit", "--triton-url", f"http://127.0.0.1:{port}", "--triton-model", "tiny", "--onnx",
                     str(tiny_onnx_path), "--triton-retries", "0", "--triton-header", f"authorization:{SECRET}"])
    err = capsys.readouterr().err
    assert code == ExitCode.BACKEND
    assert f"http://127.0.0.1:{port}" in err and words in err and "server metadata" in err
    assert "sk-live" not in err and "Traceback" not in err


def test_wrong_protocol_on_a_port_is_one_line_naming_the_mismatch(triton, tiny_onnx_path, capsys):
    http_port = triton.server.ports.http
    code = main(["triton-audit", "--triton-url", f"grpc://127.0.0.1:{http_port}", "--triton-model", "tiny",
                 "--onnx", str(tiny_onnx_path), "--triton-retries", "3"])
    err = capsys.readouterr().err
    assert code == ExitCode.USAGE
    assert f"127.0.0.1:{http_port} answered HTTP; pass http:// or --protocol http" in err
    assert "attempts" not in err  # found on the first failure, not after every retry


def test_http_spoken_to_a_grpc_port_is_named_too(triton, tiny_onnx):
    with pytest.raises(ProtocolMismatchError) as info:
        audit_deployment(TritonEndpoint(triton.server.grpc_url, "http", retries=0), "tiny", onnx_model=tiny_onnx)
    assert info.value.answered == "grpc" and info.value.exit_code == ExitCode.USAGE


@pytest.mark.parametrize("kind", ["http", "grpc"])
def test_bare_host_port_probes_and_says_which_protocol_answered(triton, tiny_onnx, kind, capsys, tiny_onnx_path):
    result = audit_deployment(TritonEndpoint(triton.url(kind)), "tiny", onnx_model=tiny_onnx)
    assert (result.protocol, result.protocol_detected, result.verdict) == (kind, True, "pass")
    assert main(["triton-audit", "--triton-url", triton.url(kind), "--triton-model", "tiny",
                 "--onnx", str(tiny_onnx_path)]) == 0
    assert f"({kind}, detected)" in capsys.readouterr().out


def test_url_names_model_and_version_for_the_cli(triton, tiny_onnx_path, capsys):
    assert main(["triton-audit", "--triton-url", f"grpc://{triton.url('grpc')}/tiny_versions?version=2",
                 "--onnx", str(tiny_onnx_path)]) == 1
    assert "triton_version_stale" in capsys.readouterr().out


@pytest.mark.parametrize("value", [f"{SECRET}\r\nX-Injected: 1", f"{SECRET}\n", f"{SECRET}\x1b[2J"])
def test_header_values_with_control_characters_are_refused_naming_only_the_key(tiny_onnx_path, value, capsys):
    for debug in ([], ["--debug"]):  # not even the traceback shows it
        code = main([*debug, "triton-audit", "--triton-url", "http://127.0.0.1:1", "--triton-model", "tiny", "--onnx",
                     str(tiny_onnx_path), "--triton-header", f"authorization:{value}"])
        captured = capsys.readouterr()
        assert code == ExitCode.USAGE and "'authorization'" in captured.err
        assert "sk-live" not in captured.out + captured.err
    with pytest.raises(UsageError) as info:
        TritonEndpoint("http://h:1", headers={"Authorization": value})
    assert "sk-live" not in str(info.value)


def test_any_client_failure_is_redacted_even_in_escaped_form():
    conn = connect(TritonEndpoint("http://127.0.0.1:1", headers={"authorization": SECRET}, retries=0), backoff_s=0)

    def leaky() -> None:
        raise ValueError(f"invalid value for header field 'authorization': {SECRET!r} (raw {SECRET})")

    with pytest.raises(EndpointError) as info:
        conn.call("server metadata", leaky)
    assert "sk-live" not in str(info.value) and "***" in str(info.value)

    def server_echo() -> None:
        raise InferenceServerException(f"bad token {SECRET}\x1b[2J", status="400")

    with pytest.raises(EndpointError) as info:
        conn.call("server metadata", server_echo)
    assert "sk-live" not in str(info.value) and "\x1b" not in str(info.value)


def test_total_deadline_holds_in_worker_threads_too():
    """nightly runs one client per worker thread: the gevent timer must fire there as well."""
    from concurrent.futures import ThreadPoolExecutor

    def one() -> float:
        started = time.monotonic()
        with pytest.raises(EndpointError, match="total deadline"):
            connect(TritonEndpoint(f"http://127.0.0.1:{port}", timeout_s=1.5, retries=0)).server_metadata()
        return time.monotonic() - started

    with fake_server(slow_loris) as port, ThreadPoolExecutor(max_workers=2) as pool:
        elapsed = list(pool.map(lambda _: one(), range(2)))
    assert max(elapsed) < 10, elapsed


def test_every_attempt_is_capped_at_the_time_the_endpoint_has_left():
    """A plain connect() keeps an endpoint's total deadline (nightly's audit connected this way and lost it)."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Bounded(TritonEndpoint):
        def time_left(self, last_error: str = "") -> float:
            return 0.5

    with fake_server(black_hole) as port:
        conn = connect(Bounded(f"http://127.0.0.1:{port}", "http", timeout_s=30, retries=0), backoff_s=0)
        with pytest.raises(EndpointError) as caught:
            conn.server_metadata()
    assert "total deadline of 0.5s" in str(caught.value)

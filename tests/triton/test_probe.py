"""The protocol probe on its own: what the first bytes say, and servers that say nothing (no tritonserver)."""
from __future__ import annotations

import socket

import pytest

from gapcheck.errors import EndpointError
from gapcheck.triton.client import TritonEndpoint
from gapcheck.triton.local_server import free_ports
from gapcheck.triton.probe import classify, probe_protocol
from tests.triton.test_hostile_endpoints import fake_server

H2_SETTINGS = b"\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x64"


@pytest.mark.parametrize(("first", "expected"), [(b"HTTP/1.1 200 OK\r\n", "http"), (H2_SETTINGS, "grpc"),
                                                 (b"SSH-2.0-OpenSSH", None), (b"", None), (b"\x00\x00", None)])
def test_classify(first, expected):
    assert classify(first) == expected


def test_a_server_that_closes_at_once_is_neither_and_the_endpoint_says_so():
    with fake_server(lambda conn: None) as port:
        assert probe_protocol("127.0.0.1", port, timeout_s=2) is None
        with pytest.raises(EndpointError, match="neither HTTP nor gRPC"):
            TritonEndpoint(f"127.0.0.1:{port}", retries=0).resolve()


def test_an_h2_server_is_grpc():
    def h2(conn: socket.socket) -> None:
        conn.sendall(H2_SETTINGS)
        conn.recv(1024)

    with fake_server(h2) as port:
        assert TritonEndpoint(f"127.0.0.1:{port}", retries=0).resolve().protocol == "grpc"


def test_nothing_listening_is_retried_then_an_endpoint_error():
    (port,) = free_ports(1)
    with pytest.raises(EndpointError, match="after 2 attempts"):
        TritonEndpoint(f"127.0.0.1:{port}", retries=1).resolve(backoff_s=0)

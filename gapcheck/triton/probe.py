"""Which protocol answers on a port: one fast request, no tritonclient.

Triton's gRPC port is an HTTP/2 server that sends its SETTINGS frame as soon as a client
connects, whatever the client says; its HTTP port answers an HTTP/1.1 request with a status
line. So: connect, send ``GET /v2/health/live HTTP/1.1``, read the first bytes. Over TLS the
ALPN result (``h2``) settles it before any byte is read. The whole probe runs under one deadline.
"""
from __future__ import annotations

import socket
import ssl as ssl_module
import time
from typing import Any

HTTP, GRPC = "http", "grpc"
_H2_SETTINGS = 0x04


def classify(first_bytes: bytes) -> str | None:
    """``http``, ``grpc`` or None from the first bytes a server sent."""
    if first_bytes.startswith(b"HTTP/"):
        return HTTP
    if len(first_bytes) >= 9 and first_bytes[3] == _H2_SETTINGS:
        return GRPC
    return None


def _tls_context(tls: Any) -> ssl_module.SSLContext:
    context = ssl_module.create_default_context(cafile=getattr(tls, "root_certificates", None))
    if getattr(tls, "insecure", False):
        context.check_hostname = False
        context.verify_mode = ssl_module.CERT_NONE
    chain, key = getattr(tls, "certificate_chain", None), getattr(tls, "private_key", None)
    if chain:
        context.load_cert_chain(chain, key)
    context.set_alpn_protocols(["h2", "http/1.1"])
    return context


def probe_protocol(host: str, port: int, *, timeout_s: float, ssl: bool = False, tls: Any = None) -> str | None:
    """The protocol serving ``host:port`` (None when neither answered). OSError when nothing listens."""
    deadline = time.monotonic() + timeout_s

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no answer within {timeout_s:g}s")
        return remaining

    raw = socket.create_connection((host.strip("[]"), port), timeout=left())
    sock: socket.socket = raw
    try:
        if ssl:
            sock = _tls_context(tls).wrap_socket(raw, server_hostname=host.strip("[]"))
            if sock.selected_alpn_protocol() == "h2":
                return GRPC
        data = b""
        try:
            sock.settimeout(left())
            sock.sendall(f"GET /v2/health/live HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode("ascii"))
            while len(data) < 9:
                sock.settimeout(left())
                chunk = sock.recv(64)
                if not chunk:
                    break
                data += chunk
                if classify(data):
                    break
        except (ConnectionResetError, BrokenPipeError):
            pass  # it listened, then hung up: whatever it sent so far decides
        return classify(data)
    finally:
        sock.close()


def speaks_tls(host: str, port: int, *, timeout_s: float) -> bool:
    """Whether ``host:port`` completes a TLS handshake (certificates not checked: this only names a mismatch)."""
    context = ssl_module.SSLContext(ssl_module.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl_module.CERT_NONE
    with socket.create_connection((host.strip("[]"), port), timeout=timeout_s) as raw:
        try:
            with context.wrap_socket(raw, server_hostname=host.strip("[]")):
                return True
        except (ssl_module.SSLError, ConnectionResetError, BrokenPipeError, TimeoutError):
            return False

"""A KServe-v2 HTTP fake on 127.0.0.1 whose every answer a test writes: ``respond(method, path, body)`` returns
``(status, body)`` or ``(status, body, headers)``. Health is always 200; the rest is the test's."""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.loopback import serving

Respond = Callable[[str, str, bytes], tuple[Any, ...]]


def as_body(value: Any) -> bytes:
    return value if isinstance(value, bytes) else json.dumps(value).encode()


@contextmanager
def kserve(respond: Respond) -> Iterator[str]:
    """Serve until the block ends; yields ``http://127.0.0.1:PORT``."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self, method: str) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
            if "/health/" in self.path or self.path.endswith("/ready"):
                status, payload, headers = 200, b"", {}
            else:
                status, payload, *rest = respond(method, self.path, body)
                headers = rest[0] if rest else {}
            payload = as_body(payload)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._answer("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._answer("POST")

        def log_message(self, *args: object) -> None:
            pass

    with serving(Handler) as url:
        yield url

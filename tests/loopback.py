"""A test's HTTP server on 127.0.0.1: one way to start, serve and stop it (nothing outside the machine is reached)."""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from typing import Any


@contextmanager
def serving(handler: Callable[..., Any]) -> Iterator[str]:
    """Serve ``handler`` (a request handler class, or a partial of one) on a free loopback port until the block
    ends; yields ``http://127.0.0.1:PORT``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

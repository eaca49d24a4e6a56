"""The HTTP client's answers are bounded: a compressed answer is refused before tritonclient inflates it whole
(a few kilobytes of gzip can inflate to gigabytes: tritonclient's _infer_result.py runs gzip.decompress unbounded)."""
from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import tritonclient.http as httpclient

from gapcheck.triton.bounded_http import BoundedHttpClient, ResponseTooLargeError

# 64 MiB of a JSON answer's padding, compressed to about 64 KiB: what a hostile endpoint would send
BOMB = gzip.compress(b'{"model_name": "m", "outputs": []' + b" " * (64 << 20) + b"}")


class _Gzipped(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(BOMB)))
        self.end_headers()
        self.wfile.write(BOMB)

    do_GET = do_POST = _answer  # noqa: N815 - http.server's naming

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def gzip_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Gzipped)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_compressed_answer_is_refused_before_it_is_inflated(gzip_server: str) -> None:
    assert len(BOMB) < 1 << 20  # under the size limit as sent: only its inflated size is the problem
    client = BoundedHttpClient(gzip_server, connection_timeout=5.0, network_timeout=5.0)
    try:
        tensor = httpclient.InferInput("x", [1, 2], "FP32")
        tensor.set_data_from_numpy(np.zeros((1, 2), dtype=np.float32), binary_data=True)
        with pytest.raises(ResponseTooLargeError, match="compressed .*gzip.* never asks for"):
            client.infer("m", [tensor])
        with pytest.raises(ResponseTooLargeError, match="compressed"):
            client.get_model_metadata("m")
    finally:
        client.close()

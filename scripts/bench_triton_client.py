#!/usr/bin/env python
"""What the hardened Triton client costs and buys, side by side in one run (no timing assertions anywhere).

    .venv/bin/python scripts/bench_triton_client.py [--requests 200]

Starts the bundled tritonserver on 127.0.0.1 with one tiny Python-backend model, then measures:

1. per-request overhead of gapcheck's TritonConnection (total deadline, retries, redaction) against raw
   tritonclient, for metadata and inference, HTTP and gRPC (median of N; ratio ours/raw);
2. the protocol probe a bare host:port costs (median);
3. a slow-loris HTTP endpoint (big Content-Length, one byte every 0.5 s): time until each client gives up
   with a 2 s timeout; raw tritonclient's timeout is per socket read, so it is stopped at --loris-cap seconds.
"""
from __future__ import annotations

import argparse
import contextlib
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402

from gapcheck.errors import EndpointError  # noqa: E402
from gapcheck.triton.client import TritonEndpoint  # noqa: E402
from gapcheck.triton.local_server import LocalTritonServer  # noqa: E402
from tests.triton.conftest import make_tiny_onnx, python_config, write_python_model  # noqa: E402


def median_ms(fn, n: int) -> float:
    fn()  # warm
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def raw_infer(client, module, x: np.ndarray):
    tensor = module.InferInput("x", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return client.infer("tiny", [tensor], outputs=[module.InferRequestedOutput("y")]).as_numpy("y")


def side_by_side(server: LocalTritonServer, protocol: str, module, x: np.ndarray, n: int) -> None:
    raw = module.InferenceServerClient(server.url(protocol))
    ours = TritonEndpoint(f"{protocol}://{server.url(protocol)}", timeout_s=10).connect()
    for name, raw_fn, our_fn in (
        ("metadata", lambda: raw.get_model_metadata("tiny"), lambda: ours.model_metadata("tiny")),
        ("infer", lambda: raw_infer(raw, module, x), lambda: ours.infer("tiny", {"x": x}, ["y"])),
    ):
        raw_ms, our_ms = median_ms(raw_fn, n), median_ms(our_fn, n)
        print(f"{protocol:8} {name:10} {raw_ms:8.3f} {our_ms:12.3f} {our_ms / raw_ms:6.2f}")
    raw.close()
    ours.close()


def overhead(server: LocalTritonServer, n: int) -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    print(f"{'protocol':8} {'request':10} {'raw ms':>8} {'gapcheck ms':>12} {'ratio':>6}")
    for protocol, module in (("http", httpclient), ("grpc", grpcclient)):
        side_by_side(server, protocol, module, x, n)
    for protocol in ("http", "grpc"):
        probe_ms = median_ms(lambda p=protocol: TritonEndpoint(server.url(p)).resolve(), max(5, n // 10))
        print(f"probe of a bare host:port answering {protocol}: {probe_ms:.2f} ms (median)")


def slow_loris_server() -> tuple[int, threading.Event]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    stop = threading.Event()

    def handle(conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
            while not stop.is_set():
                time.sleep(0.5)
                conn.sendall(b" ")
        except OSError:
            pass
        finally:
            conn.close()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            threading.Thread(target=handle, args=(conn,), daemon=True).start()
        listener.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1], stop


def slow_loris(cap_s: float) -> None:
    port, stop = slow_loris_server()
    try:
        start = time.monotonic()
        with contextlib.suppress(EndpointError):
            TritonEndpoint(f"http://127.0.0.1:{port}", timeout_s=2, retries=0).connect().server_metadata()
        ours = time.monotonic() - start
        raw = httpclient.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=2, connection_timeout=2)
        start = time.monotonic()
        outcome = "gave up"
        import gevent

        try:
            with gevent.Timeout(cap_s):
                raw.get_server_metadata()
        except gevent.Timeout:
            outcome = f"still waiting, stopped at the {cap_s:g} s cap"
        except Exception:  # noqa: BLE001 - any failure ends the raw client's wait
            pass
        raw_s = time.monotonic() - start
        print(f"slow-loris, timeout 2 s: gapcheck gave up after {ours:.2f} s; raw tritonclient {outcome} "
              f"({raw_s:.1f} s); ratio {ours / raw_s:.3f}")
    finally:
        stop.set()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--loris-cap", type=float, default=20.0)
    args = parser.parse_args()
    repo = Path(tempfile.mkdtemp(prefix="bench-triton-"))
    write_python_model(repo, "tiny", python_config("tiny"), {1: make_tiny_onnx()})
    with LocalTritonServer(repo) as server:
        overhead(server, args.requests)
    slow_loris(args.loris_cap)
    return 0


if __name__ == "__main__":
    sys.exit(main())

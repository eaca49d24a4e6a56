"""Benchmark: what each part of one endpoint's nightly check costs, against the bare tritonclient loop.

    .venv/bin/python scripts/bench_nightly_parts.py [--samples 1000] [--rounds 40] [--in-flight 4] [--batch 16]

Same set-up as ``scripts/bench_nightly.py`` (a golden bundle of a small CNN, 1x3x32x32, served by a local
tritonserver), then, interleaved in random order each round, one endpoint's check on a bundle already verified and
in memory (no lock, history or report: :func:`gapcheck.nightly.probe.check_endpoint`) with parts of it taken away:

- ``check_endpoint``: as a night runs it (readiness, deployment audit beside the requests, inference, comparison);
- ``without the audit``: ``audit=False``;
- ``... and without the comparison``: every answer dropped instead of compared;
- ``... with the bare loop's sends``: each request sent as the bare loop sends it (a raw tritonclient call on a
  client per thread: no deadline, retries, redaction or answer checks), answers still compared;
- ``readiness and the pool only``: both taken away: what is left is readiness (the model's ready, metadata and
  config calls) and the pool that sends the batches.

The last row is what no checker can leave out (it must learn the outputs and the batch size it may send); its ratio
to the bare loop bounds what any night can reach on this machine. Prints the median and the first quartile of each
row and the ratio of the medians to the bare loop.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_nightly import INPUT, bare_loop, served_bundle  # noqa: E402

from gapcheck.nightly import probe  # noqa: E402
from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option  # noqa: E402
from gapcheck.triton.local_server import LocalTritonServer  # noqa: E402


def _raw_send(outputs: list[str]) -> Callable[..., dict[str, np.ndarray]]:
    """A replacement for ``_Inference.send``: the bare loop's own request, on a tritonclient client per thread."""
    import tritonclient.grpc as grpcclient

    clients: dict[int, grpcclient.InferenceServerClient] = {}

    def send(self: probe._Inference, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        client = clients.get(threading.get_ident())
        if client is None:
            client = clients[threading.get_ident()] = grpcclient.InferenceServerClient(self.endpoint.address.address)
        tensors = []
        for name, array in feeds.items():
            array = np.ascontiguousarray(array)
            tensor = grpcclient.InferInput(name, list(array.shape), "FP32")
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        result = client.infer(self.spec.model, tensors, outputs=[grpcclient.InferRequestedOutput(o) for o in outputs],
                              client_timeout=30.0)
        return {o: result.as_numpy(o) for o in outputs}
    return send


def _without(check: Callable[[], object], **parts: Callable[..., object]) -> Callable[[], object]:
    """``check()`` with methods of probe's classes replaced for its duration (``Class__method=replacement``)."""
    def run() -> object:
        saved = []
        for key, replacement in parts.items():
            owner, method = key.split("__")
            cls = getattr(probe, owner)
            saved.append((cls, method, getattr(cls, method)))
            setattr(cls, method, replacement)
        try:
            return check()
        finally:
            for cls, method, original in saved:
                setattr(cls, method, original)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    work, bundle = served_bundle("bench-nightly-parts-", args.samples, args.batch)
    outputs = [o.name for o in bundle.output_infos]
    with LocalTritonServer(work / "repo", workdir=work / "server") as server:
        spec = endpoint_spec(parse_endpoint_option(f"bench=grpc://{server.grpc_url}/cnn"))

        def check(audit: bool = True) -> Callable[[], object]:
            return lambda: probe.check_endpoint(spec, bundle, max_in_flight=args.in_flight, audit=audit)

        def dropped(self: probe._Accumulator, *_: object) -> None:
            return None

        rows: dict[str, Callable[[], object]] = {
            "bare tritonclient loop (inputs in memory)": lambda: bare_loop(
                server.grpc_url, "cnn", bundle.inputs["x"], outputs, args.batch, args.in_flight),
            "check_endpoint (readiness, audit beside, inference, comparison)": check(),
            "without the audit": check(False),
            "without the audit and the comparison": _without(check(False), _Accumulator__add=dropped),
            "without the audit, with the bare loop's sends": _without(check(False), _Inference__send=_raw_send(outputs)),
            "readiness and the pool only (bare sends, no audit, no comparison)": _without(
                check(False), _Inference__send=_raw_send(outputs), _Accumulator__add=dropped),
        }
        for _ in range(5):  # warm-up: imports, connections, the server's first runs
            for run in rows.values():
                run()
        times: dict[str, list[float]] = {label: [] for label in rows}
        load_before = os.getloadavg()[0]
        for _ in range(args.rounds):
            order = list(rows.items())
            random.shuffle(order)  # no row always runs right after another
            for label, run in order:
                tick = time.perf_counter()
                run()
                times[label].append(time.perf_counter() - tick)
    bare = statistics.median(times["bare tritonclient loop (inputs in memory)"])
    print(f"\n{args.samples} samples of {INPUT}, batch {args.batch}, {args.in_flight} in flight, {args.rounds} rounds in "
          f"random order, load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after:")
    print("| path | median (ms) | first quartile (ms) | ratio to the bare loop (medians) |\n|---|---:|---:|---:|")
    for label, values in times.items():
        print(f"| {label} | {statistics.median(values) * 1e3:.1f} | {statistics.quantiles(values, n=4)[0] * 1e3:.1f} | "
              f"{bare / statistics.median(values):.2f} |")


if __name__ == "__main__":
    main()

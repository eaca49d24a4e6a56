"""Benchmark: a night of several endpoints, one after the other against ``--parallel-endpoints``.

    .venv/bin/python scripts/bench_nightly_endpoints.py [--endpoints 4] [--samples 1000] [--rounds 5]

The set-up of ``scripts/bench_nightly.py`` (a golden bundle of a small CNN, 1x3x32x32), with the bundle's export
served under ``--endpoints`` model names by one local tritonserver (one model instance each). Interleaved round by
round, :func:`gapcheck.nightly.run_nightly` checks every endpoint with ``parallel_endpoints`` 1 (the default) and
with one per endpoint; prints each night's seconds, the best and the median, and the speed-up.

Here the server shares two cores with the client, so the checks compete for the same CPU: this measures what
running them together costs or saves on one machine. Endpoints on servers of their own (the usual deployment) are
bounded by their own round trips instead, which overlap.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_nightly import INPUT, served_bundle  # noqa: E402

from gapcheck.nightly import NightlyRequest, run_nightly  # noqa: E402
from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option  # noqa: E402
from gapcheck.nightly.history import wait_for_closes  # noqa: E402
from gapcheck.triton.local_server import LocalTritonServer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", type=int, default=4)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    names = [f"cnn{i}" for i in range(args.endpoints)]
    work, _ = served_bundle("bench-nightly-endpoints-", args.samples, args.batch, tuple(names))
    times: dict[int, list[float]] = {1: [], args.endpoints: []}
    with LocalTritonServer(work / "repo", workdir=work / "server") as server:
        specs = tuple(endpoint_spec(parse_endpoint_option(f"{n}=grpc://{server.grpc_url}/{n}")) for n in names)

        def night(parallel: int) -> float:
            tick = time.perf_counter()
            result = run_nightly(NightlyRequest(golden=work / "golden", endpoints=specs, history=work / "h.sqlite",
                                                parallel_endpoints=parallel))
            seconds = time.perf_counter() - tick
            wait_for_closes()
            assert all(e.status.value == "pass" for e in result.endpoints), result.headline
            return seconds

        for parallel in times:  # warm-up: imports, connections, the first night's hashes
            night(parallel)
        load_before = os.getloadavg()[0]
        for round_ in range(args.rounds):
            order = list(times) if round_ % 2 == 0 else list(times)[::-1]
            for parallel in order:
                times[parallel].append(night(parallel))
    print(f"\n{args.endpoints} endpoints (one server, two cores shared with the client), {args.samples} samples of "
          f"{INPUT} each, {args.rounds} interleaved rounds, load average {load_before:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after:")
    print("| parallel_endpoints | night, best (s) | night, median (s) |\n|---|---:|---:|")
    for parallel, values in times.items():
        print(f"| {parallel} | {min(values):.3f} | {statistics.median(values):.3f} |")
    one, many = statistics.median(times[1]), statistics.median(times[args.endpoints])
    print(f"speed-up with {args.endpoints} at once: {one / many:.2f}x (medians)")


if __name__ == "__main__":
    main()

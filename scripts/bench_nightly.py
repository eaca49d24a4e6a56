"""Benchmark: gapcheck nightly against a bare tritonclient loop, same server, same batches, same concurrency.

    .venv/bin/python scripts/bench_nightly.py [--samples 1000] [--rounds 3] [--in-flight 4] [--batch 16]

A golden bundle of ``--samples`` inputs of a small CNN (sample_models.cnn:build_small_resnet,
1x3x32x32) is recorded, a local tritonserver serves the bundle's ONNX export (Python backend running
ONNX Runtime; the bundled server has no onnxruntime backend), and, interleaved round by round:

- ``nightly``: :func:`gapcheck.nightly.run_nightly` end to end (bundle verification, readiness,
  deployment audit, inference, per-sample comparison, history transaction, status);
- ``bare``: a ``tritonclient.grpc`` loop sending the same batches with the same number of requests in
  flight (one client per thread) and keeping the answers, nothing else; its inputs are already in memory;
- ``bare, reading the samples``: the same loop, timed from reading the bundle's ``inputs.safetensors``
  (``safetensors.numpy.load_file``, no hash): what a bare client that has to read the same sample files
  costs. The target is judged against ``bare``; the ratio to this one is printed beside it.

The nightly rows take the bundle's verification stamp (the default where it is safe: :mod:`gapcheck.golden.stamps`)
as a cron's nights after the first do (the warm-up night, once the bundle is a minute old, verified every file and
stamped them); one more row runs each round's night with the stamps off (``GAPCHECK_VERIFY_STAMPS=0``: every file
and sample hashed, as on the first night after a record, or where stamps are not safe).

A third nightly row leaves out only the opening of the bundle before any endpoint work (the manifest check,
opening and sizing the files; ``run_nightly`` reads, parses and hashes them on a thread beside the first
endpoint's readiness and requests): lock, readiness, audit, inference, comparison, history and status stay in.
Two more rows time one endpoint's check with the bundle verification (no lock, history or status): one after
the other (``load_bundle`` then ``check_endpoint``, what ``run_nightly`` does) and pipelined
(``open_bundle`` then ``check_endpoint`` on the pending bundle: readiness and the first requests run while
the SHA256 of the files does; nothing is compared before it is done).

``run_nightly`` returns once the night is committed; the history's closing WAL checkpoint runs on a thread
behind it (the interpreter waits for it at exit). One more row times the night until that close is done too.

Prints samples/s per round, the best of each, and the ratio nightly/bare (target >= 0.9), and the CPU time this
process spent per night and per bare loop (the server runs on the same machine: every CPU millisecond gapcheck adds
is one the server does not get). Also times ``golden record`` twice into one export cache folder: cold (exports)
and warm (the export comes from the cache).

``--against REF`` (a git ref; repeatable) adds a row for ``run_nightly`` as that commit has it, interleaved in the
same rounds: its ``gapcheck`` package (``git archive``) runs in a child process, on the same bundle and server, timed
inside the child like the row above is here (old and new side by side, under the same load). ``--against .`` is the
working tree in a child process of its own: ``--against OLD --against .`` compares the two in identical conditions.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gapcheck.golden import GoldenBundle, RecordRequest, load_bundle, record_bundle  # noqa: E402
from gapcheck.golden.bundle import open_bundle  # noqa: E402
from gapcheck.nightly import NightlyRequest, run_nightly  # noqa: E402
from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option  # noqa: E402
from gapcheck.nightly.history import wait_for_closes  # noqa: E402
from gapcheck.nightly.probe import check_endpoint  # noqa: E402
from gapcheck.triton.local_server import LocalTritonServer  # noqa: E402
from tests.nightly.conftest import model_config, write_model  # noqa: E402

FACTORY = "sample_models.cnn:build_small_resnet"
INPUT = "x:1x3x32x32:float32"


def bare_loop(url: str, model: str, inputs: np.ndarray | Path, outputs: list[str], batch: int, in_flight: int,
              floor: bool = False) -> float:
    """Seconds to send every sample and keep the answers; ``inputs`` a file: read (no hash) inside the timing.

    ``floor``: also what any checker must do before its first request and no bare loop does: ask the model's
    metadata and config (it has to know the outputs and the batch size it may send), on a client the first sending
    thread then reuses, while the file is read beside."""
    import tritonclient.grpc as grpcclient

    start = time.perf_counter()
    spare: list[object] = []
    if isinstance(inputs, Path):
        from safetensors.numpy import load_file

        reading = ThreadPoolExecutor(max_workers=1).submit(load_file, str(inputs))
        if floor:
            spare.append(grpcclient.InferenceServerClient(url))
            spare[0].get_model_metadata(model)  # type: ignore[attr-defined]
            spare[0].get_model_config(model)  # type: ignore[attr-defined]
        inputs = reading.result()["x"]
    spans = [(s, min(s + batch, len(inputs))) for s in range(0, len(inputs), batch)]
    clients: dict[int, object] = {}

    def send(span: tuple[int, int]) -> dict[str, np.ndarray]:
        import threading

        client = clients.get(threading.get_ident())
        if client is None:  # one client per thread, made once (setdefault's argument would make one per request)
            taken = spare.pop() if spare else None  # list.pop is atomic
            client = clients[threading.get_ident()] = taken or grpcclient.InferenceServerClient(url)
        array = np.ascontiguousarray(inputs[span[0]:span[1]])
        tensor = grpcclient.InferInput("x", list(array.shape), "FP32")
        tensor.set_data_from_numpy(array)
        result = client.infer(model, [tensor], outputs=[grpcclient.InferRequestedOutput(o) for o in outputs],
                              client_timeout=30.0)
        return {o: result.as_numpy(o) for o in outputs}

    with ThreadPoolExecutor(max_workers=in_flight) as pool:
        answers = list(pool.map(send, spans))
    seconds = time.perf_counter() - start
    assert sum(len(a[outputs[0]]) for a in answers) == len(inputs)
    for client in clients.values():
        client.close()
    return seconds


_AGAINST_CHILD = """
import json, sys, time
from pathlib import Path
from gapcheck.nightly import NightlyRequest, run_nightly
from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option
try:
    from gapcheck.nightly.history import wait_for_closes
except ImportError:  # before the history closed behind the night
    def wait_for_closes(): pass
url, golden, history, in_flight = sys.argv[1:5]
spec = endpoint_spec(parse_endpoint_option(f"bench={url}"))
for _ in sys.stdin:
    cpu, tick = time.process_time(), time.perf_counter()
    result = run_nightly(NightlyRequest(golden=Path(golden), endpoints=(spec,), history=Path(history),
                                        max_in_flight=int(in_flight)))
    seconds, cpu = time.perf_counter() - tick, time.process_time() - cpu
    wait_for_closes()
    print(json.dumps({"seconds": seconds, "cpu": cpu, "status": result.endpoints[0].status.value}), flush=True)
"""


class Against:
    """``run_nightly`` of another commit, in a child process that runs one night per line it is sent."""

    def __init__(self, ref: str, work: Path, url: str, golden: Path, in_flight: int) -> None:
        self.ref = ref
        code = ROOT if ref == "." else work / f"against-{ref.replace('/', '_')}"
        if ref != ".":
            code.mkdir()
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "gapcheck"], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(code)], input=archive, check=True)
        env = {**os.environ, "PYTHONPATH": str(code)}
        history = work / f"h-against-{len(list(work.glob('h-against-*')))}.sqlite"
        self.child = subprocess.Popen([sys.executable, "-c", _AGAINST_CHILD, url, str(golden), str(history),
                                       str(in_flight)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=code)
        self.night()  # warm-up: imports, first connection

    def night(self) -> tuple[float, float]:
        """Seconds and CPU seconds of one night, timed inside the child."""
        assert self.child.stdin is not None and self.child.stdout is not None
        self.child.stdin.write("go\n")
        self.child.stdin.flush()
        answer = json.loads(self.child.stdout.readline())
        assert answer["status"] == "pass", answer
        return answer["seconds"], answer["cpu"]

    def close(self) -> None:
        assert self.child.stdin is not None
        self.child.stdin.close()
        self.child.wait(timeout=60)


def _against_night(against: Against, cpu: dict[str, list[float]]) -> float:
    seconds, used = against.night()
    cpu[f"{against.ref} (own process)"].append(used)
    return seconds


def _hashing_night(work: Path, spec, in_flight: int) -> float:
    """One night with the verification stamps off: every file and sample hashed, as on the first night."""
    previous = os.environ.get("GAPCHECK_VERIFY_STAMPS")
    os.environ["GAPCHECK_VERIFY_STAMPS"] = "0"
    try:
        tick = time.perf_counter()
        run_nightly(NightlyRequest(golden=work / "golden", endpoints=(spec,), history=work / "full.sqlite",
                                   max_in_flight=in_flight))
        seconds = time.perf_counter() - tick
    finally:
        if previous is None:
            os.environ.pop("GAPCHECK_VERIFY_STAMPS")
        else:
            os.environ["GAPCHECK_VERIFY_STAMPS"] = previous
    wait_for_closes()
    return seconds


def endpoint_with_verification(golden: Path, spec, in_flight: int, pipelined_first: bool) -> tuple[float, float]:
    """Seconds of verify-then-check and of the pipelined check (open_bundle), in the order given."""
    def sequential() -> float:
        tick = time.perf_counter()
        outcome = check_endpoint(spec, load_bundle(golden), max_in_flight=in_flight)
        assert outcome.reachable and not outcome.gap, outcome.error
        return time.perf_counter() - tick

    def pipelined() -> float:
        tick = time.perf_counter()
        outcome = check_endpoint(spec, open_bundle(golden), max_in_flight=in_flight)
        assert outcome.reachable and not outcome.gap, outcome.error
        return time.perf_counter() - tick

    if pipelined_first:
        p = pipelined()
        return sequential(), p
    s = sequential()
    return s, pipelined()


def served_bundle(prefix: str, samples: int, batch: int, models: tuple[str, ...] = ("cnn",)) -> tuple[Path, GoldenBundle]:
    """A work folder (the export cache, and the stamps beside it, inside it: never the user's) holding a golden bundle of
    ``samples`` inputs (``golden/``) and a model repository (``repo/``) serving its export as each of ``models``."""
    import onnx

    work = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ["GAPCHECK_CACHE_DIR"] = str(work / "export-cache")
    record_bundle(RecordRequest(out=work / "golden", factory=FACTORY, input_specs=(INPUT,), num_samples=samples,
                                exporter="dynamo", cache_dir=work / "export-cache"))
    bundle = load_bundle(work / "golden")
    graph = onnx.load(str(bundle.onnx_path))
    for name in models:
        write_model(work / "repo", name, graph)
        (work / "repo" / name / "config.pbtxt").write_text(model_config(name, graph, max_batch_size=batch))
    return work, bundle


def pin_apart(server_pid: int | None) -> None:
    """The server (and its backend stubs, every thread) on CPU 0; this process (every thread) on the rest."""
    import os

    import psutil

    cpus = sorted(os.sched_getaffinity(0))
    if server_pid is None or len(cpus) < 2:
        raise SystemExit("--pin needs a running server and at least 2 CPUs")
    server = psutil.Process(server_pid)
    for process in (server, *server.children(recursive=True)):
        for thread in process.threads():
            os.sched_setaffinity(thread.id, {cpus[0]})
    for thread in psutil.Process().threads():
        os.sched_setaffinity(thread.id, set(cpus[1:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--exporter", default="dynamo", choices=("dynamo", "torchscript"))
    parser.add_argument("--pin", action="store_true",
                        help="server on CPU 0, this process on the others, as if the endpoint ran on its own machine")
    parser.add_argument("--input", default=INPUT, help="the input spec (a larger image makes each sample cost more)")
    parser.add_argument("--against", metavar="REF", action="append", default=[],
                        help="also time run_nightly as git ref REF has it, in a child process ('.': the working tree)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-nightly-"))
    # the nights' verification stamps (gapcheck.golden.stamps) live beside this export cache, not the user's
    os.environ["GAPCHECK_CACHE_DIR"] = str(work / "export-cache")
    records = {}
    for label, out in (("cold", work / "golden"), ("warm", work / "golden-again")):  # same model, same cache folder
        tick = time.perf_counter()
        outcome = record_bundle(RecordRequest(out=out, factory=FACTORY, input_specs=(args.input,), num_samples=args.samples,
                                              exporter=args.exporter, cache_dir=work / "export-cache"))
        records[label] = (time.perf_counter() - tick, outcome.seconds["export"], outcome.manifest["model"]["export_cached"])
    bundle = load_bundle(work / "golden")
    import onnx

    graph = onnx.load(str(bundle.onnx_path))
    write_model(work / "repo", "cnn", graph)
    (work / "repo" / "cnn" / "config.pbtxt").write_text(model_config("cnn", graph, max_batch_size=args.batch))
    outputs = [o.name for o in bundle.output_infos]
    rows = []
    fixed: list[dict[str, float]] = []
    with LocalTritonServer(work / "repo", workdir=work / "server") as server:
        if args.pin:
            pin_apart(server.pid)
        spec = endpoint_spec(parse_endpoint_option(f"bench=grpc://{server.grpc_url}/cnn"))
        # a stamp is kept only for files older than 60 s (gapcheck.golden.stamps.RACY_NS): a cron's bundle is
        wait_s = 61 - (time.time() - (work / "golden" / "inputs.safetensors").stat().st_ctime)
        time.sleep(max(0.0, wait_s))
        run_nightly(NightlyRequest(golden=work / "golden", endpoints=(spec,), history=work / "warmup.sqlite"))
        bare_loop(server.grpc_url, "cnn", bundle.inputs["x"], outputs, args.batch, args.in_flight)  # warm-up
        against = [Against(ref, work, f"grpc://{server.grpc_url}/cnn", work / "golden", args.in_flight)
                   for ref in args.against]
        cpu: dict[str, list[float]] = {"bare": [], "nightly": [], **{f"{a.ref} (own process)": [] for a in against}}
        load_before = os.getloadavg()[0]
        for round_ in range(1, args.rounds + 1):
            # The order alternates, so a load spike from other jobs does not always hit the same path.
            against_s = [float("nan")] * len(against)
            if round_ % 2 == 0:
                against_s = [_against_night(a, cpu) for a in against]
            if round_ % 2 == 0:
                tock = time.process_time()
                bare_s = bare_loop(server.grpc_url, "cnn", bundle.inputs["x"], outputs, args.batch, args.in_flight)
                cpu["bare"].append(time.process_time() - tock)
                read_s = bare_loop(server.grpc_url, "cnn", work / "golden" / "inputs.safetensors", outputs, args.batch,
                                   args.in_flight)
                floor_s = bare_loop(server.grpc_url, "cnn", work / "golden" / "inputs.safetensors", outputs,
                                    args.batch, args.in_flight, floor=True)
            tick, tock = time.perf_counter(), time.process_time()
            result = run_nightly(NightlyRequest(golden=work / "golden", endpoints=(spec,), history=work / "h.sqlite",
                                                max_in_flight=args.in_flight))
            nightly_s = time.perf_counter() - tick
            cpu["nightly"].append(time.process_time() - tock)
            wait_for_closes()  # the history's WAL checkpoint runs behind run_nightly: timed apart, never overlapped
            closed_s = time.perf_counter() - tick
            full_s = _hashing_night(work, spec, args.in_flight)
            assert result.endpoints[0].status.value == "pass", result.headline
            if result.golden["verified_by"] != "stamp":
                print(f"round {round_}: the night hashed every file (no stamp: see gapcheck.golden.stamps, e.g. a "
                      f"temporary folder on tmpfs)")
            phase_s = result.endpoints[0].outcome.seconds["inference"]
            if round_ % 2 == 1:
                floor_s = bare_loop(server.grpc_url, "cnn", work / "golden" / "inputs.safetensors", outputs,
                                    args.batch, args.in_flight, floor=True)
                read_s = bare_loop(server.grpc_url, "cnn", work / "golden" / "inputs.safetensors", outputs, args.batch,
                                   args.in_flight)
                tock = time.process_time()
                bare_s = bare_loop(server.grpc_url, "cnn", bundle.inputs["x"], outputs, args.batch, args.in_flight)
                cpu["bare"].append(time.process_time() - tock)
                against_s = [_against_night(a, cpu) for a in reversed(against)][::-1]
            # The bare loop's inputs are already in memory; this row leaves out the one step that puts the
            # bundle's there before any endpoint work (the manifest check and the file reads; the SHA256 of the
            # files runs beside the first endpoint's readiness and requests), and keeps everything else.
            opened_s = result.seconds.get("open_golden", result.seconds["verify_golden"])
            served_s = nightly_s - opened_s
            sequential_s, pipelined_s = endpoint_with_verification(work / "golden", spec, args.in_flight,
                                                                   pipelined_first=round_ % 2 == 0)
            rows.append((nightly_s, phase_s, bare_s, served_s, sequential_s, pipelined_s, closed_s, read_s, full_s,
                         floor_s, *against_s))
            ep = result.endpoints[0].outcome.seconds
            fixed.append({"open bundle (manifest, files opened and sized; reads, parse, hashes beside the endpoint)":
                          opened_s,
                          "readiness": ep.get("readiness", 0.0),
                          "inference + comparison": phase_s,
                          "after inference (audit wait, history, status)": ep["total"] - ep.get("readiness", 0.0) - phase_s,
                          "outside the endpoint (lock, history open/close, report)": nightly_s - ep["total"]
                          - opened_s})
            print(f"round {round_}: bare {args.samples / bare_s:7.0f}/s   nightly inference+compare "
                  f"{args.samples / phase_s:7.0f}/s ({bare_s / phase_s:.2f}x)   nightly end to end "
                  f"{args.samples / nightly_s:7.0f}/s ({bare_s / nightly_s:.2f}x)   without opening the bundle "
                  f"({bare_s / served_s:.2f}x)   endpoint + verification: one after the other "
                  f"({bare_s / sequential_s:.2f}x), pipelined ({bare_s / pipelined_s:.2f}x)"
                  + "".join(f"   {a.ref} end to end ({bare_s / t:.2f}x)" for a, t in zip(against, against_s, strict=True)))
        for a in against:
            a.close()
    print(f"\n{args.samples} samples of {args.input}, batch {args.batch}, {args.in_flight} in flight, "
          f"{args.rounds} interleaved rounds, load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after:")
    print("| path | samples/s (best) | samples/s (median) | ratio to bare (median of the rounds' ratios) | "
          "ratio to bare (best times) |\n|---|---|---|---|---|")
    bare = [r[2] for r in rows]
    for label, index in (("bare tritonclient loop (same batches, same concurrency)", 2),
                         ("bare loop reading the same sample files first (inputs.safetensors, no hash)", 7),
                         ("nightly: inference + per-sample comparison", 1),
                         ("nightly without opening the bundle (lock, readiness, audit, inference, comparison, "
                          "history, status; the hashes run beside the endpoint)", 3),
                         ("nightly end to end (the default: a cron's nights after the first take the verification stamp; "
                          "open bundle, lock, readiness, audit, inference, comparison, history, status)", 0),
                         ("nightly end to end until its history is closed (the WAL checkpoint, which runs behind "
                          "run_nightly, waited for)", 6),
                         ("one endpoint: verify bundle, then readiness, audit, inference, comparison", 4),
                         ("one endpoint: verification pipelined with readiness and the first requests", 5),
                         ("nightly end to end, every file hashed (GAPCHECK_VERIFY_STAMPS=0; the first night after a "
                          "record, or where a stamp is not safe)", 8),
                         ("floor for any checker: the bare loop reading the sample files (no hash) beside asking the "
                          "model's metadata and config", 9),
                         *[(f"nightly end to end as {a.ref} has it (same rounds, its own process)", 10 + i)
                           for i, a in enumerate(against)]):
        times = [r[index] for r in rows]
        paired = statistics.median(r[2] / r[index] for r in rows)  # each round's two runs saw the same load
        print(f"| {label} | {args.samples / min(times):.0f} | {args.samples / statistics.median(times):.0f} | "
              f"{paired:.2f} | {min(bare) / min(times):.2f} |")
    print(f"\nnightly end to end against the bare loop reading the same sample files: "
          f"{statistics.median(r[7] / r[0] for r in rows):.2f} (median of the rounds' ratios; the target is judged "
          f"against the bare loop with its inputs in memory)")
    print(f"nightly end to end against that floor: {statistics.median(r[9] / r[0] for r in rows):.2f}; the floor "
          f"against the bare loop: {statistics.median(r[2] / r[9] for r in rows):.2f} (medians of the rounds' ratios)")
    print("\nCPU time of this process (median ms; the server's is not counted): "
          + ", ".join(f"{name} {statistics.median(values) * 1e3:.1f}" for name, values in cpu.items() if values))
    print("\nwhere a night's time goes (median seconds over the rounds):")
    for key in fixed[0]:
        print(f"  {key:58s} {statistics.median(f[key] for f in fixed):.3f}")
    print(f"\ngolden record, {args.samples} samples, {args.exporter} exporter:")
    print("| export cache | record total (s) | of which export (s) | export from cache |\n|---|---|---|---|")
    for label, (total, export, cached) in records.items():
        print(f"| {label} | {total:.2f} | {export:.2f} | {cached} |")
    cold, warm = records["cold"], records["warm"]
    print(f"warm/cold: record {cold[0] / warm[0]:.2f}x faster, export {cold[1] / max(warm[1], 1e-9):.0f}x faster")


if __name__ == "__main__":
    main()

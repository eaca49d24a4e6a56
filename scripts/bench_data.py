"""Benchmark the data checks (issues #10, #22): leakage on generated images, the exact near-duplicate search
(multi-index vs brute force vs faiss-cpu, same codes), drift on a table, and drift on wide tables side by side with
Evidently's DataDriftPreset. Sizes are flags (defaults fit a shared 2-core box); faiss and Evidently run from their
own virtual environments so they never change gapcheck's packages.

    .venv/bin/python scripts/bench_data.py --images 20000 --rows 1000000 --features 50
    .venv/bin/python scripts/bench_data.py --only search --references 10000000 --queries 1000000 --radius 8 \
        --faiss-python /tmp/venv-faiss/bin/python
    .venv/bin/python scripts/bench_data.py --only wide --wide 3000000 1000 --wide 300000 300 \
        --evidently-python /tmp/venv-evidently/bin/python
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np


def make_images(folder: Path, count: int, seed: int) -> None:
    """``count`` distinct 64×64 PNGs (random low-frequency patterns + noise, so perceptual hashes differ)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        coarse = Image.fromarray(rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)).resize((64, 64), Image.BICUBIC)
        img = np.clip(np.asarray(coarse, np.float32) + rng.normal(0, 12, (64, 64, 3)), 0, 255)
        Image.fromarray(img.astype(np.uint8)).save(folder / f"{i:06d}.png", compress_level=1)


def bench_leakage(images: int, workers: int) -> dict[str, float]:
    from gapcheck.data.api import leakage
    from gapcheck.engines import open_engine

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_images(root / "train", images * 4 // 5, 1)
        make_images(root / "val", images // 5, 2)
        for i in range(0, images // 5, 50):  # plant one copy per 50 validation images
            (root / "val" / f"copy{i:06d}.png").write_bytes((root / "train" / f"{i:06d}.png").read_bytes())
        with open_engine("local", workers=workers) as engine:
            started = time.perf_counter()
            result = leakage([f"train={root / 'train'}", f"val={root / 'val'}"], engine=engine)
            wall = time.perf_counter() - started
    return {"images": images, "wall_s": wall, "images_per_s": images / wall, "job_s": result.timings["job_s"],
            "plan_s": result.timings["plan_s"], "checks_s": result.timings["checks_s"],
            "exact": len(result.exact), "near": len(result.near)}


def planted_codes(references: int, queries: int, radius: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random 64-bit codes; half the queries are references with up to ``radius`` + 2 bits flipped."""
    rng = np.random.default_rng(seed)
    reference = rng.integers(0, 2**64 - 1, references, dtype=np.uint64, endpoint=True)
    query = rng.integers(0, 2**64 - 1, queries, dtype=np.uint64, endpoint=True)
    half = queries // 2
    flips = np.zeros(half, np.uint64)
    for bit in range(64):  # each bit flipped with probability (radius + 2) / 128: about half within the radius
        flips |= (rng.random(half) < (radius + 2) / 128).astype(np.uint64) << np.uint64(bit)
    query[:half] = reference[rng.integers(0, references, half)] ^ flips
    return query, reference


FAISS_SCRIPT = """
import json, sys, time, numpy as np, faiss
reference, query, radius, threads = np.load(sys.argv[1]), np.load(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
parts = int(sys.argv[5])  # gapcheck's substring count; faiss takes equal widths of 64 // parts bits
faiss.omp_set_num_threads(threads)
codes = lambda x: np.ascontiguousarray(x).view(np.uint8).reshape(-1, 8)
bits = 64 // parts  # exact: within the radius, one of the parts differs in at most radius // parts bits
t = time.perf_counter(); index = faiss.IndexBinaryMultiHash(64, parts, bits); index.nflip = radius // parts
index.add(codes(reference)); build = time.perf_counter() - t
t = time.perf_counter(); lims, D, I = index.range_search(codes(query), radius + 1); search = time.perf_counter() - t
pairs = sorted((i, int(j)) for i in range(len(query)) for j in I[lims[i]:lims[i + 1]])
config = f"{parts} x {bits} bits, nflip {radius // parts}"
print(json.dumps({"build_s": build, "search_s": search, "pairs": pairs, "config": config, "version": faiss.__version__}))
"""


def bench_search(queries: int, references: int, radius: int, threads: int, sample: int,
                 faiss_python: str | None) -> dict[str, object]:
    """Exact near-duplicate search, side by side on the same codes: gapcheck's multi-index (all queries),
    brute force and faiss-cpu's IndexBinaryMultiHash (on the first ``sample`` queries, extrapolated linearly in the
    number of queries, pairs checked equal to the multi-index's)."""
    import json
    import subprocess
    import tracemalloc

    from gapcheck.data.mih import HammingIndex
    from gapcheck.data.near import brute_pairs

    query, reference = planted_codes(references, queries, radius)
    tracemalloc.start()
    started = time.perf_counter()
    index = HammingIndex(reference, radius, threads=threads)
    build = time.perf_counter() - started
    started = time.perf_counter()
    found = index.search(query)
    search = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    part = query[:sample]
    in_sample = found[0] < len(part)
    mine = list(zip(found[0][in_sample].tolist(), found[1][in_sample].tolist(), strict=True))
    started = time.perf_counter()
    brute = brute_pairs(part, reference, radius)
    brute_s = (time.perf_counter() - started) * len(query) / len(part)
    out: dict[str, object] = {
        "references": references, "queries": queries, "radius": radius, "widths": index.widths,
        "build_s": build, "search_s": search, "index_mib": index.nbytes / 2**20, "peak_mib": peak / 2**20,
        "pairs": len(found[0]), "brute_s": brute_s,
        "brute_same": mine == list(zip(brute[0].tolist(), brute[1].tolist(), strict=True))}
    if faiss_python:
        with tempfile.TemporaryDirectory() as tmp:
            np.save(Path(tmp) / "r.npy", reference)
            np.save(Path(tmp) / "q.npy", part)
            run = subprocess.run([faiss_python, "-c", FAISS_SCRIPT, str(Path(tmp) / "r.npy"), str(Path(tmp) / "q.npy"),
                                  str(radius), str(threads), str(len(index.widths))], capture_output=True, text=True,
                                 check=False)
        if run.returncode == 0:
            result = json.loads(run.stdout.strip().splitlines()[-1])
            out.update(faiss_build_s=result["build_s"], faiss_s=result["search_s"] * len(query) / len(part),
                       faiss_same=[tuple(p) for p in result["pairs"]] == mine, faiss_config=result["config"],
                       faiss_version=result["version"])
        else:
            out["faiss_error"] = run.stderr.strip().splitlines()[-1:]
    return out


def bench_drift(rows: int, features: int, workers: int) -> dict[str, float]:
    import pandas as pd

    from gapcheck.data.api import drift
    from gapcheck.engines import open_engine

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        for name, shift in (("ref", 0.0), ("cur", 0.3)):
            frame = pd.DataFrame(rng.normal(size=(rows, features)).astype(np.float64),
                                 columns=[f"f{i}" for i in range(features)])
            frame["f0"] += shift
            frame.to_parquet(Path(tmp) / f"{name}.parquet", row_group_size=100_000)
        with open_engine("local", workers=workers) as engine:
            started = time.perf_counter()
            result = drift(str(Path(tmp) / "ref.parquet"), str(Path(tmp) / "cur.parquet"), engine=engine)
            wall = time.perf_counter() - started
    return {"rows": rows, "features": features, "wall_s": wall, "drifted": sum(f.drift for f in result.features)}


def write_wide(path: Path, rows: int, features: int, shift: float, seed: int, row_group: int = 250_000) -> None:
    """A ``rows`` × ``features`` float32 parquet (values rounded to 3 decimals: dictionary-encoded, as many real
    feature tables are), written one row group at a time; ``f0`` shifted by ``shift`` std."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    schema = pa.schema([(f"f{i}", pa.float32()) for i in range(features)])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, row_group):
            n = min(row_group, rows - start)
            block = np.round(rng.standard_normal((features, n), dtype=np.float32), 3)
            block[0] += shift
            writer.write_table(pa.table(list(block), schema=schema))
            del block


EVIDENTLY_SCRIPT = """
import json, resource, sys, time
limit = int(sys.argv[3]) * 2**30
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))  # a shared machine: fail with MemoryError, never swap it
import pandas as pd
from evidently import Report
from evidently.presets import DataDriftPreset
t = time.perf_counter()
reference, current = pd.read_parquet(sys.argv[1]), pd.read_parquet(sys.argv[2])
loaded = time.perf_counter() - t
snapshot = Report([DataDriftPreset()]).run(current_data=current, reference_data=reference)
metrics = snapshot.dict()["metrics"]
drifted = next(m["value"]["count"] for m in metrics if m["metric_name"].startswith("DriftedColumnsCount"))
print(json.dumps({"wall_s": time.perf_counter() - t, "load_s": loaded, "drifted": drifted,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def bench_wide(rows: int, features: int, workers: int, folder: Path) -> dict[str, object]:
    """gapcheck drift on two generated ``rows`` × ``features`` parquet files (local engine), with peak memory."""
    import resource

    from gapcheck.data.api import drift
    from gapcheck.engines import open_engine

    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{name}_{rows}x{features}.parquet" for name in ("ref", "cur")]
    started = time.perf_counter()
    for path, shift, seed in zip(paths, (0.0, 0.3), (1, 2), strict=True):
        if not path.exists():
            write_wide(path, rows, features, shift, seed)
    generated = time.perf_counter() - started
    with open_engine("local", workers=workers) as engine, WorkerMemory() as workers_memory:
        started = time.perf_counter()
        result = drift(str(paths[0]), str(paths[1]), engine=engine)
        wall = time.perf_counter() - started
    return {"rows": rows, "features": features, "wall_s": wall, "generate_s": generated, "paths": paths,
            "timings": dict(result.timings), "drifted": [f.feature for f in result.features if f.drift],
            "bytes": sum(p.stat().st_size for p in paths),
            "driver_peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "worker_peak_mib": workers_memory.peak / 2**20}


class WorkerMemory:
    """The largest RSS any child process (engine worker) had, sampled every 0.2 s while the block runs."""

    def __init__(self) -> None:
        import threading

        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.wait(0.2):
            for child in me.children(recursive=True):
                try:
                    self.peak = max(self.peak, child.memory_info().rss)
                except psutil.Error:
                    continue

    def __enter__(self) -> "WorkerMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def bench_evidently(paths: list[Path], python: str, memory_gib: int, timeout_s: float) -> dict[str, object]:
    """Evidently's DataDriftPreset on the same two parquet files, in its own environment (its own pandas)."""
    import json
    import subprocess

    try:
        run = subprocess.run([python, "-c", EVIDENTLY_SCRIPT, str(paths[0]), str(paths[1]), str(memory_gib)],
                             capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish within {timeout_s:.0f} s"}
    if run.returncode != 0:
        last = [line for line in run.stderr.strip().splitlines() if line.strip()][-1:]
        return {"error": f"failed: {last[0][:160] if last else run.returncode}"}
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--queries", type=int, default=20_000)
    parser.add_argument("--references", type=int, default=1_000_000)
    parser.add_argument("--radius", type=int, default=8)
    parser.add_argument("--sample", type=int, default=2_000, help="queries run by brute force and faiss (extrapolated)")
    parser.add_argument("--faiss-python", help="a Python with faiss-cpu installed (a separate venv)")
    parser.add_argument("--wide", nargs=2, type=int, metavar=("ROWS", "FEATURES"), action="append",
                        help="drift on generated ROWS x FEATURES float32 parquet per side (repeatable)")
    parser.add_argument("--evidently-python", help="a Python with evidently installed: its DataDriftPreset on each "
                        "--wide size, side by side")
    parser.add_argument("--evidently-memory-gib", type=int, default=8)
    parser.add_argument("--evidently-timeout", type=float, default=900)
    parser.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "gapcheck-bench-wide")
    parser.add_argument("--only", choices=("leakage", "search", "drift", "wide"), help="run one part")
    args = parser.parse_args()
    if args.only in (None, "leakage"):
        leak = bench_leakage(args.images, args.workers)
        print(f"leakage  {leak['images']} images (64x64 PNG), {args.workers} workers: {leak['wall_s']:.1f} s, "
              f"{leak['images_per_s']:.0f} images/s (listing {leak['plan_s']:.1f} s, job {leak['job_s']:.1f} s, "
              f"checks {leak['checks_s']:.2f} s; {leak['exact']} planted copies found, {leak['near']} near pairs)")
    if args.only in (None, "search"):
        _print_search(bench_search(args.queries, args.references, args.radius, args.workers, args.sample,
                                   args.faiss_python))
    if args.only in (None, "drift"):
        result = bench_drift(args.rows, args.features, args.workers)
        print(f"drift    {result['rows']} rows x {result['features']} features per side, {args.workers} workers: "
              f"{result['wall_s']:.1f} s ({result['drifted']} drifted of {result['features']}; f0 shifted 0.3 std)")
    if args.only == "wide" or args.wide:
        for rows, features in args.wide or [(200_000, 100)]:
            _print_wide(bench_wide(rows, features, args.workers, args.data_dir), args)


def _print_search(r: dict[str, object]) -> None:
    print(f"near-dup {r['queries']:,} queries x {r['references']:,} references, radius {r['radius']}: multi-index "
          f"{r['widths']} build {r['build_s']:.1f} s + search {r['search_s']:.1f} s (index {r['index_mib']:.0f} MiB, "
          f"peak {r['peak_mib']:.0f} MiB), {r['pairs']:,} pairs")
    total = float(r["build_s"]) + float(r["search_s"])  # type: ignore[arg-type]
    print(f"         brute force (extrapolated from the sample): {r['brute_s']:.0f} s = {float(r['brute_s']) / total:.1f}x "
          f"the multi-index; same pairs on the sample: {r['brute_same']}")
    if "faiss_s" in r:
        faiss_total = float(r["faiss_build_s"]) + float(r["faiss_s"])  # type: ignore[arg-type]
        print(f"         faiss-cpu {r['faiss_version']} IndexBinaryMultiHash ({r['faiss_config']}): build "
              f"{r['faiss_build_s']:.1f} s + search {r['faiss_s']:.0f} s (extrapolated) = {faiss_total / total:.1f}x "
              f"the multi-index; same pairs on the sample: {r['faiss_same']}")
    elif "faiss_error" in r:
        print(f"         faiss: {r['faiss_error']}")


def _print_wide(r: dict[str, object], args: argparse.Namespace) -> None:
    timings = r["timings"]
    print(f"wide     {r['rows']:,} rows x {r['features']:,} float32 features per side ({float(r['bytes']) / 2**20:,.0f} MiB "  # type: ignore[arg-type]
          f"parquet; generated in {r['generate_s']:.0f} s), {args.workers} workers: gapcheck {r['wall_s']:.1f} s "
          f"(job {timings['job_s']:.1f} s), drifted {r['drifted']}, peak RSS driver {r['driver_peak_mib']:.0f} MiB, "  # type: ignore[index]
          f"worker {r['worker_peak_mib']:.0f} MiB")
    if args.evidently_python:
        ev = bench_evidently(r["paths"], args.evidently_python, args.evidently_memory_gib,  # type: ignore[arg-type]
                             args.evidently_timeout)
        if "error" in ev:
            print(f"         Evidently DataDriftPreset: {ev['error']} (memory limit {args.evidently_memory_gib} GiB)")
        else:
            print(f"         Evidently DataDriftPreset: {ev['wall_s']:.1f} s (load {ev['load_s']:.1f} s), "
                  f"{ev['drifted']:.0f} drifted, peak {ev['peak_mib']:.0f} MiB; gapcheck is "
                  f"{float(ev['wall_s']) / float(r['wall_s']):.1f}x faster")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()

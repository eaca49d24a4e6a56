"""Benchmark the engines (issue #13): the same leakage job on local and ray side by side — throughput,
engine start-up, driver peak memory at two sizes, merge cost vs the number of shards — and a scaling
model on paper for 1M and 100M items on 10 and 100 workers, from the measured per-item and merge costs.

    .venv/bin/python scripts/bench_engines.py --sizes 500 2000
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_data import make_images  # noqa: E402 - the same generated images as bench_data


def _warm(value: int) -> int:
    """A trivial task: the time until every worker answers it is the engine's start-up cost."""
    return value


def run_once(kind: str, root: Path, workers: int) -> dict[str, float]:
    from gapcheck.data.api import leakage
    from gapcheck.engines import Shard, open_engine

    started = time.perf_counter()
    with open_engine(kind, workers=workers) as engine:
        list(engine.map_shards(_warm, [Shard(i, i) for i in range(2 * workers)]))  # workers up and answering
        startup = time.perf_counter() - started
        tracemalloc.start()
        begun = time.perf_counter()
        result = leakage([f"train={root / 'train'}", f"val={root / 'val'}"], engine=engine)
        wall = time.perf_counter() - begun
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    items = sum(s.used for s in result.splits)
    return {"startup_s": startup, "wall_s": wall, "items_per_s": items / wall, "driver_peak_mb": peak / 2**20,
            "per_item_ms": 1000 * wall * workers / items}


def drift_costs(shards: int, rows: int = 20_000) -> tuple[float, float]:
    """(seconds per row of one drift shard on one worker, seconds to merge ``shards`` partials) — 50 columns."""
    import pandas as pd

    from gapcheck.data.features import SidePartial
    from gapcheck.data.sketches import Reservoir, column_stats

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(rows, 50)), columns=[f"f{i}" for i in range(50)])
    parts = []
    started = time.perf_counter()
    for s in range(shards):
        names = [f"s{s}:{i}" for i in range(len(frame))]
        parts.append(SidePartial(columns={c: column_stats(frame[c], names) for c in frame.columns},
                                 order=list(frame.columns),
                                 reservoir=Reservoir.of(names, {c: frame[c].to_numpy() for c in frame.columns}, 0),
                                 rows=len(frame)))
    per_row = (time.perf_counter() - started) / (shards * rows)
    started = time.perf_counter()
    merged = SidePartial()
    for part in parts:
        merged = merged.merge(part)
    return per_row, time.perf_counter() - started


def leakage_merge_cost(shards: int, per_shard: int = 256) -> float:
    """Seconds to merge ``shards`` leakage partials of ``per_shard`` images each."""
    from gapcheck.data.leakage import SplitRecords

    rng = np.random.default_rng(0)
    parts = [SplitRecords(kind="images", names=[f"s{s}:{i}" for i in range(per_shard)], urls=[None] * per_shard,
                          labels=[None] * per_shard, groups=[None] * per_shard,
                          file_sha=[f"{s:032x}{i:032x}" for i in range(per_shard)],
                          pixel_sha=[f"{i:032x}{s:032x}" for i in range(per_shard)],
                          chunks={"phash": [rng.integers(0, 2**63, per_shard, dtype=np.uint64)],
                                  "dhash": [rng.integers(0, 2**63, per_shard, dtype=np.uint64)]})
             for s in range(shards)]
    started = time.perf_counter()
    merged = SplitRecords()
    for part in parts:
        merged = merged.merge(part)
    merged.phash  # noqa: B018 - the one join of the hash chunks is part of the merge
    return time.perf_counter() - started


def search_cost() -> float:
    """Seconds per (query, reference) hash comparison of the exact near-duplicate search."""
    from gapcheck.data.near import hamming_pairs

    rng = np.random.default_rng(0)
    q, r = rng.integers(0, 2**63, 500, dtype=np.uint64), rng.integers(0, 2**63, 200_000, dtype=np.uint64)
    started = time.perf_counter()
    hamming_pairs(q, r, 6)
    return (time.perf_counter() - started) / (len(q) * len(r))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 2000])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    rows = []
    for size in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            make_images(root / "train", size * 4 // 5, 1)
            make_images(root / "val", size // 5, 2)
            for kind in ("local", "ray"):
                rows.append((kind, size, run_once(kind, root, args.workers)))
    print(f"{'engine':7} {'items':>6} {'start-up s':>10} {'wall s':>7} {'items/s':>8} {'driver peak MB':>14}")
    for kind, size, r in rows:
        print(f"{kind:7} {size:6d} {r['startup_s']:10.2f} {r['wall_s']:7.2f} {r['items_per_s']:8.0f} "
              f"{r['driver_peak_mb']:14.1f}")
    local = {size: r for kind, size, r in rows if kind == "local"}
    ray = {size: r for kind, size, r in rows if kind == "ray"}
    for size in args.sizes:
        print(f"ray/local wall ratio at {size}: {ray[size]['wall_s'] / local[size]['wall_s']:.2f}")
    drift_merge = {}
    for n in (8, 32, 128):
        drift_row, drift_merge[n] = drift_costs(n, rows=5_000)
    leak_merge = {n: leakage_merge_cost(n) for n in (100, 1000, 4000)}
    print("merge cost, drift partials (50 columns, 20k-row sample): "
          + ", ".join(f"{n} shards {c * 1000:.0f} ms" for n, c in drift_merge.items()))
    print("merge cost, leakage partials (256 images): "
          + ", ".join(f"{n} shards {c * 1000:.0f} ms" for n, c in leak_merge.items()))
    per_image = local[max(args.sizes)]["per_item_ms"] / 1000
    per_leak_merge = leak_merge[4000] / 4000
    per_drift_merge = drift_merge[128] / 128
    per_pair = search_cost()
    print(f"model inputs: {per_image * 1e3:.2f} ms per image per worker; {per_leak_merge * 1e3:.3f} ms per leakage "
          f"merge; {per_pair * 1e9:.2f} ns per hash pair; {drift_row * 1e6:.1f} us per table row (50 columns) per "
          f"worker; {per_drift_merge * 1e3:.1f} ms per drift merge (100k-row row groups)")
    print(f"{'items':>12} {'workers':>7} | {'leakage work':>12} {'merge':>7} {'search 1/5 x 4/5 driver':>24} "
          f"{'on engine':>10} | {'drift work':>10} {'merge':>7}")
    for items in (1_000_000, 100_000_000):
        for workers in (10, 100):
            work = items * per_image / workers
            merge = items / 256 * per_leak_merge
            search = (items / 5) * (items * 4 / 5) * per_pair
            drift_work = items * drift_row / workers
            drift_merge_s = items / 100_000 * per_drift_merge
            print(f"{items:>12,} {workers:>7} | {_t(work):>12} {_t(merge):>7} {_t(search):>24} "
                  f"{_t(search / workers):>10} | {_t(drift_work):>10} {_t(drift_merge_s):>7}")


def _t(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} d"


if __name__ == "__main__":
    main()

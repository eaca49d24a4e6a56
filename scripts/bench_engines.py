"""Benchmark the engines (issue #13): the same leakage job on local and ray side by side — throughput,
engine start-up, driver peak memory at two sizes, merge cost vs the number of shards — and a scaling
model on paper for 1M and 100M items on 10 and 100 workers, from the measured per-item and merge costs.

    .venv/bin/python scripts/bench_engines.py --sizes 500 2000
"""
from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from pathlib import Path

import sys

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


def merge_cost(shards: int) -> float:
    """Seconds to merge ``shards`` drift partials (50 columns, a 20k-row sample each) in order."""
    import pandas as pd

    from gapcheck.data.features import SidePartial
    from gapcheck.data.sketches import Reservoir, column_stats

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(2000, 50)), columns=[f"f{i}" for i in range(50)])
    parts = []
    for s in range(shards):
        names = [f"s{s}:{i}" for i in range(len(frame))]
        parts.append(SidePartial(columns={c: column_stats(frame[c], names) for c in frame.columns}, order=list(frame.columns),
                                 reservoir=Reservoir.of(names, {c: frame[c].to_numpy() for c in frame.columns}, 0),
                                 rows=len(frame)))
    started = time.perf_counter()
    merged = SidePartial()
    for part in parts:
        merged = merged.merge(part)
    return time.perf_counter() - started


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
        print(f"{kind:7} {size:6d} {r['startup_s']:10.2f} {r['wall_s']:7.2f} {r['items_per_s']:8.0f} {r['driver_peak_mb']:14.1f}")
    local = {size: r for kind, size, r in rows if kind == "local"}
    ray = {size: r for kind, size, r in rows if kind == "ray"}
    for size in args.sizes:
        print(f"ray/local wall ratio at {size}: {ray[size]['wall_s'] / local[size]['wall_s']:.2f}")
    costs = {n: merge_cost(n) for n in (8, 32, 128)}
    print("merge cost (drift partials, 50 columns): " + ", ".join(f"{n} shards {c * 1000:.0f} ms" for n, c in costs.items()))
    per_item = local[max(args.sizes)]["per_item_ms"] / 1000
    per_merge = costs[128] / 128
    print(f"scaling model: {per_item * 1000:.2f} ms per image per worker; {per_merge * 1000:.1f} ms per merged drift partial")
    for items in (1_000_000, 100_000_000):
        for workers in (10, 100):
            shards = items / 256
            work = items * per_item / workers
            merge = shards * per_merge
            print(f"  {items:>11,} items, {workers:3d} workers: work {work / 60:8.1f} min, driver merge {merge / 60:6.1f} min"
                  f"{'  <- merge-bound' if merge > work else ''}")


if __name__ == "__main__":
    main()

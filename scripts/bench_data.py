"""Benchmark the data checks (issue #10): leakage on generated images, the near-duplicate search against
all pairs, and drift on a wide table. Prints one table; sizes are flags (defaults fit a shared 2-core box).

    .venv/bin/python scripts/bench_data.py --images 20000 --rows 1000000 --features 50
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


def bench_search(queries: int, references: int) -> dict[str, float]:
    from gapcheck.data.near import all_pairs_count, hamming_pairs

    rng = np.random.default_rng(0)
    q = rng.integers(0, 2**63, queries, dtype=np.uint64)
    r = rng.integers(0, 2**63, references, dtype=np.uint64)
    started = time.perf_counter()
    hamming_pairs(q, r, 6)
    search = time.perf_counter() - started
    started = time.perf_counter()
    all_pairs_count(np.concatenate([q, r])[: min(queries + references, 40_000)], 6)
    union = min(queries + references, 40_000)
    baseline = (time.perf_counter() - started) * ((queries + references) / union) ** 2  # n² scaling from the measured part
    return {"queries": queries, "references": references, "search_s": search, "all_pairs_s": baseline,
            "ratio": baseline / search}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--references", type=int, default=200_000)
    parser.add_argument("--only", choices=("leakage", "search", "drift"), help="run one part")
    args = parser.parse_args()
    if args.only in (None, "leakage"):
        leak = bench_leakage(args.images, args.workers)
        print(f"leakage  {leak['images']} images (64x64 PNG), {args.workers} workers: {leak['wall_s']:.1f} s, "
              f"{leak['images_per_s']:.0f} images/s (listing {leak['plan_s']:.1f} s, job {leak['job_s']:.1f} s, "
              f"checks {leak['checks_s']:.2f} s; {leak['exact']} planted copies found, {leak['near']} near pairs)")
    if args.only in (None, "search"):
        search = bench_search(args.queries, args.references)
        print(f"near-dup {search['queries']} queries x {search['references']} hashes: {search['search_s']:.3f} s; "
              f"all pairs of the union (n^2, extrapolated): {search['all_pairs_s']:.1f} s; ratio {search['ratio']:.0f}x")
    if args.only in (None, "drift"):
        result = bench_drift(args.rows, args.features, args.workers)
        print(f"drift    {result['rows']} rows x {result['features']} features per side, {args.workers} workers: "
              f"{result['wall_s']:.1f} s ({result['drifted']} drifted of {result['features']}; f0 shifted 0.3 std)")


if __name__ == "__main__":
    main()

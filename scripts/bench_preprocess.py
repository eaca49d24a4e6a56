"""Benchmark: images/s of `preprocess_audit` vs the bare cost of the same stage callables over the same images.

Bare = decode + transform only, in the same kind of process pool (2 workers, same chunking,
one thread per process), nothing hashed, summarized or compared. Overhead = audit time / bare time - 1.

    python scripts/bench_preprocess.py [--images 256] [--workers 2] [--rounds 3]
"""
from __future__ import annotations

import argparse
import multiprocessing
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import skimage

from gapcheck.preprocess.audit import chunk_sizes, preprocess_audit
from gapcheck.preprocess.samples import DEFAULT_MAX_PIXELS
from gapcheck.preprocess.stages import make_spec, resolve
from gapcheck.preprocess.worker import init_worker

STAGES = {
    "train": "sample_models.preprocessing:train_transform",
    "val": "sample_models.preprocessing:val_transform",
    "infer": "sample_models.preprocessing:infer_equivalent",
}
PHOTOS = ("astronaut.png", "coffee.png", "chelsea.png", "rocket.jpg", "motorcycle_left.png", "ihc.png")


def bare_chunk(paths: list[str]) -> int:
    fns = [resolve(make_spec(name, target=target)) for name, target in STAGES.items()]
    for path in paths:
        for fn in fns:
            fn(path)
    return len(paths)


def run_bare(paths: list[str], workers: int) -> float:
    chunks, start = [], 0
    for size in chunk_sizes(len(paths), workers):  # exactly the audit's chunks
        chunks.append(paths[start : start + size])
        start += size
    start = time.perf_counter()
    context = multiprocessing.get_context("forkserver")  # the same worker start as the audit
    with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=init_worker,
                             initargs=(DEFAULT_MAX_PIXELS,)) as pool:
        assert sum(pool.map(bare_chunk, chunks)) == len(paths)
    return time.perf_counter() - start


def run_audit(folder: Path, n: int, workers: int) -> float:
    start = time.perf_counter()
    result = preprocess_audit(folder, STAGES, n=n, workers=workers)
    elapsed = time.perf_counter() - start
    assert result.verdict == "pass", result.summary
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data = Path(skimage.__file__).parent / "data"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for i in range(args.images):
            source = data / PHOTOS[i % len(PHOTOS)]
            shutil.copy(source, folder / f"{i:05d}{source.suffix}")
        paths = sorted(str(p) for p in folder.iterdir())
        bare, audit = [], []
        for _ in range(args.rounds):  # interleaved, best of N: both see the same page cache and machine state
            bare.append(run_bare(paths, args.workers))
            audit.append(run_audit(folder, args.images, args.workers))
    b, a = min(bare), min(audit)
    print(f"{args.images} real photos (skimage), {len(STAGES)} stages, {args.workers} workers, best of {args.rounds}")
    print(f"| run | seconds | images/s | per image, all stages |")
    print(f"|---|---|---|---|")
    print(f"| bare stage callables | {b:.2f} | {args.images / b:.1f} | {1000 * b / args.images:.1f} ms |")
    print(f"| preprocess_audit | {a:.2f} | {args.images / a:.1f} | {1000 * a / args.images:.1f} ms |")
    print(f"overhead: {100 * (a / b - 1):+.1f}% (target <= 15%)")
    # The spread, because another process on a small machine moves single rounds by several percent.
    print(f"rounds (s): bare {', '.join(f'{x:.2f}' for x in bare)}; audit {', '.join(f'{x:.2f}' for x in audit)}")
    ratios = [x / y - 1 for x, y in zip(audit, bare)]
    print(f"per-round overhead: {min(ratios):+.1%} .. {max(ratios):+.1%}")


if __name__ == "__main__":
    main()

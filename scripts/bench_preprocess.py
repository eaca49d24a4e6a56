"""Benchmark: images/s of `preprocess_audit` vs the bare cost of the same stage callables over the same images.

Bare = decode + transform only, in the same kind of process pool (2 workers, same chunking,
one thread per process), nothing hashed, summarized or compared. Overhead = audit time / bare time - 1,
in wall time and in CPU time (all processes: the parent and every worker, imports included). On a
shared, loaded machine the wall times of single rounds swing by tens of percent; CPU time does not.

    python scripts/bench_preprocess.py [--images 256] [--workers 2] [--rounds 3] [--traced-images 32] [--in-process 48]

First, in one process (CPU time, so other load on the machine hardly moves it): the same photos through the bare
stage callables and through the worker's per-sample work (``run_chunk``) without and with the fixed costs (the
determinism probe on 4 samples, the reference's replay for the stage table, two kept outputs), interleaved rounds.

Then the traced-step overhead: the same failing audit (a callable inference stage with the wrong
normalization against the training callable) with and without step tracing (the step locators
switched off), interleaved rounds; tracing runs once per failing pair, in the parent process.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
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
FAILING = {"train": "sample_models.preprocessing:train_transform",
           "infer": "sample_models.preprocessing:infer_wrong_normalization"}
PHOTOS = ("astronaut.png", "coffee.png", "chelsea.png", "rocket.jpg", "motorcycle_left.png", "ihc.png")


def bare_chunk(paths: list[str]) -> tuple[int, int, float]:
    fns = [resolve(make_spec(name, target=target)) for name, target in STAGES.items()]
    for path in paths:
        for fn in fns:
            fn(path)
    return len(paths), os.getpid(), time.process_time()  # this worker's CPU so far, imports included


def run_bare(paths: list[str], workers: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the parent and the workers)."""
    chunks, start = [], 0
    for size in chunk_sizes(len(paths), workers):  # exactly the audit's chunks
        chunks.append(paths[start : start + size])
        start += size
    start, cpu_start = time.perf_counter(), time.process_time()
    context = multiprocessing.get_context("forkserver")  # the same worker start as the audit
    with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=init_worker,
                             initargs=(DEFAULT_MAX_PIXELS,)) as pool:
        done = list(pool.map(bare_chunk, chunks))
    assert sum(count for count, _, _ in done) == len(paths)
    per_worker: dict[int, float] = {}
    for _, pid, cpu in done:
        per_worker[pid] = max(cpu, per_worker.get(pid, 0.0))
    return time.perf_counter() - start, time.process_time() - cpu_start + sum(per_worker.values())


def in_process(paths: list[str], rounds: int) -> None:
    """CPU seconds of the bare stages vs the audit's per-sample work in this process, best of ``rounds``."""
    from gapcheck.preprocess.worker import WorkerOptions, WorkItem, run_chunk

    specs = tuple(make_spec(name, target=target) for name, target in STAGES.items())
    fns = [resolve(spec) for spec in specs]
    init_worker(DEFAULT_MAX_PIXELS)
    options = WorkerOptions(DEFAULT_MAX_PIXELS, 2, 256)
    run_chunk(specs, (WorkItem(0, paths[0], False, False),), options)  # imports and caches, not measured
    plain = tuple(WorkItem(i, p, False, False) for i, p in enumerate(paths))
    full = tuple(WorkItem(i, p, i < 2, i < 4, profile=i == 0) for i, p in enumerate(paths))
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, run in (("bare", lambda: [fn(p) for p in paths for fn in fns]),
                          ("per-sample work", lambda: run_chunk(specs, plain, options)),
                          ("+ probe, replay, kept outputs", lambda: run_chunk(specs, full, options))):
            start = time.process_time()
            run()
            best[name] = min(best.get(name, float("inf")), time.process_time() - start)
    print(f"in one process: {len(paths)} photos, {len(STAGES)} stages, CPU s, best of {rounds}")
    for name, seconds in best.items():
        print(f"  {name:32s} {seconds:6.2f} s  {1000 * seconds / len(paths):6.1f} ms/photo  "
              f"{100 * (seconds / best['bare'] - 1):+6.1f}%")


def run_audit(folder: Path, n: int, workers: int) -> tuple[float, float]:
    start = time.perf_counter()
    result = preprocess_audit(folder, STAGES, n=n, workers=workers)
    elapsed = time.perf_counter() - start
    assert result.verdict == "pass", result.summary
    return elapsed, result.cpu_seconds["parent"] + result.cpu_seconds["workers"]


def run_failing(folder: Path, n: int, workers: int, traced: bool) -> tuple[float, float]:
    """The failing pair's audit; without tracing, no step locator runs (the findings are the same, minus the step)."""
    from gapcheck.preprocess.diagnoses import catalog

    saved = catalog.STEP_LOCATORS
    catalog.STEP_LOCATORS = saved if traced else ()
    try:
        start = time.perf_counter()
        result = preprocess_audit(folder, FAILING, n=n, workers=workers, repeats=0)
        elapsed = time.perf_counter() - start
    finally:
        catalog.STEP_LOCATORS = saved
    steps = {f.subject.step for f in result.findings if f.is_gap and f.subject.stage == "train→infer"}
    assert result.verdict == "gap" and (bool(steps - {None}) == traced), steps
    return elapsed, result.cpu_seconds["parent"]


def traced_overhead(folder: Path, n: int, workers: int, rounds: int) -> None:
    plain, traced = [], []
    for _ in range(rounds):
        plain.append(run_failing(folder, n, workers, traced=False))
        traced.append(run_failing(folder, n, workers, traced=True))
    p, t = min(x for x, _ in plain), min(x for x, _ in traced)
    pcpu, tcpu = min(c for _, c in plain), min(c for _, c in traced)
    print(f"\ntraced-step overhead: {n} photos, failing callable pair (wrong normalization), best of {rounds}")
    print("| run | wall s | parent CPU s |")
    print("|---|---|---|")
    print(f"| audit, no step tracing | {p:.2f} | {pcpu:.2f} |")
    print(f"| audit, traced steps | {t:.2f} | {tcpu:.2f} |")
    print(f"tracing adds: wall {t - p:+.2f} s ({100 * (t / p - 1):+.1f}%), parent CPU {tcpu - pcpu:+.2f} s "
          f"({100 * (tcpu / pcpu - 1):+.1f}%)")
    print(f"rounds wall (s): plain {', '.join(f'{x:.2f}' for x, _ in plain)}; traced {', '.join(f'{x:.2f}' for x, _ in traced)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--traced-images", type=int, default=32, help="photos for the traced-step overhead (0: skip)")
    parser.add_argument("--skip-throughput", action="store_true", help="only the traced-step overhead")
    parser.add_argument("--in-process", type=int, default=48, help="photos for the in-process CPU breakdown (0: skip)")
    args = parser.parse_args()
    data = Path(skimage.__file__).parent / "data"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "photos"
        folder.mkdir()
        for i in range(args.images):
            source = data / PHOTOS[i % len(PHOTOS)]
            shutil.copy(source, folder / f"{i:05d}{source.suffix}")
        paths = sorted(str(p) for p in folder.iterdir())
        if args.in_process:
            in_process(paths[: args.in_process], args.rounds)
        if args.traced_images:
            small = Path(tmp) / "traced"
            small.mkdir()
            for path in paths[: args.traced_images]:
                shutil.copy(path, small / Path(path).name)
            traced_overhead(small, args.traced_images, args.workers, args.rounds)
        if args.skip_throughput:
            return
        bare, audit = [], []
        for _ in range(args.rounds):  # interleaved, best of N: both see the same page cache and machine state
            bare.append(run_bare(paths, args.workers))
            audit.append(run_audit(folder, args.images, args.workers))
    b, a = min(x for x, _ in bare), min(x for x, _ in audit)
    bcpu, acpu = min(c for _, c in bare), min(c for _, c in audit)
    print(f"{args.images} real photos (skimage), {len(STAGES)} stages, {args.workers} workers, best of {args.rounds}")
    print("| run | wall s | images/s | CPU s (all processes) |")
    print("|---|---|---|---|")
    print(f"| bare stage callables | {b:.2f} | {args.images / b:.1f} | {bcpu:.2f} |")
    print(f"| preprocess_audit | {a:.2f} | {args.images / a:.1f} | {acpu:.2f} |")
    print(f"overhead: wall {100 * (a / b - 1):+.1f}%, CPU {100 * (acpu / bcpu - 1):+.1f}% (target <= 15%)")
    # The spread: other processes on a small shared machine move single rounds' wall time a lot, CPU time little.
    print(f"rounds wall (s): bare {', '.join(f'{x:.2f}' for x, _ in bare)}; "
          f"audit {', '.join(f'{x:.2f}' for x, _ in audit)}")
    print(f"rounds CPU (s): bare {', '.join(f'{c:.2f}' for _, c in bare)}; audit {', '.join(f'{c:.2f}' for _, c in audit)}")
    ratios = [x / y - 1 for (x, _), (y, _) in zip(audit, bare, strict=True)]
    cpu_ratios = [x / y - 1 for (_, x), (_, y) in zip(audit, bare, strict=True)]
    print(f"per-round overhead: wall {min(ratios):+.1%} .. {max(ratios):+.1%}, "
          f"CPU {min(cpu_ratios):+.1%} .. {max(cpu_ratios):+.1%}")

if __name__ == "__main__":
    main()

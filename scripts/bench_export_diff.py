"""Benchmark: gapcheck's layer-wise export-diff vs torch's verify_onnx_program vs the bare floor, on ResNet-18.

Variants, all on ``sample_models.cnn:build_resnet18`` fed one seeded ``x:1x3x224x224:float32`` draw:

  (a) gapcheck     ``export_diff(module, [sample], onnx_model=<exported>)`` (export excluded: done once up front
                   with ``gapcheck.model.export.export_onnx``, the dynamo exporter);
  (b) torch-verify ``torch.onnx.verification.verify_onnx_program(program, args=(x,), compare_intermediates=True)``
                   on an ``ONNXProgram`` from ``torch.onnx.export(module, (x,), dynamo=True)``;
  (c) floor        the least work that yields both sides' values: one ONNX Runtime session over the same model
                   with the same values marked as outputs (names from ``gapcheck.model.mapping.map_modules``), one
                   run, and one ``module(x)`` under ``torch.no_grad()`` with forward hooks cloning the outputs of the
                   same modules. Session creation is included, because (a) starts from a ModelProto as well;
  (a') gapcheck with a small ``max_intermediate_bytes`` (``--budget-mib``, default 16 MiB): the memory bound;
  (a'') gapcheck measuring the float64 noise floor on every run (``compare_samples(noise="always")``, what every run
                   did before issue 23 item 17; (a) measures it only when a verdict could depend on it, and the clean
                   ResNet-18 has none that could).

Timings run side by side in this one process: each variant is warmed up once, then the cheap variants are
timed round-robin (a, c, a', a'', a, c, ...) so load drift on a shared machine hits them alike; (b) is timed
last. Peak memory is measured separately, one fresh subprocess per variant (``--variant NAME``): after setup
(model built, ONNX loaded or exported, input drawn) the peak-RSS mark is reset through /proc/self/clear_refs,
the variant runs once, and peak RSS growth = VmHWM - VmRSS(before). The same subprocess's wall time is shown
as the cold (first-call-in-a-process) time.

    python scripts/bench_export_diff.py [--repeat 5] [--quick] [--skip-verify] [--budget-mib 16] [--markdown out.md]
    python scripts/bench_export_diff.py --whole-process 3 [--markdown out.md]   # issue 7: whole processes, cache
    python scripts/bench_export_diff.py --against ff10bdd [--rounds 3] [--quick]   # issue 17: this tree vs REF

``--against REF``: the plain run (a) of this tree and of git REF (extracted with ``git archive`` to a temporary
folder, same interpreter and site-packages), each in fresh processes alternated round by round; each process
exports once (excluded), warms up once and times ``export_diff`` ``--repeat`` times. Printed: best and median per
tree and their ratio (target for issue 17: within 1.10).

Targets (issue 2): (a) at least 20x faster than (b); (a) at most 1.5x (c), since issue 23 item 17 at most 1.3x (c).
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import torch
from rich.console import Console
from rich.table import Table

from gapcheck.backends.onnxruntime import OnnxRuntimeBackend
from gapcheck.export_diff.runner import DEFAULT_MAX_INTERMEDIATE_BYTES, export_diff
from gapcheck.inputs import parse_input_spec, random_samples
from gapcheck.model.export import export_onnx
from gapcheck.model.factory import resolve_callable
from gapcheck.model.mapping import map_modules

MODEL = "sample_models.cnn:build_resnet18"
INPUT = "x:1x3x224x224:float32"
RESULT_PREFIX = "BENCH_RESULT "
TARGET_VS_VERIFY = 20.0  # (b) / (a) must be at least this
TARGET_VS_FLOOR = 1.3  # (a) / (c) must be at most this (issue 23 item 17; issue 2 asked 1.5)
MIB = 1 << 20

log = logging.getLogger("bench_export_diff")


# --- setup -----------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def quiet():
    """Swallow the exporter's progress prints and warnings (they would garble the table)."""
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def silence_torch_logs() -> None:
    # verify_onnx_program logs one WARNING per value whose error exceeds its fixed 1e-2 abs / 0.1 rel threshold;
    # near-zero elements make rel errors large, and the messages are not part of what we measure.
    for name in ("torch.onnx", "torch.export", "torch._export", "torch.fx", "onnxscript", "onnx_ir"):
        logging.getLogger(name).setLevel(logging.ERROR)


def build_model_and_sample() -> tuple[torch.nn.Module, dict[str, np.ndarray]]:
    module = resolve_callable(MODEL)().eval()
    sample = random_samples([parse_input_spec(INPUT)], num_samples=1, seed=0)[0]
    return module, sample


def export_program(module: torch.nn.Module, sample: dict[str, np.ndarray]):
    """The ONNXProgram that (b) verifies: torch's own dynamo export of the same module at the same input."""
    with quiet():
        return torch.onnx.export(module, tuple(torch.from_numpy(a) for a in sample.values()), dynamo=True)


def marked_values(module: torch.nn.Module, model: onnx.ModelProto) -> dict[str, str]:
    """module path -> ONNX value holding its output, for the modules gapcheck compares (the floor marks the same)."""
    paths = [path for path, _ in module.named_modules() if path]
    return {path: m.value for path, m in map_modules(model, paths).items() if m.mapped}


# --- the variants ----------------------------------------------------------------------------------------------------


@dataclass
class Context:
    module: torch.nn.Module
    sample: dict[str, np.ndarray]
    onnx_model: onnx.ModelProto | None = None  # gapcheck's export, for (a), (a') and (c)
    program: object | None = None  # torch's ONNXProgram, for (b)
    marked: dict[str, str] = field(default_factory=dict)
    floor_parts: dict[str, list[float]] = field(default_factory=dict)


def run_gapcheck(ctx: Context, budget: int = DEFAULT_MAX_INTERMEDIATE_BYTES) -> int:
    result = export_diff(ctx.module, [ctx.sample], onnx_model=ctx.onnx_model, max_intermediate_bytes=budget)
    if result.verdict != "pass":
        raise SystemExit(f"gapcheck found a gap on the clean ResNet-18 (false alarm): {result.headline}")
    return sum(1 for layer in result.layers if layer.stats is not None)


def run_verify(ctx: Context) -> int:
    from torch.onnx.verification import verify_onnx_program

    x = tuple(torch.from_numpy(a) for a in ctx.sample.values())
    infos = verify_onnx_program(ctx.program, args=x, compare_intermediates=True)
    return len(infos)


def run_floor(ctx: Context) -> int:
    """One ORT session + run with the marked outputs, one hooked torch forward: both sides' values, nothing else."""
    start = time.perf_counter()
    names = list(dict.fromkeys(ctx.marked.values()))
    backend = OnnxRuntimeBackend(ctx.onnx_model, extra_outputs=names)
    session_done = time.perf_counter()
    ort_values = backend.infer(ctx.sample, [o.name for o in ctx.onnx_model.graph.output] + names)
    ort_done = time.perf_counter()
    captured: dict[str, torch.Tensor] = {}
    submodules = dict(ctx.module.named_modules())

    def hook_for(path: str):
        def hook(_module, _args, output):
            captured[path] = output.detach().clone()  # clone: a later in-place ReLU would change it

        return hook

    handles = [submodules[path].register_forward_hook(hook_for(path)) for path in ctx.marked]
    try:
        with torch.no_grad():
            ctx.module(*(torch.from_numpy(a) for a in ctx.sample.values()))
    finally:
        for handle in handles:
            handle.remove()
    torch_done = time.perf_counter()
    for part, seconds in (("session", session_done - start), ("ort_run", ort_done - session_done),
                          ("torch", torch_done - ort_done)):
        ctx.floor_parts.setdefault(part, []).append(seconds)
    assert len(captured) == len(ctx.marked) and len(ort_values) >= len(names)
    return len(names)


def run_gapcheck_noise_always(ctx: Context) -> int:
    """(a) with the float64 noise floor measured on every run, as before it was measured only where it can matter."""
    from functools import partial

    from gapcheck.export_diff import passes, runner

    lazy = runner.compare_samples
    runner.compare_samples = partial(passes.compare_samples, noise="always")
    try:
        return run_gapcheck(ctx)
    finally:
        runner.compare_samples = lazy


def variants(budget_mib: list[int]) -> dict[str, tuple[str, Callable[[Context], int]]]:
    table: dict[str, tuple[str, Callable[[Context], int]]] = {
        "gapcheck": ("(a) gapcheck export_diff", run_gapcheck),
        "floor": ("(c) floor", run_floor),
    }
    for mib in budget_mib:
        table[f"gapcheck-{mib}MiB"] = (
            f"(a') gapcheck, {mib} MiB budget",
            lambda ctx, mib=mib: run_gapcheck(ctx, mib * MIB),
        )
    table["gapcheck-noise-always"] = ("(a'') gapcheck, fp64 noise floor always", run_gapcheck_noise_always)
    table["torch-verify"] = ("(b) verify_onnx_program", run_verify)
    return table


# --- peak memory: one fresh process per variant ----------------------------------------------------------------------


def proc_status() -> dict[str, int]:
    """VmRSS / VmHWM in bytes from /proc/self/status (Linux)."""
    values = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) * 1024
    return values


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0: write 5 to clear_refs), so setup's own peak is not counted."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
        return True
    except OSError:
        return False


def child_main(name: str, onnx_path: str | None, budget_mib: list[int]) -> None:
    """Runs in a fresh subprocess: set up, reset the peak mark, run the variant once, print one JSON line."""
    silence_torch_logs()
    torch.manual_seed(0)
    module, sample = build_model_and_sample()
    ctx = Context(module, sample)
    if name == "torch-verify":
        ctx.program = export_program(module, sample)
    else:
        ctx.onnx_model = onnx.load(onnx_path)
        ctx.marked = marked_values(module, ctx.onnx_model)
    _, fn = variants(budget_mib)[name]
    gc.collect()
    was_reset = reset_peak_rss()
    before = proc_status()
    start = time.perf_counter()
    with quiet():
        values = fn(ctx)
    seconds = time.perf_counter() - start
    after = proc_status()
    print(RESULT_PREFIX + json.dumps({
        "variant": name,
        "cold_s": seconds,
        "values": values,
        "rss_before": before["VmRSS"],
        "peak": after["VmHWM"],
        "peak_growth": after["VmHWM"] - before["VmRSS"] if was_reset else None,
        "hwm_reset": was_reset,
    }), flush=True)


def measure_in_subprocess(name: str, onnx_path: Path, budget_mib: list[int], timeout: float) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--variant", name, "--onnx", str(onnx_path),
               "--budget-mib", ",".join(map(str, budget_mib))]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
    raise RuntimeError(f"memory run of {name} failed (exit {done.returncode}): {' | '.join(tail)}")


# --- timing in this process ------------------------------------------------------------------------------------------


def time_once(fn: Callable[[Context], int], ctx: Context) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (all threads of this process: less sensitive to other load) and values compared."""
    start, cpu_start = time.perf_counter(), time.process_time()
    with quiet():
        values = fn(ctx)
    return time.perf_counter() - start, time.process_time() - cpu_start, values


def load_average() -> str:
    try:
        return " / ".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


def fmt_s(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.3f}" if seconds < 10 else f"{seconds:.1f}"


def fmt_mib(value: int | None) -> str:
    return "-" if value is None else f"{value / MIB:.0f}"


def fmt_x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x" if value < 10 else f"{value:.1f}x"


VERIFY_SCRIPT = """
import contextlib, io, logging, sys, warnings
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
import numpy as np, torch
from torch.onnx.verification import verify_onnx_program
sys.path.insert(0, {root!r})
from gapcheck.inputs import parse_input_spec, random_samples
from gapcheck.model.factory import resolve_callable
module = resolve_callable({model!r})().eval()
x = torch.from_numpy(random_samples([parse_input_spec({input!r})], 1, seed=0)[0]["x"])
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    program = torch.onnx.export(module, (x,), dynamo=True)
    results = verify_onnx_program(program, args=(x,), compare_intermediates=True)
print(len(results), "values compared")
"""


def whole_process(rounds: int, markdown: Path | None) -> None:
    """Whole processes side by side: the gapcheck CLI (export cache cold and warm) vs a verify_onnx_program script.

    Each round runs, in this order: gapcheck with an empty cache folder (it exports, then stores), gapcheck again
    on the same folder (the repeated run: the export comes from the cache), and the verify script with its own
    export. Medians over rounds; ratios over the verify script's time.
    """
    root = str(Path(__file__).resolve().parents[1])
    gapcheck_cmd = [sys.executable, "-m", "gapcheck", "export-diff", "--model", MODEL, "--input", INPUT, "--no-progress"]
    verify_cmd = [sys.executable, "-c", VERIFY_SCRIPT.format(root=root, model=MODEL, input=INPUT)]
    times: dict[str, list[float]] = {"gapcheck (cold cache: exports)": [], "gapcheck (repeated run: cached export)": [],
                                     "verify_onnx_program + its export": []}
    for rep in range(rounds):
        with tempfile.TemporaryDirectory(prefix="bench_cache_") as cache:
            env = {**os.environ, "GAPCHECK_CACHE_DIR": cache}
            for label in list(times)[:2]:
                start = time.perf_counter()
                done = subprocess.run(gapcheck_cmd, env=env, cwd=root, capture_output=True)
                times[label].append(time.perf_counter() - start)
                if done.returncode != 0:
                    raise SystemExit(f"gapcheck exited {done.returncode}: {done.stderr.decode()[-500:]}")
        start = time.perf_counter()
        done = subprocess.run(verify_cmd, cwd=root, capture_output=True)
        times["verify_onnx_program + its export"].append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"verify script exited {done.returncode}: {done.stderr.decode()[-500:]}")
        print(f"round {rep + 1}: " + ", ".join(f"{k} {v[-1]:.1f}s" for k, v in times.items()), flush=True)
    median = {k: statistics.median(v) for k, v in times.items()}
    verify = median["verify_onnx_program + its export"]
    lines = ["| whole process (ResNet-18, 1x3x224x224) | median wall s | min s | ÷ verify |", "|---|---:|---:|---:|"]
    lines += [f"| {k} | {median[k]:.1f} | {min(v):.1f} | {median[k] / verify:.2f}x |" for k, v in times.items()]
    lines += ["", f"{rounds} rounds, alternated; load average at the end {load_average()}; "
              f"targets: repeated run <= 4 s, <= 0.15x of verify"]
    print("\n".join(lines))
    if markdown:
        markdown.write_text("\n".join(lines) + "\n")


_AGAINST_CHILD = r"""
import json, sys, time, warnings, logging
sys.path.insert(0, sys.argv[1])
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
import torch
from gapcheck.export_diff.runner import export_diff
from gapcheck.inputs import parse_input_spec, random_samples
from gapcheck.model.export import export_onnx
from gapcheck.model.factory import resolve_callable
module = resolve_callable(sys.argv[2])().eval()
sample = random_samples([parse_input_spec(sys.argv[3])], 1, seed=0)[0]
model = export_onnx(module, sample).model
export_diff(module, [sample], onnx_model=model)
times, cpu = [], []
for _ in range(int(sys.argv[4])):
    start, start_cpu = time.perf_counter(), time.process_time()
    result = export_diff(module, [sample], onnx_model=model)
    times.append(time.perf_counter() - start)
    cpu.append(time.process_time() - start_cpu)
print(json.dumps({"times": times, "cpu": cpu, "verdict": str(result.verdict), "file": __import__("gapcheck").__file__,
                  "realign_s": result.timings.get("realign_s")}))
"""


def against(ref: str, rounds: int, repeat: int, markdown: Path | None) -> None:
    """This tree's plain run vs REF's, in alternated fresh processes (see the module docstring)."""
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="gapcheck-base-") as base:
        archive = subprocess.run(["git", "-C", str(root), "archive", ref], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", base], input=archive, check=True)
        trees = {ref: base, "this tree": str(root)}
        times: dict[str, list[float]] = {name: [] for name in trees}
        cpu: dict[str, list[float]] = {name: [] for name in trees}
        realign: list[float] = []
        for round_ in range(rounds):
            for name, folder in trees.items():
                out = subprocess.run([sys.executable, "-c", _AGAINST_CHILD, folder, MODEL, INPUT, str(repeat)],
                                     check=True, capture_output=True, text=True, cwd=folder).stdout
                record = json.loads(out.strip().splitlines()[-1])
                assert record["file"].startswith(folder), record  # each tree imports its own gapcheck
                times[name] += record["times"]
                cpu[name] += record["cpu"]
                if record.get("realign_s") is not None:
                    realign.append(record["realign_s"])
                print(f"round {round_ + 1}: {name}: best {min(record['times']):.3f}s, cpu {min(record['cpu']):.3f}s "
                      f"({record['verdict']})")
    best = {name: min(values) for name, values in times.items()}
    median = {name: statistics.median(values) for name, values in times.items()}
    cpu_best = {name: min(values) for name, values in cpu.items()}
    cpu_median = {name: statistics.median(values) for name, values in cpu.items()}
    lines = ["| tree | best wall (s) | median wall (s) | best CPU (s) | median CPU (s) | runs |",
             "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {name} | {best[name]:.3f} | {median[name]:.3f} | {cpu_best[name]:.3f} | {cpu_median[name]:.3f} "
              f"| {len(times[name])} |" for name in trees]
    lines += ["", f"ratio this tree / {ref}: best wall {best['this tree'] / best[ref]:.3f}, "
              f"median wall {median['this tree'] / median[ref]:.3f}, best CPU {cpu_best['this tree'] / cpu_best[ref]:.3f}, "
              f"median CPU {cpu_median['this tree'] / cpu_median[ref]:.3f}; value confirmation in this tree's runs: "
              f"max {max(realign, default=0.0) * 1e3:.2f} ms; load average at the end {load_average()}"]
    print("\n".join(lines))
    if markdown:
        markdown.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--whole-process", type=int, metavar="ROUNDS",
                        help="instead: whole processes side by side (gapcheck CLI cold/cached vs verify script)")
    parser.add_argument("--repeat", type=int, help="timed repetitions per cheap variant, after 1 warm-up (default 5, --quick 2)")
    parser.add_argument("--verify-repeat", type=int, default=1,
                        help="timed repetitions of (b); each takes minutes, and it is >20x off either way")
    parser.add_argument("--verify-warmup", choices=("light", "full"), default="light",
                        help="light: warm (b)'s code paths with compare_intermediates=False; full: one whole run")
    parser.add_argument("--quick", action="store_true",
                        help="--repeat 2 and no memory subprocess for (b) (saves ~2 minutes)")
    parser.add_argument("--skip-verify", action="store_true", help="leave (b) out entirely")
    parser.add_argument("--no-memory", action="store_true", help="skip the per-variant memory subprocesses")
    parser.add_argument("--budget-mib", default="16", help="comma-separated max_intermediate_bytes rows, in MiB")
    parser.add_argument("--markdown", type=Path, help="also write the table as markdown to this file")
    parser.add_argument("--against", metavar="REF", help="instead: this tree's plain run vs git REF's, side by side")
    parser.add_argument("--rounds", type=int, default=3, help="with --against: alternated rounds of fresh processes")
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # internal: memory run in a fresh process
    parser.add_argument("--onnx", help=argparse.SUPPRESS)  # internal: the parent's exported model
    args = parser.parse_args()
    budget_mib = [int(v) for v in args.budget_mib.split(",") if v.strip()]
    if args.whole_process:
        whole_process(args.whole_process, args.markdown)
        return
    if args.against:
        against(args.against, args.rounds, args.repeat or (2 if args.quick else 5), args.markdown)
        return
    if args.variant:
        child_main(args.variant, args.onnx, budget_mib)
        return
    repeat = args.repeat or (2 if args.quick else 5)
    silence_torch_logs()
    console = Console(width=None if sys.stdout.isatty() else 150)
    total_start = time.perf_counter()
    load_start = load_average()

    module, sample = build_model_and_sample()
    ctx = Context(module, sample)
    with console.status("exporting (gapcheck export_onnx, dynamo) ..."):
        start = time.perf_counter()
        with quiet():
            exported = export_onnx(module, sample)
        gapcheck_export_s = time.perf_counter() - start
    ctx.onnx_model = exported.model
    ctx.marked = marked_values(module, ctx.onnx_model)
    verify_export_s = None
    if not args.skip_verify:
        with console.status("exporting (torch.onnx.export(dynamo=True)) for verify_onnx_program ..."):
            start = time.perf_counter()
            ctx.program = export_program(module, sample)
            verify_export_s = time.perf_counter() - start
    console.print(
        f"ResNet-18 ({sum(p.numel() for p in module.parameters()) / 1e6:.1f}M params), input {INPUT}; "
        f"gapcheck export ({exported.exporter}) {gapcheck_export_s:.1f}s, {len(ctx.onnx_model.graph.node)} nodes"
        + (f"; torch export {verify_export_s:.1f}s, {len(list(ctx.program.model.graph))} nodes" if ctx.program else "")
        + f"; {len(ctx.marked)} modules mapped to {len(set(ctx.marked.values()))} ONNX values; "
        f"torch threads {torch.get_num_threads()}, cpus {os.cpu_count()}, load avg {load_start}"
    )

    table = variants(budget_mib)
    if args.skip_verify:
        table.pop("torch-verify")
    cheap = [name for name in table if name != "torch-verify"]
    times: dict[str, list[float]] = {name: [] for name in table}
    cpu: dict[str, list[float]] = {name: [] for name in table}
    compared: dict[str, int] = {}
    with console.status("warming up ..."):
        for name in cheap:
            _, _, compared[name] = time_once(table[name][1], ctx)
        if "torch-verify" in table:
            from torch.onnx.verification import verify_onnx_program

            x = tuple(torch.from_numpy(a) for a in sample.values())
            with quiet():
                if args.verify_warmup == "full":
                    run_verify(ctx)
                else:
                    verify_onnx_program(ctx.program, args=x, compare_intermediates=False)
    ctx.floor_parts.clear()
    for rep in range(repeat):
        with console.status(f"timing round {rep + 1}/{repeat} ..."):
            for name in cheap:
                seconds, cpu_seconds, _ = time_once(table[name][1], ctx)
                times[name].append(seconds)
                cpu[name].append(cpu_seconds)
    if "torch-verify" in table:
        for rep in range(args.verify_repeat):
            with console.status(f"timing verify_onnx_program {rep + 1}/{args.verify_repeat} (minutes) ..."):
                seconds, cpu_seconds, compared["torch-verify"] = time_once(run_verify, ctx)
                times["torch-verify"].append(seconds)
                cpu["torch-verify"].append(cpu_seconds)

    memory: dict[str, dict] = {}
    if not args.no_memory:
        with tempfile.TemporaryDirectory(prefix="bench_export_diff_") as tmp:
            onnx_path = Path(tmp) / "resnet18.onnx"
            onnx.save(ctx.onnx_model, str(onnx_path))
            for name in table:
                if name == "torch-verify" and args.quick:
                    continue
                with console.status(f"peak memory of {name} in a fresh process ..."):
                    memory[name] = measure_in_subprocess(name, onnx_path, budget_mib, timeout=900)

    median = {name: statistics.median(v) for name, v in times.items() if v}
    best = {name: min(v) for name, v in times.items() if v}
    cpu_median = {name: statistics.median(v) for name, v in cpu.items() if v}
    a, c, b = median.get("gapcheck"), median.get("floor"), median.get("torch-verify")
    rows = []
    for name, (label, _) in table.items():
        mem = memory.get(name, {})
        rows.append([
            label,
            fmt_s(median.get(name)),
            fmt_s(best.get(name)),
            str(len(times[name])),
            fmt_s(cpu_median.get(name)),
            fmt_x(median[name] / a if a and name in median else None),
            fmt_x(median[name] / c if c and name in median else None),
            fmt_s(mem.get("cold_s")),
            fmt_mib(mem.get("peak_growth")),
            fmt_mib(mem.get("peak")),
            str(compared.get(name, "-")),
        ])
    headers = ["variant", "median s", "min s", "reps", "CPU s", "÷ (a)", "÷ (c)", "cold s", "peak RSS +MiB",
               "peak RSS MiB", "values"]
    rich_table = Table(title="export-diff benchmark: ResNet-18, 1x3x224x224 float32, export excluded")
    for i, header in enumerate(headers):
        rich_table.add_column(header, justify="left" if i == 0 else "right")
    for row in rows:
        rich_table.add_row(*row)
    console.print(rich_table)

    parts = {part: statistics.median(v) for part, v in ctx.floor_parts.items()}
    legend = ("median/min s: wall time in this process after 1 warm-up; CPU s: median process CPU time (all threads); "
              "÷ (a), ÷ (c): median wall time over (a)'s, (c)'s; cold s: the one run in a fresh process; "
              "peak RSS +MiB: VmHWM growth over that run; values: tensors compared")
    console.print(legend)
    floor_line = "floor breakdown (median): " + ", ".join(f"{part} {fmt_s(s)}s" for part, s in parts.items())
    console.print(floor_line)
    verdicts = []
    if a and b:
        verdicts.append(f"(b)/(a) = {b / a:.1f}x on median wall time, target >= {TARGET_VS_VERIFY:.0f}x: "
                        + ("HOLDS" if b / a >= TARGET_VS_VERIFY else "MISSED")
                        + f" (min: {best['torch-verify'] / best['gapcheck']:.1f}x; "
                        f"CPU time: {cpu_median['torch-verify'] / cpu_median['gapcheck']:.1f}x)")
    if a and c:
        verdicts.append(f"(a)/(c) = {a / c:.2f}x on median wall time, target <= {TARGET_VS_FLOOR}x: "
                        + ("HOLDS" if a / c <= TARGET_VS_FLOOR else "MISSED")
                        + f" (min: {best['gapcheck'] / best['floor']:.2f}x; "
                        f"CPU time: {cpu_median['gapcheck'] / cpu_median['floor']:.2f}x)")
    always = median.get("gapcheck-noise-always")
    if a and always:
        verdicts.append(f"(a'')/(a) = {always / a:.2f}x on median wall time (min: "
                        f"{best['gapcheck-noise-always'] / best['gapcheck']:.2f}x; CPU time: "
                        f"{cpu_median['gapcheck-noise-always'] / cpu_median['gapcheck']:.2f}x): what measuring the "
                        "float64 noise floor on every run would cost")
    for line in verdicts:
        console.print(line)
    load_end = load_average()
    footer = f"total {time.perf_counter() - total_start:.0f}s; load average start {load_start}, end {load_end}"
    console.print(footer)

    if args.markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(headers))) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        lines += ["", legend, "", floor_line, ""] + [f"- {line}" for line in verdicts] + ["", footer]
        args.markdown.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

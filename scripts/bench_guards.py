"""Per-step overhead of each runtime guard, side by side with the bare loop, on a small CNN and a small transformer.

Every variant runs the same training step on the same batches; rounds interleave the variants (bare, guard A,
guard B, ..., bare, guard A, ...) so machine load hits them alike, and the per-step time of a variant is the
median over rounds (best-of also printed); the ratio is the median over rounds of the variant's time over
its baseline's time in the same round (paired), rounds alternating the order of the variants. Times are the
process's CPU time (``time.process_time``) with one torch thread: on a shared machine, wall time mostly
measures the other tenants (waiting for a core), while CPU time measures the work the step and its guard do;
on a quiet machine the two agree. Ratios are against the
matching bare loop: the GradScaler monitor against a bare loop that uses the same GradScaler, EvalGuard against
a plain ``eval()`` + ``no_grad()`` pass. A second table times each guard's own work in a tight loop, as a
share of the bare step: end-to-end ratios on a loaded machine carry a few percent of noise, this does not.

    .venv/bin/python scripts/bench_guards.py [--rounds 7] [--steps 30] [--threads 1]
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from gapcheck import guards


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class SmallTransformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(1000, 64)
        layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(64, 10)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)).mean(1))


def batches(kind: str, n: int = 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    if kind == "cnn":
        return [(torch.randn(16, 3, 32, 32, generator=g), torch.randint(0, 10, (16,), generator=g)) for _ in range(n)]
    return [(torch.randint(0, 1000, (16, 32), generator=g), torch.randint(0, 10, (16,), generator=g)) for _ in range(n)]


class Loop:
    """One model + optimizer (+ scaler) and a ``run(steps)`` that trains; guards are set up per variant."""

    def __init__(self, kind: str, scaler: bool = False) -> None:
        torch.manual_seed(0)
        self.model = SmallCNN() if kind == "cnn" else SmallTransformer()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=1e-3, momentum=0.9)
        self.scaler = torch.amp.GradScaler("cpu") if scaler else None
        self.data = batches(kind)
        self.after_step: Callable[[], object] = lambda: None

    def step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(self.model(x), y)
        if self.scaler is None:
            loss.backward()
            self.optimizer.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        self.after_step()

    def run(self, steps: int) -> float:
        self.model.train()
        start = time.process_time()
        for i in range(steps):
            self.step(*self.data[i % len(self.data)])
        return (time.process_time() - start) / steps

    def validate(self, steps: int, guarded: bool) -> float:
        start = time.process_time()
        for i in range(steps):
            if guarded:
                with guards.EvalGuard(self.model):
                    self.model(self.data[i % len(self.data)][0])
            else:
                self.model.eval()
                with torch.no_grad():
                    self.model(self.data[i % len(self.data)][0])
                self.model.train()
        return (time.process_time() - start) / steps


def variants(kind: str) -> dict[str, tuple[str, Callable[[int], float]]]:
    """name -> (baseline name, per-step timer). Each variant owns its loop so guards never stack."""
    out: dict[str, tuple[str, Callable[[int], float]]] = {}
    bare = Loop(kind)
    out["bare"] = ("bare", bare.run)

    health = Loop(kind)
    health_guard = guards.GradientHealth(health.model)
    health_guard.attach()
    out["GradientHealth (every step)"] = ("bare", health.run)

    scaled = Loop(kind, scaler=True)
    out["bare + GradScaler"] = ("bare + GradScaler", scaled.run)
    monitored = Loop(kind, scaler=True)
    monitor = guards.ScalerStepMonitor(monitored.scaler, monitored.optimizer)
    sched = guards.SteppedOnly(torch.optim.lr_scheduler.StepLR(monitored.optimizer, 1000), monitor)
    monitored.after_step = lambda: (monitor.observe(), sched.step())
    out["ScalerStepMonitor + SteppedOnly (every step)"] = ("bare + GradScaler", monitored.run)

    for every in (1, 10):
        contract = Loop(kind)
        if kind == "cnn":
            guards.input_contract(contract.model, dtype=torch.float32, range=(-10, 10), layout="NCHW", every=every)
        else:
            guards.input_contract(contract.model, dtype=torch.int64, range=(0, 999), layout="NC", every=every)
        out[f"input_contract (every={every})"] = ("bare", contract.run)

    timed = Loop(kind)
    out["profile_steps timers (per step)"] = ("bare", lambda steps: _profiled(timed, steps))

    val = Loop(kind)
    out["validation, plain eval()+no_grad"] = ("validation, plain eval()+no_grad", lambda s: val.validate(s, False))
    out["validation in EvalGuard"] = ("validation, plain eval()+no_grad", lambda s: val.validate(s, True))
    return out


def _profiled(loop: Loop, steps: int) -> float:
    start = time.process_time()
    guards.profile_steps(lambda batch: loop.step(*batch), loop.data, steps=steps, warmup=0)
    return (time.process_time() - start) / steps


def bench(kind: str, rounds: int, steps: int) -> None:
    table = variants(kind)
    for _, timer in table.values():  # warm-up: allocator, autograd graph caches, lazy inits
        timer(3)
    samples: dict[str, list[float]] = {name: [] for name in table}
    for r in range(rounds):
        order = list(table.items()) if r % 2 == 0 else list(reversed(table.items()))  # no variant always first
        for name, (_, timer) in order:
            samples[name].append(timer(steps))
    print(f"\n{kind}: {rounds} rounds x {steps} steps, torch threads {torch.get_num_threads()}")
    print(f"{'variant (CPU ms per step)':<46} {'median ms':>10} {'best ms':>9} {'paired ratio':>13} {'ratio (best)':>13}")
    for name, (base, _) in table.items():
        # Paired: each round's variant over the same round's baseline, then the median; load drifts between
        # rounds cancel out, which they do not in a ratio of two medians.
        paired = statistics.median(v / b for v, b in zip(samples[name], samples[base], strict=True))
        med, best = statistics.median(samples[name]), min(samples[name])
        print(f"{name:<46} {1e3 * med:>10.3f} {1e3 * best:>9.3f} {paired:>13.3f} {best / min(samples[base]):>13.3f}")


def _best_cpu(call: Callable[[], object], calls: int = 200, repeats: int = 5) -> float:
    """Best-of-``repeats`` CPU seconds per call of ``call``."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(calls):
            call()
        best = min(best, (time.process_time() - start) / calls)
    return best


def direct_costs(kind: str) -> None:
    """Each guard's own work per step, timed in a tight loop: robust where end-to-end A/B drowns in load noise."""
    loop = Loop(kind, scaler=True)
    loop.run(3)  # gradients, scaler state and optimizer state exist
    step = min(Loop(kind).run(10) for _ in range(5))
    x = loop.data[0][0]
    health = guards.GradientHealth(loop.model)
    params = [p for p in loop.model.parameters() if p.requires_grad]

    def hooks() -> None:  # what the post-accumulate hooks cost in one backward (the first queues the callback)
        health._queued = True  # as after the first hook of this backward: same graph task, nothing queued again
        health._queued_task = health._graph_task() if health._graph_task is not None else None
        for p in params:
            health._on_grad(p)

    monitor = guards.ScalerStepMonitor(loop.scaler, loop.optimizer, window=10**9)
    sched = guards.SteppedOnly(torch.optim.lr_scheduler.StepLR(loop.optimizer, 1000), monitor)
    contract = guards.InputContract(loop.model, dtype=x.dtype, range=(-1e9, 1e9),
                                    layout="NCHW" if kind == "cnn" else "NC")
    contract.remove()
    rows = [("GradientHealth.check() (one foreach pass, one sync)", _best_cpu(health.check)),
            (f"GradientHealth hooks ({len(params)} parameters)", _best_cpu(hooks)),
            ("ScalerStepMonitor.observe() + SteppedOnly.step()", _best_cpu(lambda: (monitor.observe(), sched.step()))),
            ("input_contract check (every=1)", _best_cpu(lambda: contract._hook(loop.model, (x,), {})))]
    print(f"\n{kind}: guard's own CPU time per step vs the bare step ({1e3 * step:.2f} ms, best of 5 x 10 steps)")
    for name, cost in rows:
        print(f"  {name:<55} {1e6 * cost:>8.1f} us  {cost / step:>7.2%}")


def one_offs(kind: str) -> None:
    """Guards that run once per trial / per check: their absolute cost."""
    loop = Loop(kind)
    start = time.process_time()
    with guards.trial_cleanup(loop.model, loop.optimizer):
        loop.run(5)
    cleanup = time.process_time() - start
    t0 = time.process_time()
    Loop(kind).run(5)
    train5 = time.process_time() - t0
    start = time.process_time()
    guards.check_determinism(lambda: Loop(kind).model, lambda m: None, n=2)
    determinism = time.process_time() - start
    print(f"{kind}: trial_cleanup around 5 steps {1e3 * cleanup:.0f} ms (5 bare steps {1e3 * train5:.0f} ms); "
          f"check_determinism (2 runs, no training) {1e3 * determinism:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: steady on a shared box)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for kind in ("cnn", "transformer"):
        bench(kind, args.rounds, args.steps)
    for kind in ("cnn", "transformer"):
        direct_costs(kind)
    print()
    for kind in ("cnn", "transformer"):
        one_offs(kind)


if __name__ == "__main__":
    main()

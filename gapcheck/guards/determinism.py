"""check_determinism: train the same model twice from the same seed and compare the weights.

Each run seeds everything (:func:`~gapcheck.guards.seeding.seed_everything`, unless ``seed=None``
leaves seeding to the callables), builds a fresh model with ``make_model()``, trains it with
``train_steps(model)`` and keeps its ``state_dict`` (parameters and buffers, on the CPU). Runs 2..n
are compared with run 1 tensor by tensor with :mod:`gapcheck.compare` — the tolerance logic and
dtype defaults of export-diff (``rtol``/``atol`` override them) — and the first tensor in
``state_dict`` order that differs is named, with its observed error. The process's random state and
determinism flags are restored afterwards.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gapcheck.codes.guards import NONDETERMINISTIC
from gapcheck.errors import UsageError
from gapcheck.findings import Finding, Subject
from gapcheck.guards.base import DeterminismError, Ledger, Mode
from gapcheck.guards.seeding import RngState, seed_everything

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class TensorDiff:
    name: str
    run: int  # the run compared with run 1 (2-based)
    passed: bool
    max_abs: float
    max_rel: float
    mismatch_fraction: float
    rtol: float
    atol: float
    shape_mismatch: bool = False


@dataclass(frozen=True)
class DeterminismReport:
    runs: int
    compared: int  # tensors compared per run
    diffs: tuple[TensorDiff, ...]  # every comparison (the observed error, also when it passes)
    first_mismatch: TensorDiff | None
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return self.first_mismatch is None

    def __bool__(self) -> bool:
        return self.ok

    @property
    def max_abs(self) -> float:
        return max((d.max_abs for d in self.diffs), default=0.0)


def _run(make_model: Callable[[], Any], train_steps: Callable[[Any], Any], seed: int | None,
         deterministic: bool) -> dict[str, "torch.Tensor"]:
    if seed is not None:
        seed_everything(seed, deterministic=deterministic)
    model = make_model()
    trained = train_steps(model)
    final = trained if trained is not None and hasattr(trained, "state_dict") else model
    return {name: value.detach().cpu().clone() for name, value in final.state_dict().items()
            if hasattr(value, "detach")}


def _compare(name: str, run: int, actual: "torch.Tensor", expected: "torch.Tensor", rtol: float | None,
             atol: float | None) -> TensorDiff:
    from gapcheck.compare import TolerancePolicy, compare_arrays
    from gapcheck.tensors import to_numpy

    a, e = to_numpy(actual), to_numpy(expected)
    tol = TolerancePolicy(rtol=rtol, atol=atol).for_name(name, e.dtype)
    stats = compare_arrays(a, e, tol)
    return TensorDiff(name=name, run=run, passed=stats.passed, max_abs=stats.max_abs, max_rel=stats.max_rel,
                      mismatch_fraction=stats.mismatch_fraction, rtol=stats.rtol, atol=stats.atol,
                      shape_mismatch=stats.shape_mismatch)


def check_determinism(make_model: Callable[[], Any], train_steps: Callable[[Any], Any], n: int = 2, *,
                      seed: int | None = 0, deterministic: bool = True, rtol: float | None = None,
                      atol: float | None = None, mode: Mode | str = Mode.RAISE) -> DeterminismReport:
    """Train ``n`` times from the same seed; raise :class:`DeterminismError` (or warn) when the weights differ."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise UsageError(f"n must be an integer >= 2, got {n!r}")
    ledger = Ledger(Mode.parse(mode), DeterminismError)
    saved = RngState.capture()
    try:
        reference = _run(make_model, train_steps, seed, deterministic)
        diffs: list[TensorDiff] = []
        for run in range(2, n + 1):
            state = _run(make_model, train_steps, seed, deterministic)
            if state.keys() != reference.keys():
                missing = sorted(set(reference) ^ set(state))
                raise UsageError(f"run {run} of make_model() has other state_dict keys than run 1: {missing[:5]}")
            diffs += [_compare(name, run, state[name], reference[name], rtol, atol) for name in reference]
    finally:
        saved.restore()
    first = next((d for d in diffs if not d.passed), None)
    findings: tuple[Finding, ...] = ()
    if first is not None:
        differing = sorted({d.name for d in diffs if not d.passed})
        finding = NONDETERMINISTIC.finding(
            f"run {first.run} ends with other weights than run 1 from the same seed: first differing tensor "
            f"{first.name!r} (max |Δ| {first.max_abs:.3g}, {first.mismatch_fraction:.1%} of elements beyond "
            f"rtol={first.rtol:g}/atol={first.atol:g}; {len(differing)} tensor(s) differ); seed every generator "
            "(guards.seed_everything, deterministic_loader_kwargs) and look for modules with their own generator",
            subject=Subject(module=first.name),
            evidence={"run": first.run, "max_abs": first.max_abs, "max_rel": first.max_rel,
                      "mismatch_fraction": first.mismatch_fraction, "differing": differing[:20], "seed": seed})
        findings = (finding,)
    report = DeterminismReport(runs=n, compared=len(reference), diffs=tuple(diffs), first_mismatch=first,
                               findings=findings)
    try:
        ledger.report(*findings)
    except DeterminismError as exc:
        exc.report = report
        raise
    return report

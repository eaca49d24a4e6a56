"""Runtime guards and training-step profiling: the review checklist as gates a training loop cannot skip.

::

    from gapcheck import guards
    guards.seed_everything(42, deterministic=True)
    loader = DataLoader(ds, **guards.deterministic_loader_kwargs(42))
    monitor = guards.ScalerStepMonitor(scaler)             # call monitor.observe() after scaler.update()
    sched = guards.SteppedOnly(scheduler, monitor)         # the scheduler steps only after real optimizer steps
    with guards.GradientHealth(model, zero_fraction=0.8):  # NaN/Inf and all-zero gradients after every backward
        ...
    with guards.EvalGuard(model):                          # eval + no_grad; BN statistics unchanged; modes restored
        validate(model, val_loader)
    guards.assert_no_overlap(train_ds, val_ds)
    guards.input_contract(model, dtype=torch.float32, range=(-3, 3), layout="NCHW")
    with guards.trial_cleanup(model, optimizer): ...
    guards.check_determinism(make_model, train_steps, n=2)
    report = guards.profile_steps(train_step, loader, steps=20)

Every guard raises a :class:`GuardError` subclass (``mode="raise"``, the default) or logs and counts
(``mode="warn"``), and returns or keeps a small result object. Names load lazily (PEP 562): importing
this package, as the pytest plugin does at start-up, imports no torch.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY: dict[str, str] = {
    "Mode": "gapcheck.guards.base",
    "GuardError": "gapcheck.guards.base",
    "GradientError": "gapcheck.guards.base",
    "ScalerError": "gapcheck.guards.base",
    "NonFiniteError": "gapcheck.guards.base",
    "EvalModeError": "gapcheck.guards.base",
    "OverlapError": "gapcheck.guards.base",
    "InputContractError": "gapcheck.guards.base",
    "DeterminismError": "gapcheck.guards.base",
    "TrialLeakError": "gapcheck.guards.base",
    "StarvedLoopError": "gapcheck.guards.base",
    "seed_everything": "gapcheck.guards.seeding",
    "seed_worker": "gapcheck.guards.seeding",
    "deterministic_loader_kwargs": "gapcheck.guards.seeding",
    "RngState": "gapcheck.guards.seeding",
    "SeedReport": "gapcheck.guards.seeding",
    "GradientHealth": "gapcheck.guards.gradients",
    "GradientReport": "gapcheck.guards.gradients",
    "ScalerStepMonitor": "gapcheck.guards.scaler",
    "ScalerReport": "gapcheck.guards.scaler",
    "SteppedOnly": "gapcheck.guards.scaler",
    "EvalGuard": "gapcheck.guards.evaluation",
    "EvalReport": "gapcheck.guards.evaluation",
    "assert_no_overlap": "gapcheck.guards.overlap",
    "OverlapReport": "gapcheck.guards.overlap",
    "input_contract": "gapcheck.guards.inputs",
    "InputContract": "gapcheck.guards.inputs",
    "trial_cleanup": "gapcheck.guards.cleanup",
    "CleanupReport": "gapcheck.guards.cleanup",
    "check_determinism": "gapcheck.guards.determinism",
    "DeterminismReport": "gapcheck.guards.determinism",
    "profile_steps": "gapcheck.guards.profiling",
    "ProfileReport": "gapcheck.guards.profile_result",
    "Phase": "gapcheck.guards.phases",
    "TensorHealth": "gapcheck.guards.health",
    "HealthReport": "gapcheck.guards.health",
    "GuardKit": "gapcheck.guards.kit",
    "GuardsCallback": "gapcheck.guards.integrations.lightning",
    "AcceleratorGuards": "gapcheck.guards.integrations.accelerate",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gapcheck.guards' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


if TYPE_CHECKING:  # static checkers and IDEs see the real names
    from gapcheck.guards.base import (  # noqa: F401
        DeterminismError,
        EvalModeError,
        GradientError,
        GuardError,
        InputContractError,
        Mode,
        NonFiniteError,
        OverlapError,
        ScalerError,
        StarvedLoopError,
        TrialLeakError,
    )
    from gapcheck.guards.cleanup import CleanupReport, trial_cleanup  # noqa: F401
    from gapcheck.guards.determinism import DeterminismReport, check_determinism  # noqa: F401
    from gapcheck.guards.evaluation import EvalGuard, EvalReport  # noqa: F401
    from gapcheck.guards.gradients import GradientHealth, GradientReport  # noqa: F401
    from gapcheck.guards.health import HealthReport, TensorHealth  # noqa: F401
    from gapcheck.guards.inputs import InputContract, input_contract  # noqa: F401
    from gapcheck.guards.integrations.accelerate import AcceleratorGuards  # noqa: F401
    from gapcheck.guards.integrations.lightning import GuardsCallback  # noqa: F401
    from gapcheck.guards.kit import GuardKit  # noqa: F401
    from gapcheck.guards.overlap import OverlapReport, assert_no_overlap  # noqa: F401
    from gapcheck.guards.phases import Phase  # noqa: F401
    from gapcheck.guards.profile_result import ProfileReport  # noqa: F401
    from gapcheck.guards.profiling import profile_steps  # noqa: F401
    from gapcheck.guards.scaler import ScalerReport, ScalerStepMonitor, SteppedOnly  # noqa: F401
    from gapcheck.guards.seeding import RngState, SeedReport, deterministic_loader_kwargs, seed_everything, seed_worker  # noqa: F401

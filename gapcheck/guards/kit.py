"""GuardKit: the guards as one object with a lifecycle — what the ``gapcheck_guards`` pytest fixture hands a
test, and what the Lightning/Accelerate helpers build on.

``setup()`` saves the process's random state and seeds everything; every guard made through the kit is
closed by ``teardown()`` (hooks removed), which also restores the random state, so one test's seeding
and hooks never leak into the next. Profiles taken with :meth:`GuardKit.profile` are handed to ``sink``
(the pytest plugin prints them in its summary).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from gapcheck.guards.base import Mode

if TYPE_CHECKING:
    import torch

    from gapcheck.guards.evaluation import EvalGuard
    from gapcheck.guards.gradients import GradientHealth
    from gapcheck.guards.inputs import InputContract
    from gapcheck.guards.profile_result import ProfileReport
    from gapcheck.guards.scaler import ScalerStepMonitor, SteppedOnly


class GuardKit:
    def __init__(self, seed: int | None = 0, *, deterministic: bool = False, mode: Mode | str = Mode.RAISE,
                 name: str = "", sink: Callable[[str, "ProfileReport"], None] | None = None) -> None:
        self.seed = seed
        self.deterministic = deterministic
        self.mode = Mode.parse(mode)
        self.name = name
        self.sink = sink
        self.guards: list[Any] = []
        self.profiles: list[ProfileReport] = []
        self._saved: Any = None

    # -- lifecycle ---------------------------------------------------------------------------------
    def setup(self) -> "GuardKit":
        from gapcheck.guards.seeding import RngState, seed_everything

        self._saved = RngState.capture()
        if self.seed is not None:
            seed_everything(self.seed, deterministic=self.deterministic)
        return self

    def teardown(self) -> None:
        for guard in reversed(self.guards):
            for closer in ("detach", "close", "remove"):
                if hasattr(guard, closer):
                    getattr(guard, closer)()
                    break
        self.guards.clear()
        if self._saved is not None:
            self._saved.restore()
            self._saved = None

    def __enter__(self) -> "GuardKit":
        return self.setup()

    def __exit__(self, *exc: object) -> None:
        self.teardown()

    def _keep(self, guard: Any) -> Any:
        self.guards.append(guard)
        return guard

    # -- guards ------------------------------------------------------------------------------------
    def gradient_health(self, model: "torch.nn.Module", **options: Any) -> "GradientHealth":
        """A :class:`GradientHealth`, already attached (detached at teardown)."""
        from gapcheck.guards.gradients import GradientHealth

        health = GradientHealth(model, **{"mode": self.mode, **options})
        health.attach()
        return self._keep(health)

    def scaler_monitor(self, scaler: Any, optimizer: Any = None, **options: Any) -> "ScalerStepMonitor":
        from gapcheck.guards.scaler import ScalerStepMonitor

        return self._keep(ScalerStepMonitor(scaler, optimizer, **{"mode": self.mode, **options}))

    def stepped_only(self, scheduler: Any, monitor: "ScalerStepMonitor") -> "SteppedOnly":
        from gapcheck.guards.scaler import SteppedOnly

        return SteppedOnly(scheduler, monitor)

    def eval_guard(self, model: "torch.nn.Module", **options: Any) -> "EvalGuard":
        from gapcheck.guards.evaluation import EvalGuard

        return EvalGuard(model, **{"mode": self.mode, **options})

    def input_contract(self, model: "torch.nn.Module", **options: Any) -> "InputContract":
        from gapcheck.guards.inputs import input_contract

        return self._keep(input_contract(model, **{"mode": self.mode, **options}))

    def assert_no_overlap(self, first: Any, second: Any, **options: Any) -> Any:
        from gapcheck.guards.overlap import assert_no_overlap

        return assert_no_overlap(first, second, **{"mode": self.mode, **options})

    def check_determinism(self, make_model: Callable[[], Any], train_steps: Callable[[Any], Any], n: int = 2,
                          **options: Any) -> Any:
        from gapcheck.guards.determinism import check_determinism

        return check_determinism(make_model, train_steps, n, **{"seed": self.seed if self.seed is not None else 0,
                                                                 "mode": self.mode, **options})

    def profile(self, train_step: Callable[[Any], Any], loader: Iterable[Any], steps: int = 10,
                **options: Any) -> "ProfileReport":
        """:func:`profile_steps`; the report is also handed to the sink (the pytest summary)."""
        from gapcheck.guards.profiling import profile_steps

        report = profile_steps(train_step, loader, steps, **{"mode": self.mode, **options})
        self.profiles.append(report)
        if self.sink is not None:
            self.sink(self.name, report)
        return report

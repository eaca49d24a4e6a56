"""pytest plugin ``gapcheck-guards`` (registered through the ``pytest11`` entry point): guards for model tests.

- ``--gapcheck-profile`` (and the spelling ``--profile-gpu``, which adds CUDA activity when a GPU is
  present): every test's call phase runs under ``torch.profiler``; its events are sorted into the
  phases of a training step (data loading, host→device copy, forward/backward, optimizer, sync wait,
  other), attached to the test's report (a "gapcheck profile" section, and a ``gapcheck_profile`` user
  property that JUnit XML carries) and summarised at the end with each test's bottleneck.
- fixture ``gapcheck_guards``: a :class:`~gapcheck.guards.kit.GuardKit`, seeded with ``--gapcheck-seed``
  (default 0); its guards are closed and the random state restored after the test.
- fixture ``tensor_health``: a :class:`~gapcheck.guards.health.TensorHealth` — forward and backward
  finite, every trainable parameter receives a gradient.

Start-up cost is nil: this module imports pytest and gapcheck's light modules only; torch is imported
when a fixture is used or, with profiling on, when the first test runs.
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from gapcheck.guards.phases import PHASES, Phase, bottleneck_headline, bottleneck_of, phase_shares

_SHORT = {Phase.DATA: "data", Phase.H2D: "h2d", Phase.FORWARD_BACKWARD: "fwd/bwd", Phase.OPTIMIZER: "optim",
          Phase.SYNC_WAIT: "sync", Phase.OTHER: "other"}


@dataclass(frozen=True)
class TestProfile:
    """One test's (or one profile_steps call's) time by phase."""

    __test__ = False  # not a test class, despite the name

    nodeid: str
    source: str  # "test call (torch.profiler)" or "profile_steps"
    wall_s: float
    seconds: dict[Phase, float]

    @property
    def bottleneck(self) -> Phase:
        return bottleneck_of(self.seconds)

    def share(self, phase: Phase) -> float:
        return phase_shares(self.seconds)[phase]

    def headline(self) -> str:
        return bottleneck_headline(self.seconds)

    def as_json(self) -> str:
        return json.dumps({"source": self.source, "wall_ms": round(1e3 * self.wall_s, 3),
                           "ms": {p.value: round(1e3 * self.seconds[p], 3) for p in PHASES},
                           "bottleneck": self.bottleneck.value})

    def text(self) -> str:
        cells = "  ".join(f"{_SHORT[p]} {1e3 * self.seconds[p]:.1f} ms ({self.share(p):.0%})" for p in PHASES)
        return f"{self.source}, wall {1e3 * self.wall_s:.1f} ms\n{cells}\n{self.headline()}"


_PROFILES = pytest.StashKey[list]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gapcheck-guards", "gapcheck runtime guards and step-time profiling")
    group.addoption("--gapcheck-profile", action="store_true", default=False,
                    help="profile each test's call with torch.profiler and add a step-time breakdown to the report")
    group.addoption("--profile-gpu", action="store_true", default=False,
                    help="like --gapcheck-profile, with CUDA activity (kernels, copies) when a GPU is present")
    group.addoption("--gapcheck-seed", type=int, default=0, help="seed of the gapcheck_guards fixture (default 0)")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_PROFILES] = []


def _profiling(config: pytest.Config) -> bool:
    return bool(config.getoption("gapcheck_profile", False) or config.getoption("profile_gpu", False))


def _start_profiler(gpu: bool) -> Any:
    import torch
    from torch.profiler import ProfilerActivity, profile

    if getattr(torch.autograd.profiler, "_is_profiler_enabled", False):  # the test runs its own: do not nest
        return None
    activities = [ProfilerActivity.CPU]
    if gpu and torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    prof = profile(activities=activities)
    prof.__enter__()
    return prof


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    if not _profiling(item.config):
        return (yield)
    prof = _start_profiler(bool(item.config.getoption("profile_gpu")))
    start = time.perf_counter()
    try:
        return (yield)
    finally:
        wall = time.perf_counter() - start
        if prof is not None:
            _finish(item, prof, wall)


def _finish(item: pytest.Item, prof: Any, wall: float) -> None:
    from gapcheck.guards.phases import breakdown_from_events

    try:
        prof.__exit__(None, None, None)
        events = prof.events()
    except RuntimeError:  # the test's own profiler ended the session under ours
        events = None
    if not events:  # profilers do not nest: a test that profiles itself takes the session over
        item.add_report_section("call", "gapcheck profile", "not profiled: the test ran its own torch.profiler")
        return
    _record(item, TestProfile(item.nodeid, "test call (torch.profiler)", wall, breakdown_from_events(events, wall)))


def _record(item: pytest.Item, profile: TestProfile) -> None:
    item.config.stash[_PROFILES].append(profile)
    item.user_properties.append(("gapcheck_profile", profile.as_json()))
    item.add_report_section("call", "gapcheck profile", profile.text())


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    profiles: list[TestProfile] = config.stash.get(_PROFILES, [])
    if not profiles:
        return
    write = terminalreporter.write_line
    terminalreporter.section("gapcheck step-time breakdown")
    if config.getoption("profile_gpu", False) and not _cuda_seen():
        write("(--profile-gpu: no CUDA device here, CPU activity only)")
    width = min(70, max(len(p.nodeid) for p in profiles))
    write(f"{'test':<{width}}  {'wall ms':>9}  " + "  ".join(f"{_SHORT[p]:>7}" for p in PHASES) + "  bottleneck")
    for profile in profiles:
        shares = "  ".join(f"{profile.share(p):>7.0%}" for p in PHASES)
        write(f"{profile.nodeid[-width:]:<{width}}  {1e3 * profile.wall_s:>9.1f}  {shares}  {profile.bottleneck.label}")
    for profile in profiles:
        if profile.bottleneck is not Phase.FORWARD_BACKWARD:
            write(f"{profile.nodeid}: {profile.headline()}")


def _cuda_seen() -> bool:
    import sys

    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available())


@pytest.fixture
def gapcheck_guards(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Guards for a model test: seeded (``--gapcheck-seed``), closed and un-seeded after the test."""
    from gapcheck.guards.kit import GuardKit

    def sink(nodeid: str, report: Any) -> None:
        seconds = report.totals
        _record(request.node, TestProfile(nodeid, f"profile_steps ({report.steps} steps)", report.total, seconds))

    kit = GuardKit(seed=request.config.getoption("gapcheck_seed"), name=request.node.nodeid, sink=sink)
    kit.setup()
    try:
        yield kit
    finally:
        kit.teardown()


@pytest.fixture
def tensor_health() -> Any:
    """``tensor_health.check(model, x)``: finite forward and backward, a gradient for every trainable parameter."""
    from gapcheck.guards.health import TensorHealth

    return TensorHealth()

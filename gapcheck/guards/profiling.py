"""profile_steps: where a training step's time goes, phase by phase, and which phase to fix first.

Plain timers do the measuring, because they cost nothing and are exact for what they bracket:

- data loading: ``next()`` on the loader's iterator (a new epoch's iterator is started when one ends);
- host→device copy: moving the batch to ``device`` (only when ``device`` is given);
- forward/backward: ``train_step(batch)`` up to the optimizer's step, and between optimizer steps;
- optimizer: ``optimizer.step()``, bracketed by torch's global optimizer step hooks (any optimizer, no
  changes to the user's code);
- sync wait: on CUDA, the wait for device work still queued when ``train_step`` returned; with the
  profiler on, also the time the step blocked in synchronizations it issued itself (``.item()``,
  ``.cpu()``, ``synchronize``), taken out of the phase it happened in;
- other: ``train_step`` after its last optimizer step (logging, scheduler, metrics).

On CUDA every phase boundary synchronizes the device, so each phase is charged its own device time,
not its launch time. ``torch.profiler`` runs only when asked (``profiler=True`` or a ``trace`` path):
it adds the sync attribution above, a table of the top ops, and a Chrome trace with the phases
labelled (``gapcheck/data``, ``gapcheck/h2d``, ``gapcheck/step``) — at the price of its own overhead.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gapcheck.codes.guards import INPUT_STARVED
from gapcheck.errors import UsageError, one_line
from gapcheck.findings import Finding, Subject
from gapcheck.guards.base import GuardError, Ledger, Mode, StarvedLoopError
from gapcheck.guards.phases import _SYNC_NAMES, PHASES, Phase
from gapcheck.guards.profile_result import ProfileReport, bottleneck_finding
from gapcheck.progress import NullProgress, ProgressReporter

if TYPE_CHECKING:
    import torch


class _OptimizerClock:
    """Global optimizer step hooks that time every ``optimizer.step()`` inside the current step."""

    def __init__(self, sync: Callable[[], None]) -> None:
        self.sync = sync
        self.spans: list[tuple[float, float]] = []
        self._start = 0.0
        self._handles: list[Any] = []

    def __enter__(self) -> "_OptimizerClock":
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self._handles = [register_optimizer_step_pre_hook(self._pre), register_optimizer_step_post_hook(self._post)]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()

    def _pre(self, *_: Any) -> None:
        self.sync()
        self._start = time.perf_counter()

    def _post(self, *_: Any) -> None:
        self.sync()
        self.spans.append((self._start, time.perf_counter()))


def move_to(batch: Any, device: "torch.device", non_blocking: bool) -> Any:
    """``batch`` with every tensor in it (nested tuples, lists, dicts) moved to ``device``."""
    import torch

    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        return {key: move_to(value, device, non_blocking) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        moved = [move_to(value, device, non_blocking) for value in batch]
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    return batch


def _batches(loader: Iterable[Any]) -> Generator[tuple[Any, bool], None, None]:
    """Endless (batch, new_epoch) pairs: a fresh iterator whenever one ends; an empty loader is an error."""
    while True:
        empty = True
        for index, batch in enumerate(loader):
            empty = False
            yield batch, index == 0
        if empty:
            raise UsageError("the loader yielded no batch")


def _label(enabled: bool, name: str) -> contextlib.AbstractContextManager[Any]:
    if not enabled:
        return contextlib.nullcontext()
    from torch.autograd.profiler import record_function

    return record_function(name)


def _one_step(train_step: Callable[[Any], Any], batches: Iterator[tuple[Any, bool]], device: Any, non_blocking: bool,
              sync: Callable[[], None], clock: _OptimizerClock, labels: bool, index: int = 0,
              warmup: int = 0) -> tuple[list[float], bool]:
    where = f"step {index + 1} ({'warm-up' if index < warmup else 'measured'})"
    t0 = time.perf_counter()
    with _label(labels, "gapcheck/data"):
        try:
            batch, new_epoch = next(batches)
        except UsageError:
            raise
        except Exception as exc:  # a corrupt sample, a worker that died: the user's data, not gapcheck
            # one_line reads a DataLoader worker's wrapped error ("Caught X in DataLoader worker ...") by its last line
            raise UsageError(f"the loader failed while profiling, at {where}: {one_line(exc, limit=200)}") from exc
    t1 = time.perf_counter()
    if device is not None:
        with _label(labels, "gapcheck/h2d"):
            batch = move_to(batch, device, non_blocking)
            sync()
    t2 = time.perf_counter()
    clock.spans = []
    with _label(labels, "gapcheck/step"):
        try:
            train_step(batch)
        except Exception as exc:  # the user's own error stays theirs; the note says where profiling was
            add_note = getattr(exc, "add_note", None)  # Python >= 3.11
            if add_note is not None:
                add_note(f"gapcheck.guards.profile_steps: raised by train_step at {where}")
            raise
    t3 = time.perf_counter()
    sync()
    t4 = time.perf_counter()
    optimizer = sum(end - start for start, end in clock.spans)
    other = t3 - clock.spans[-1][1] if clock.spans else 0.0
    seconds = {Phase.DATA: t1 - t0, Phase.H2D: t2 - t1 if device is not None else 0.0,
               Phase.FORWARD_BACKWARD: max(0.0, t3 - t2 - optimizer - other), Phase.OPTIMIZER: optimizer,
               Phase.SYNC_WAIT: t4 - t3, Phase.OTHER: other}
    return [seconds[p] for p in PHASES], new_epoch


def _device_sync(device: "torch.device | None") -> Callable[[], None]:
    import torch

    if device is not None and device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def profile_steps(train_step: Callable[[Any], Any], loader: Iterable[Any], steps: int = 20, *, warmup: int = 2,
                  device: "str | torch.device | None" = None, non_blocking: bool = True, profiler: bool | None = None,
                  trace: str | Path | None = None, max_data_share: float | None = None, top_ops: int = 10,
                  mode: Mode | str = Mode.RAISE, progress: ProgressReporter | None = None) -> ProfileReport:
    """Run ``warmup + steps`` steps of ``train_step(batch)`` over ``loader`` and break each measured step into phases.

    ``device``: move each batch there first (timed as the host→device copy). ``trace``: write a Chrome trace
    (turns the profiler on). ``max_data_share``: data loading + copy above this share of step time is a
    violation (:class:`StarvedLoopError`, or a warning with ``mode="warn"``); without it the bottleneck is
    only reported. The returned :class:`ProfileReport` renders as a table, JSON and HTML.
    """
    import torch

    _check_arguments(loader, steps, warmup, max_data_share)
    ledger = Ledger(Mode.parse(mode), StarvedLoopError)
    if trace is not None:
        from gapcheck.atomic import check_writable

        check_writable(trace, "trace")  # before any work
    target = torch.device(device) if device is not None else None
    use_profiler = bool(profiler) or trace is not None
    measured, epochs, prof = _measure(train_step, loader, steps, warmup, target, non_blocking, use_profiler,
                                      progress or NullProgress())
    ops: tuple[tuple[str, float, int], ...] = ()
    if prof is not None:
        _move_sync_wait(prof.events(), measured)
        ops = _top_ops(prof.events(), top_ops)
        if trace is not None:
            _export_trace(prof, Path(trace))
    report = ProfileReport(step_times=tuple(tuple(s) for s in measured), warmup=warmup,
                           device=str(target or "cpu"), method="timers+profiler" if prof is not None else "timers",
                           trace_path=str(trace) if trace is not None else None, top_ops=ops, epochs_started=epochs)
    report = dataclasses.replace(report, findings=_findings(report, max_data_share))
    try:
        ledger.report(*report.findings)
    except GuardError as exc:
        exc.report = report  # the numbers travel with the error
        raise
    return report


def _check_arguments(loader: Any, steps: int, warmup: int, max_data_share: float | None) -> None:
    if any(isinstance(n, bool) or not isinstance(n, int) for n in (steps, warmup)) or steps < 1 or warmup < 0:
        raise UsageError(f"steps must be an integer >= 1 and warmup an integer >= 0, got steps={steps!r}, "
                         f"warmup={warmup!r}")
    if not isinstance(loader, Iterable):
        raise UsageError(f"loader must be iterable (a DataLoader, a list of batches), got {type(loader).__name__}")
    if max_data_share is not None and not 0.0 < max_data_share < 1.0:
        raise UsageError(f"max_data_share must be within (0, 1), got {max_data_share}")


def _measure(train_step: Callable[[Any], Any], loader: Iterable[Any], steps: int, warmup: int,
             target: "torch.device | None", non_blocking: bool, use_profiler: bool,
             reporter: ProgressReporter) -> tuple[list[list[float]], int, Any]:
    """Seconds per phase of each measured step, the epochs started, and the (finished) profiler or None."""
    sync = _device_sync(target)
    batches = _batches(loader)
    measured: list[list[float]] = []
    epochs = 0
    reporter.start("profiling training steps", warmup + steps)
    # closing the generator drops the loader's iterator now, so DataLoader workers stop now (also on error)
    with contextlib.closing(batches), _OptimizerClock(sync) as clock:
        for index in range(warmup):
            epochs += _one_step(train_step, batches, target, non_blocking, sync, clock, False, index, warmup)[1]
            reporter.advance()
        with _profiler(use_profiler, target) as prof:
            for index in range(warmup, warmup + steps):
                seconds, new_epoch = _one_step(train_step, batches, target, non_blocking, sync, clock, use_profiler,
                                               index, warmup)
                measured.append(seconds)
                epochs += new_epoch
                reporter.advance()
    reporter.finish()
    return measured, epochs, prof


def _findings(report: ProfileReport, max_data_share: float | None) -> tuple[Finding, ...]:
    """The bottleneck, and a starved input pipeline when data loading + copy exceed ``max_data_share``."""
    findings = [bottleneck_finding(report)]
    starved = report.shares[Phase.DATA] + report.shares[Phase.H2D]
    if max_data_share is not None and starved > max_data_share:
        findings.append(INPUT_STARVED.finding(
            f"data loading and the host→device copy take {starved:.0%} of step time (limit {max_data_share:.0%}): "
            f"{Phase.DATA.advice}", subject=Subject(step=Phase.DATA.value),
            evidence={"share": starved, "limit": max_data_share, "steps": report.steps}))
    return tuple(findings)


@contextlib.contextmanager
def _profiler(enabled: bool, device: "torch.device | None") -> Iterator[Any]:
    if not enabled:
        yield None
        return
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device is not None and device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        yield prof


def _step_events(events: Any) -> list[Any]:
    return sorted((e for e in events if e.name == "gapcheck/step"), key=lambda e: e.time_range.start)


def _move_sync_wait(events: Any, measured: list[list[float]]) -> None:
    """Move the time each step blocked in its own synchronizations into sync wait (forward/backward first)."""
    steps = _step_events(events)
    index = {id(event): i for i, event in enumerate(steps)}
    fb, other, sync = (PHASES.index(p) for p in (Phase.FORWARD_BACKWARD, Phase.OTHER, Phase.SYNC_WAIT))
    for event in events:
        if event.name not in _SYNC_NAMES:
            continue
        ancestor = event.cpu_parent
        while ancestor is not None and id(ancestor) not in index:
            ancestor = ancestor.cpu_parent
        if ancestor is None or index[id(ancestor)] >= len(measured):
            continue
        row = measured[index[id(ancestor)]]
        wait = event.self_cpu_time_total / 1e6
        for phase in (fb, other):
            taken = min(wait, row[phase])
            row[phase] -= taken
            row[sync] += taken
            wait -= taken


def _top_ops(events: Any, limit: int) -> tuple[tuple[str, float, int], ...]:
    totals: dict[str, list[float]] = {}
    for event in events:
        if event.name.startswith("gapcheck/"):
            continue
        entry = totals.setdefault(event.name, [0.0, 0])
        entry[0] += event.self_cpu_time_total / 1e3
        entry[1] += 1
    ranked = sorted(totals.items(), key=lambda item: -item[1][0])[:limit]
    return tuple((name, round(ms, 3), int(calls)) for name, (ms, calls) in ranked)


def _export_trace(prof: Any, path: Path) -> None:
    """The Chrome trace, written atomically (temp file in the same folder, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        prof.export_chrome_trace(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

"""Worker processes that survive a stage killing them.

A stage may kill the process that runs it: ``os._exit`` in user code, a segfault in a C
extension, the OOM killer. In-process that ends gapcheck with exit 7 or 139 and no message;
in a ``ProcessPoolExecutor`` the whole pool breaks with a bare ``BrokenProcessPool`` and the
culprit is unknown. So each worker here is one process with its own pipe, fed one chunk at a
time. Before every stage call the worker writes (sample index, stage index) into two shared
integers; when the process dies the parent reads them, records that stage on that sample as
failed ("worker died", with the exit status), sends the rest of the chunk to a fresh process
(which skips the stage on that sample only) and goes on. Records travel back in small batches
(whatever finished in the last FLUSH_S, and the rest with the chunk's end): one message per sample
cost the worker and the parent a pipe write, a wake-up and a read each. A worker that dies loses only the
records it had not sent yet; those samples are still pending and run again on its replacement.

Processes start from a forkserver: never a fork of a parent that holds torch/OpenMP threads.
"""
from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from typing import Any

from gapcheck.errors import BackendError, GapcheckError
from gapcheck.preprocess.stages import StageSpec, resolve
from gapcheck.preprocess.worker import ANALYSING, SampleRecord, WorkerOptions, WorkItem, init_worker, process_sample

logger = logging.getLogger(__name__)

IDLE = -1
SHUTDOWN_S = 5.0  # a worker asked to stop gets this long before it is terminated
GIVE_UP_AFTER = 3  # a stage that killed its worker on this many samples and never succeeded is not run again
FLUSH_S = 0.2  # a worker sends the records it has at least this often (progress stays live on slow stages)


@dataclass(frozen=True)
class WorkerDeath:
    """A worker process died while running ``stage`` on ``sample``."""

    stage: str
    sample: str
    exitcode: int | None

    @property
    def cause(self) -> str:
        return f"worker died ({describe_exit(self.exitcode)}) while running this stage on this sample"


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "exit status unknown"
    if exitcode < 0:
        try:
            return f"killed by signal {-exitcode} {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit status {exitcode}"


def _serve(conn: Connection, marker: Any, specs: tuple[StageSpec, ...], options: WorkerOptions) -> None:
    """The worker's loop: receive a chunk, send its records in batches, the last with "done"; None stops it."""
    init_worker(options.max_pixels)

    def mark(index: int, stage: int) -> None:
        marker[0], marker[1] = index, stage

    stages = None
    while True:
        chunk = conn.recv()
        if chunk is None:
            return
        try:
            if stages is None:
                stages = [(spec, resolve(spec)) for spec in specs]
            batch, flushed = [], time.monotonic()
            for item in chunk:
                batch.append(process_sample(stages, item, options, mark))
                if time.monotonic() - flushed >= FLUSH_S:
                    conn.send(("records", batch))
                    batch, flushed = [], time.monotonic()
            mark(IDLE, IDLE)
            conn.send(("done", (batch, time.process_time())))  # the last records; this process's CPU seconds so far
        except Exception as exc:  # noqa: BLE001 - a stage that cannot be loaded: the parent raises it
            mark(IDLE, IDLE)
            conn.send(("error", exc if isinstance(exc, GapcheckError) else RuntimeError(f"{type(exc).__name__}: {exc}")))


class _Worker:
    """One supervised process, its pipe, its marker and the chunk it is working on."""

    def __init__(self, context: Any, specs: tuple[StageSpec, ...], options: WorkerOptions) -> None:
        self.marker = context.RawArray("q", [IDLE, IDLE])
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, self.marker, specs, options), daemon=True)
        self.process.start()
        child.close()
        self.pending: dict[int, WorkItem] = {}  # sent, no record back yet
        self.busy = False  # a chunk was sent and its "done" has not come back
        self.cpu_seconds = 0.0  # as last reported by the process (lost for a process that dies mid-chunk)

    def send(self, chunk: tuple[WorkItem, ...]) -> None:
        self.pending = {item.index: item for item in chunk}
        self.busy = True
        self.conn.send(chunk)

    def ask_to_stop(self) -> None:
        """Ask an idle worker to exit; a busy one (the run was interrupted or failed) is terminated at once."""
        if self.busy and self.process.is_alive():
            self.process.terminate()
        with contextlib.suppress(OSError, ValueError):  # already gone
            self.conn.send(None)

    def stop(self) -> None:
        """Wait for the worker to exit (after :meth:`ask_to_stop`); terminated when it does not in time."""
        self.process.join(SHUTDOWN_S)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(SHUTDOWN_S)
        self.conn.close()


def process_limit() -> int:
    """Most worker processes one machine runs: twice its usable cores (stages may wait on I/O)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return 2 * max(1, cores)


class SupervisedPool:
    """Runs chunks of work items on ``workers`` supervised processes (see the module docstring)."""

    def __init__(self, specs: tuple[StageSpec, ...], options: WorkerOptions, workers: int) -> None:
        self.specs, self.options = specs, options
        self.context = multiprocessing.get_context("forkserver")
        # A queue feeds the processes, so more chunks than processes is fine; more processes than cores is not
        # (``--workers 100000`` would start one process per image).
        processes = max(1, min(workers, process_limit()))
        self.workers = [_Worker(self.context, specs, options) for _ in range(processes)]
        self.deaths: list[WorkerDeath] = []
        self._succeeded: set[str] = set()  # stages that produced an output at least once
        self._given_up: dict[str, str] = {}  # stage -> why it is no longer run (each death costs a process start)
        self._retired_cpu = 0.0

    @property
    def cpu_seconds(self) -> float:
        """CPU seconds the worker processes reported (user + system), replaced ones included."""
        return self._retired_cpu + sum(w.cpu_seconds for w in self.workers)

    def run(self, chunks: list[tuple[WorkItem, ...]], advance: Callable[[int], None]) -> list[SampleRecord]:
        queue, records = deque(chunks), []
        try:
            while queue or any(w.busy for w in self.workers):
                for worker in self.workers:
                    if not worker.busy and queue:
                        worker.send(self._without_given_up(queue.popleft()))
                busy = [w for w in self.workers if w.busy]
                ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy])
                for worker in busy:
                    if worker.conn in ready or worker.process.sentinel in ready:
                        records += self._collect(worker, queue, advance)
        finally:
            for worker in self.workers:  # all asked first: they tear down (torch & co.) side by side
                worker.ask_to_stop()
            for worker in self.workers:
                worker.stop()
        return records

    def _without_given_up(self, chunk: tuple[WorkItem, ...]) -> tuple[WorkItem, ...]:
        if not self._given_up:
            return chunk
        return tuple(replace(item, dead=item.dead + tuple((stage, why) for stage, why in self._given_up.items()
                                                          if stage not in dict(item.dead))) for item in chunk)

    def _collect(self, worker: _Worker, queue: deque, advance: Callable[[int], None]) -> list[SampleRecord]:
        """Read what ``worker`` sent; when its process has died, requeue its unfinished work and replace it."""
        records, error = [], None
        try:
            while worker.conn.poll():
                kind, value = worker.conn.recv()
                if kind == "records":
                    records += self._received(worker, value, advance)
                elif kind == "done":
                    records += self._received(worker, value[0], advance)
                    worker.cpu_seconds = value[1]
                    worker.pending.clear()
                    worker.busy = False
                else:
                    error = value
                    break
        except (EOFError, OSError):
            pass  # the process is gone; handled below
        if error is not None:
            raise error
        if not worker.process.is_alive():
            self._replace(worker, queue)
        return records

    def _received(self, worker: _Worker, batch: list[SampleRecord], advance: Callable[[int], None]) -> list[SampleRecord]:
        for record in batch:
            worker.pending.pop(record.index, None)
            self._succeeded.update(o.stage for o in record.stages if o.ok)
        if batch:
            advance(len(batch))
        return batch

    def _replace(self, worker: _Worker, queue: deque) -> None:
        worker.process.join()
        worker.conn.close()
        self._retired_cpu += worker.cpu_seconds
        self.workers[self.workers.index(worker)] = _Worker(self.context, self.specs, self.options)
        if worker.busy and worker.pending:
            queue.appendleft(self._after_death(worker))

    def _after_death(self, worker: _Worker) -> tuple[WorkItem, ...]:
        """Record which stage killed the worker on which sample; the unfinished items, that stage skipped there."""
        index, stage = worker.marker[0], worker.marker[1]
        exitcode = worker.process.exitcode
        item = worker.pending.get(index)
        if item is None or stage < 0:
            what = "while loading the stages" if stage == IDLE else \
                "in gapcheck's own analysis of a sample" if stage == ANALYSING else "outside any stage"
            raise BackendError(f"a preprocess-audit worker process died {what} ({describe_exit(exitcode)})"
                               + (f" on {item.path}" if item is not None else ""))
        death = WorkerDeath(self.specs[stage].name, item.path, exitcode)
        self.deaths.append(death)
        if death.stage not in self._succeeded and sum(d.stage == death.stage for d in self.deaths) >= GIVE_UP_AFTER:
            self._given_up[death.stage] = (f"not run: the stage killed its worker on each of the first {GIVE_UP_AFTER} "
                                           f"samples it ran on ({describe_exit(exitcode)})")
        logger.warning("stage %s killed its worker on %s (%s)", death.stage, death.sample, describe_exit(exitcode))
        rest = [replace(item, dead=item.dead + ((death.stage, death.cause),))]
        return tuple(rest + [i for k, i in sorted(worker.pending.items()) if k != index])

"""``run_nightly``: open the bundle, take the lock, check every endpoint, record, alert.

Order matters for cron: the golden bundle's manifest is checked first and its files' SHA256 run on a thread
(:func:`gapcheck.golden.bundle.open_bundle`); the history's lock is taken (bounded wait, exit 3; a bad bundle is
still exit 2); the first endpoint's readiness and requests go out while the hashes finish, and nothing is
compared, and the history not opened, before the bundle is verified — a bad bundle is exit 2 with nothing
recorded. The history is opened (and the run row written) on a thread once the bundle is verified, while the
first endpoint's requests are in flight; it is closed on a thread once the night is committed (its WAL
checkpoint is not on the caller's path). Then each endpoint is classified against its own history, recorded in
one transaction, and alerted on. A crash between endpoints leaves every endpoint recorded so far intact; the run
row then lacks ``finished_at``.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from gapcheck.errors import GapcheckError, UsageError
from gapcheck.findings import Finding, Subject, Verdict
from gapcheck.golden.bundle import GoldenBundle, PendingBundle, open_bundle
from gapcheck.golden.stamps import Stamps
from gapcheck.groups import InputSource, TritonTarget, check_number
from gapcheck.nightly import alerts as webhook
from gapcheck.nightly.config import (
    DEFAULT_LOCK_WAIT_S,
    DEFAULT_MAX_IN_FLIGHT,
    MAX_IN_FLIGHT,
    MAX_LOCK_WAIT_S,
    MAX_PARALLEL_ENDPOINTS,
    EndpointSpec,
    WebhookFormat,
    check_webhook_url,
)
from gapcheck.nightly.history import AlertRecord, EndpointRecord, History, OutputRecord, closed_behind
from gapcheck.nightly.lock import HistoryLock, LockTimeout
from gapcheck.nightly.probe import EndpointOutcome, check_endpoint, on_thread
from gapcheck.nightly.result import EndpointReport, NightlyResult
from gapcheck.nightly.status import DriftParameters, Status, Tonight, classify

logger = logging.getLogger(__name__)

TREND_NIGHTS = 29  # earlier nights drawn beside tonight in the report's trend chart
HISTORY_WINDOW = 60  # nights of one endpoint read back to classify tonight (drift needs the segment since a change)


@dataclass(frozen=True)
class WebhookSettings:
    url: str = field(repr=False)
    format: WebhookFormat = WebhookFormat.generic
    secret_env: str | None = None
    timeout_s: float = 10.0
    attempts: int = 3
    report_url: str | None = None
    deadline_s: float = 30.0  # every attempt of one alert together (a receiver that trickles never times out)

    def __post_init__(self) -> None:
        check_webhook_url(self.url)  # before any work: exit 2, nothing recorded, the URL's path never shown
        if self.report_url is not None:  # a link that carries a credential would post it in every alert
            webhook.check_report_url(self.report_url, "report_url")

    @property
    def secret(self) -> str | None:
        if not self.secret_env:
            return None
        value = os.environ.get(self.secret_env)
        if not value:
            raise UsageError(f"the webhook secret variable {self.secret_env} is not set or empty")
        return value


@dataclass(frozen=True, init=False)
class NightlyRequest:
    """One night: the bundle, the endpoints, how to reach them (``target``: headers, TLS, timeout, retries and the
    per-endpoint deadline — its URL/model fields are unused, each endpoint names its own), the history and alerts.
    ``text`` (its ``text_samples``
    and ``tokenizer``): the tokenizer in front of the endpoints is checked against a text bundle too
    (:mod:`gapcheck.nightly.text`)."""

    golden: Path
    endpoints: tuple[EndpointSpec, ...]
    history: Path
    target: TritonTarget
    webhook: WebhookSettings | None = None
    lock_wait_s: float = DEFAULT_LOCK_WAIT_S
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    drift: DriftParameters = DriftParameters()
    audit: bool = True
    text: InputSource | None = None
    parallel_endpoints: int = 1

    def __init__(self, golden: Path, endpoints: tuple[EndpointSpec, ...], history: Path, *,
                 target: TritonTarget | None = None, webhook: WebhookSettings | None = None,
                 lock_wait_s: float = DEFAULT_LOCK_WAIT_S, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 drift: DriftParameters = DriftParameters(), audit: bool = True,
                 text: InputSource | None = None, parallel_endpoints: int = 1) -> None:
        target = target or TritonTarget()
        check_number(lock_wait_s, "--lock-wait", high=MAX_LOCK_WAIT_S)
        check_number(max_in_flight, "--max-in-flight", low=1, high=MAX_IN_FLIGHT)
        check_number(parallel_endpoints, "--parallel-endpoints", low=1, high=MAX_PARALLEL_ENDPOINTS)
        if text is not None and text.text_samples is None:
            raise UsageError("the tokenizer check needs --text-samples FILE[:field] and --tokenizer hf:PATH")
        for name, value in (("golden", Path(golden)), ("endpoints", tuple(endpoints)), ("history", Path(history)),
                            ("target", target), ("webhook", webhook), ("lock_wait_s", lock_wait_s),
                            ("max_in_flight", max_in_flight), ("drift", drift), ("audit", audit), ("text", text),
                            ("parallel_endpoints", int(parallel_endpoints))):
            object.__setattr__(self, name, value)

    @property
    def retries(self) -> int:
        return self.target.retries

    @property
    def deadline_s(self) -> float:
        return self.target.deadline_s


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


_CHANGED = {"golden_hash": "the golden bundle (its manifest's SHA256)"}  # how a change is said; others by their key


def _changes_findings(name: str, report_changes) -> list[Finding]:
    from gapcheck.codes.nightly import DEPLOYMENT_CHANGED

    return [DEPLOYMENT_CHANGED.finding(f"{name}: {_CHANGED.get(ch.what, ch.what)} changed from {ch.before} to "
                                       f"{ch.after}",
                                       subject=Subject(endpoint=name, other=ch.what),
                                       evidence={"what": ch.what, "before": ch.before, "after": ch.after})
            for ch in report_changes]


def _report(outcome: EndpointOutcome, history: History, bundle: GoldenBundle, drift: DriftParameters,
            started_at: str, earlier: list[EndpointRecord] | None = None) -> EndpointReport:
    """``earlier``: the endpoint's earlier nights, when they were read already (else they are read here)."""
    from gapcheck.codes.nightly import DRIFTING, RECOVERED

    if earlier is None:
        earlier = history.endpoint_history(outcome.spec.name, HISTORY_WINDOW)
    tonight = Tonight(reachable=outcome.reachable, gap=outcome.gap, served_version=outcome.served_version,
                      config_hash=outcome.config_hash, golden_hash=bundle.bundle_hash,
                      error_ratios={c.output: c.error_ratio for c in outcome.outputs}, precision=outcome.precision)
    c = classify(tonight, earlier, drift)
    name = outcome.spec.name
    findings = list(outcome.findings) + _changes_findings(name, c.changes)
    for output in c.drifting_outputs:
        comparison = next(x for x in outcome.outputs if x.output == output)
        findings.append(DRIFTING.finding(
            f"{name} output {output}: the error is creeping up (CUSUM {c.cusum[output]:.3g} > {drift.threshold:g}); "
            f"tonight at {comparison.error_ratio:.0%} of the tolerance",
            subject=Subject(endpoint=name, output=output),
            evidence={"cusum": c.cusum[output], "error_ratio": comparison.error_ratio,
                      "max_abs_error": comparison.max_abs, "baseline_runs": drift.baseline_runs,
                      "slack": drift.slack, "threshold": drift.threshold}))
    if c.status is Status.RECOVERED:
        swapped = any(ch.what == "golden_hash" for ch in c.changes)
        findings.append(RECOVERED.finding(f"{name} passes again (last status {c.previous_status})" + (
            "; against another golden bundle than the last night's: the bundle may have changed the verdict, not "
            "the deployment" if swapped else ""),
                                          subject=Subject(endpoint=name), evidence={"previous": c.previous_status}))
    misconfigured = _model_unknown(outcome, history, findings)
    last_pass, since = _since(earlier, c.status, started_at)
    trend = tuple((r.started_at, r.status, {o.output: o.error_ratio for o in r.outputs}) for r in earlier[-TREND_NIGHTS:])
    trend += ((started_at, c.status.value, {x.output: x.error_ratio for x in outcome.outputs}),)
    return EndpointReport(outcome, c, tuple(findings), last_pass_at=last_pass, failing_since=since, trend=trend,
                          misconfigured=misconfigured)


def _model_unknown(outcome: EndpointOutcome, history: History, findings: list[Finding]) -> bool:
    """Whether a model the server does not have is a misspelt name in the config (this endpoint never answered a
    night for this model: exit 2) rather than a model the deployment removed (it did, however long ago: an outage,
    exit 3, said so in its finding). Asked of the whole history, only on such a night."""
    from gapcheck.codes.nightly import MODEL_UNKNOWN

    if not outcome.model_unknown:
        return False
    reached = history.last_reachable(outcome.spec.name, outcome.spec.model, outcome.spec.version)
    if reached is None:
        return True
    for i, f in enumerate(findings):
        if f.code == MODEL_UNKNOWN.code:
            findings[i] = dataclasses.replace(
                f, message=f"{f.message}; it was served on {reached}: the deployment no longer has it",
                evidence={**f.evidence, "last_reachable_at": reached})
    return False


def _since(earlier: list[EndpointRecord], status: Status, tonight: str) -> tuple[str | None, str | None]:
    """When the endpoint last passed, and when the current run of bad nights began (None when tonight is good)."""
    last_pass = next((r.started_at for r in reversed(earlier) if r.verdict == "pass"), None)
    if status not in (Status.NEW_FAILURE, Status.KNOWN_FAILURE, Status.UNREACHABLE):
        return last_pass, None
    since = tonight
    for record in reversed(earlier):
        if record.verdict == "pass":
            break
        since = record.started_at
    return last_pass, since


def _record(report: EndpointReport, run_id: str, started_at: str, bundle: GoldenBundle) -> EndpointRecord:
    o = report.outcome
    outputs = tuple(OutputRecord(x.output, "pass" if x.passed else "gap", x.max_abs, x.max_rel, x.mean_abs,
                                 x.mismatch_fraction, x.error_ratio, x.rtol, x.atol,
                                 tuple(w.as_dict() for w in x.worst), report.classification.cusum.get(x.output))
                    for x in o.outputs)
    # Unreachable is recorded with verdict "gap": never a pass, whatever reads the history.
    verdict = Verdict.GAP.value if not o.reachable else report.verdict.value
    return EndpointRecord(run_id=run_id, endpoint=o.spec.name, url=o.spec.display_url, model=o.spec.model,
                          requested_version=o.spec.version, served_version=o.served_version,
                          config_hash=o.config_hash, golden_hash=bundle.bundle_hash, status=report.status.value,
                          verdict=verdict, headline=report.headline, error=o.error, samples=o.samples,
                          started_at=started_at, seconds=o.seconds.get("total", 0.0), timings=dict(o.seconds),
                          outputs=outputs, precision=o.precision)


def _alert(report: EndpointReport, settings: WebhookSettings, run_id: str, history: History) -> webhook.Delivery:
    alert = webhook.Alert(endpoint=report.name, url=report.outcome.spec.display_url, status=report.status.value,
                          headline=report.headline, worst_outputs=tuple(report.worst_outputs()[:5]), run_id=run_id,
                          report_url=settings.report_url, last_pass_at=report.last_pass_at,
                          failing_since=report.failing_since)
    delivery = webhook.send(alert, settings.url, settings.format, secret=settings.secret,
                            timeout_s=settings.timeout_s, attempts=settings.attempts, deadline_s=settings.deadline_s)
    history.add_alert(AlertRecord(run_id, report.name, report.status.value, delivery.target, delivery.delivered,
                                  delivery.attempts, delivery.error, _now()))
    return delivery


def run_nightly(request: NightlyRequest, *, on_endpoint: Callable[[EndpointReport], None] | None = None) -> NightlyResult:
    """Check every endpoint of ``request`` against the golden bundle and record the night (see the module docstring).

    The bundle's SHA256 runs on a thread while the first endpoint's readiness and first requests go out
    (:func:`gapcheck.golden.bundle.open_bundle`); nothing is compared, and the history is not even opened, before the
    bundle is verified: a bad bundle is exit 2 with nothing recorded, whatever the endpoint did."""
    _check_request(request)
    start = time.monotonic()
    # The manifest is checked now; the files' hashes on a thread, unless a stamp (GAPCHECK_VERIFY_STAMPS=0: never)
    # says these very files were verified before (gapcheck.golden.stamps: where a stamp may stand, and where not)
    pending = open_bundle(request.golden, stamps=Stamps.default())
    _check_output_map(request, pending)
    timings = {"open_golden": time.monotonic() - start}
    if request.text is not None:
        from gapcheck.nightly.text import check_text_bundle

        check_text_bundle(pending.manifest, request.golden, request.text)  # exit 2 before the lock, nothing recorded
        timings["text_load"] = time.monotonic() - start - timings["open_golden"]
    with ExitStack() as stack:
        try:
            lock = stack.enter_context(HistoryLock(request.history, request.lock_wait_s))
        except LockTimeout:
            pending.result()  # a bad bundle is still exit 2, not a busy lock
            raise
        timings["lock_wait"] = lock.waited_s
        run_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:8]
        started_at = _now()
        first = request.endpoints[0]
        opening = _Opening(request, pending, run_id, started_at)  # once the bundle is verified, beside the requests
        rest = stack.enter_context(_Rest(request, pending))  # with --parallel-endpoints: beside the first, once verified
        try:
            first_outcome = _first_check(first, pending, request)  # beside the hashes; a bad bundle ends it at once
            bundle = _hashed_before_a_gap(pending.result(), first_outcome, request.golden)
            timings["verify_golden"] = time.monotonic() - start
            golden_findings = _text_check(bundle, request, timings)  # a tokenizer that cannot load: nothing recorded
            # Closed behind this call once the night is committed: its WAL checkpoint is not on the caller's path.
            history = stack.enter_context(closed_behind(opening.result()))
        except BaseException:
            opening.abandon()
            raise
        night = _Night(request, history, bundle, run_id, on_endpoint)
        night.add(first, first_outcome, started_at, opening.earlier)
        for spec, outcome, endpoint_started in rest.outcomes(bundle):
            night.add(spec, outcome, endpoint_started)
        timings["total"] = time.monotonic() - start
        result = NightlyResult(run_id=run_id, started_at=started_at, golden=night.bundle.summary(),
                               history=str(request.history), endpoints=tuple(night.reports),
                               alerts=tuple(night.deliveries), extra_findings=tuple(night.extra),
                               golden_findings=golden_findings, seconds=timings)
        history.finish_run(run_id, _now(), int(result.exit_code))
    return result


def _hashed_before_a_gap(bundle: GoldenBundle, outcome: EndpointOutcome, golden: Path) -> GoldenBundle:
    """``bundle``, or, when it was taken on a verification stamp (not hashed tonight) and ``outcome`` is a gap, the
    bundle hashed in full now, before the gap is said: a file rotted on the disk keeps its times, and a stamp must
    never turn a verdict (exit 2 naming the file instead of an alarm). The bytes compared tonight must be the bytes
    hashed: a bundle that changed in between is exit 2 too."""
    if bundle.verified_by != "stamp" or not outcome.gap:
        return bundle
    from gapcheck.errors import InputError
    from gapcheck.golden.bundle import load_bundle

    hashed = load_bundle(golden)
    # byte for byte: array_equal would call a sample holding NaN (inputs may) different from itself
    same = hashed.bundle_hash == bundle.bundle_hash and all(
        hashed.inputs[n].tobytes() == bundle.inputs[n].tobytes() for n in bundle.inputs) and all(
        hashed.reference[n].tobytes() == bundle.reference[n].tobytes() for n in bundle.reference)
    if not same:
        raise InputError(f"golden bundle {golden} changed while the night ran: run it again")
    return hashed


class _Rest:
    """The endpoints after the first, in the config's order. One after the other (``parallel_endpoints`` 1, the
    default), each started once the one before it is recorded; with more, up to ``parallel_endpoints - 1`` of them at
    a time beside the first, started as soon as the bundle is verified (never before: a bad bundle starts none), and
    their outcomes taken in the config's order, so the history, the alerts and the reports are the same whichever
    ends first. Each runs on a thread nothing joins (:func:`gapcheck.nightly.probe.on_thread`): leaving the ``with``
    block (the night ended, or failed) cancels the checks not yet started, one in flight starts no further attempt
    and ends within its deadline, and nobody waits for it (neither the caller nor the interpreter at exit)."""

    def __init__(self, request: NightlyRequest, pending: PendingBundle) -> None:
        self.request, self.specs = request, request.endpoints[1:]
        self.cancelled = threading.Event()
        self.started: dict[str, Future[tuple[str, EndpointOutcome]]] = {}
        self.queued = threading.Event()  # set once _start has run (the callback may run after the bundle's result)
        self.parallel = request.parallel_endpoints > 1 and bool(self.specs)
        self.slots = threading.BoundedSemaphore(max(1, request.parallel_endpoints - 1))
        if self.parallel:
            pending.when_checked(lambda: self._start(pending))

    def _start(self, pending: PendingBundle) -> None:
        """On the bundle's checking thread once it is done: every check started, on the verified bundle only."""
        try:
            bundle = pending.result()
            for spec in self.specs:
                self.started[spec.name] = on_thread(functools.partial(self._check, spec, bundle))
        except BaseException:  # noqa: BLE001 - a bad bundle: the night raises it itself; nothing is started
            return
        finally:
            self.queued.set()

    def _check(self, spec: EndpointSpec, bundle: GoldenBundle) -> tuple[str, EndpointOutcome]:
        with self.slots:  # at most parallel_endpoints - 1 beside the first
            if self.cancelled.is_set():
                raise GapcheckError(f"{spec.name}: not checked (the night ended first)")
            started = _now()
            return started, _check(spec, bundle, self.request, self.cancelled)

    def outcomes(self, bundle: GoldenBundle) -> Iterator[tuple[EndpointSpec, EndpointOutcome, str]]:
        """Each endpoint after the first, its outcome and when its check started; called once the bundle verified."""
        if self.parallel:
            self.queued.wait()  # the bundle verified: _start runs (on its thread) if it has not yet
        for spec in self.specs:
            future = self.started.get(spec.name)
            if future is None:  # one after the other
                started = _now()
                yield spec, _check(spec, bundle, self.request), started
            else:
                started, outcome = future.result()
                yield spec, outcome, started

    def __enter__(self) -> _Rest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancelled.set()


class _Opening:
    """The history opened and the run started as soon as the bundle is verified, while the first endpoint's requests
    are still in flight: the run's first write restarts the WAL and syncs its header (a wait on the disk, ~9 ms a
    night here). It runs on the bundle's checking thread once the hashes are done (no thread of its own to start
    on the caller's path), and reads the first endpoint's earlier nights there too (:attr:`earlier`: what its
    classification reads once its check is done, read while its requests are in flight instead). A bad bundle
    opens nothing (it stops at the bundle's error). When the first endpoint's check fails after all (the audit
    finds the verified ONNX export unreadable: exit 2), :meth:`abandon` takes the run row back, so the failed night
    leaves no run behind."""

    def __init__(self, request: NightlyRequest, pending: PendingBundle, run_id: str, started_at: str) -> None:
        from concurrent.futures import Future

        self.run_id = run_id
        self.first = request.endpoints[0].name
        self.earlier: list[EndpointRecord] | None = None  # the first endpoint's earlier nights, read ahead
        self._future: Future[History] = Future()
        pending.when_checked(lambda: self._settle(request, pending, started_at))

    def _settle(self, request: NightlyRequest, pending: PendingBundle, started_at: str) -> None:
        try:
            self._future.set_result(self._open(request, pending, started_at))
        except BaseException as exc:  # noqa: BLE001 - kept for the caller, who raises it (a bad bundle, a busy history)
            self._future.set_exception(exc)

    def _open(self, request: NightlyRequest, pending: PendingBundle, started_at: str) -> History:
        from gapcheck.version import __version__

        bundle = pending.result()  # InputError: nothing is opened (the caller raises the same error)
        history = History(request.history)
        try:
            history.start_run(self.run_id, started_at, str(request.golden), bundle.bundle_hash, __version__)
        except BaseException:
            history.close()
            raise
        try:
            self.earlier = history.endpoint_history(self.first, HISTORY_WINDOW)
        except GapcheckError:  # a damaged row: read again, and said, where the first endpoint is classified
            self.earlier = None
        return history

    def result(self) -> History:
        return self._future.result()

    def abandon(self) -> None:
        try:
            history = self._future.result()
        except Exception:  # noqa: BLE001 - the opening failed itself (a bad bundle, a busy history): nothing to undo
            return
        try:
            with history.transaction() as db:
                db.execute("DELETE FROM runs WHERE run_id = ?", (self.run_id,))
        finally:
            history.close()


def _check_request(request: NightlyRequest) -> None:
    """What can be refused before any work (exit 2)."""
    if not request.endpoints:
        raise UsageError("no endpoints to check: give at least one NAME=URL")
    names = [e.name for e in request.endpoints]
    if len(set(names)) != len(names):
        raise UsageError(f"endpoint names must be unique: {', '.join(sorted({n for n in names if names.count(n) > 1}))}")
    if request.webhook is not None:
        check_webhook_url(request.webhook.url)
        _ = request.webhook.secret  # a missing secret variable is a configuration error, before any work


def _check_output_map(request: NightlyRequest, bundle: PendingBundle) -> None:
    """--triton-output-map names golden outputs, --triton-input-map golden inputs: one the bundle lacks is a usage
    error before any request."""
    golden = [o.name for o in bundle.output_infos]
    inputs = [i.name for i in bundle.input_infos]
    for spec in request.endpoints:
        unknown_inputs = sorted(set(spec.input_map) - set(inputs))
        if unknown_inputs:
            raise UsageError(f"--triton-input-map names {', '.join(map(repr, unknown_inputs))}, which the golden "
                             f"bundle does not hold (its inputs: {', '.join(inputs) or 'none'})",
                             parameter="triton_input_map")
        unknown = sorted(set(spec.output_map) - set(golden))
        if unknown:
            raise UsageError(f"--triton-output-map names {', '.join(map(repr, unknown))}, which the golden bundle "
                             f"does not hold (its outputs: {', '.join(golden) or 'none'})",
                             parameter="triton_output_map")
        served = list(spec.output_map.values())
        if len(set(served)) != len(served):
            raise UsageError("--triton-output-map maps two golden outputs to one served name",
                             parameter="triton_output_map")


def _text_check(bundle: GoldenBundle, request: NightlyRequest, timings: dict[str, float]) -> tuple[Finding, ...]:
    """The tokenizer in front of the endpoints against the bundle's ids (none asked: nothing)."""
    if request.text is None:
        return ()
    from gapcheck.nightly.text import text_findings

    started = time.monotonic()
    findings = text_findings(bundle, request.text)
    timings["text_check"] = time.monotonic() - started
    return findings


def _check(spec: EndpointSpec, bundle: GoldenBundle | PendingBundle, request: NightlyRequest,
           cancelled: threading.Event | None = None) -> EndpointOutcome:
    from gapcheck.triton.client import release_thread_hub

    try:
        return check_endpoint(spec, bundle, max_in_flight=request.max_in_flight, deadline_s=request.deadline_s,
                              retries=request.retries, audit=request.audit, cancelled=cancelled)
    finally:
        release_thread_hub()  # on an endpoint's own thread (the first's, --parallel-endpoints): its HTTP clients' hub


def _first_check(spec: EndpointSpec, pending: PendingBundle, request: NightlyRequest) -> EndpointOutcome:
    """The first endpoint's check, beside the bundle's hashes, waited on together with them: a bundle that fails
    its verification is raised at once (exit 2), not after the endpoint's whole deadline (a server that accepts and
    never answers held it for ``--triton-deadline``). The check runs on a thread nothing joins (started without
    waiting for it to be scheduled), which the failed bundle cancels (no further attempt starts; one in flight ends
    on its timeout, and nothing waits for it). Nothing of the check is used unless the bundle verified: the check
    itself compares only against the verified bundle."""
    wake = threading.Event()
    cancelled = threading.Event()
    pending.when_checked(wake.set)
    done = on_thread(lambda: _check(spec, pending, request, cancelled))
    done.add_done_callback(lambda _: wake.set())
    try:
        wake.wait()
        if not done.done():
            pending.result()  # the bundle is checked, the endpoint not: a bad bundle raises here
        return done.result()
    except BaseException:
        cancelled.set()
        raise


class _Night:
    """Tonight's endpoints as they are checked: classified, recorded, alerted on."""

    def __init__(self, request: NightlyRequest, history: History, bundle: GoldenBundle, run_id: str,
                 on_endpoint: Callable[[EndpointReport], None] | None) -> None:
        self.request, self.history, self.bundle, self.run_id, self.on_endpoint = request, history, bundle, run_id, on_endpoint
        self.reports: list[EndpointReport] = []
        self.deliveries: list[webhook.Delivery] = []
        self.extra: list[Finding] = []

    def add(self, spec: EndpointSpec, outcome: EndpointOutcome, endpoint_started: str,
            earlier: list[EndpointRecord] | None = None) -> None:
        from gapcheck.codes.nightly import WEBHOOK_FAILED

        self.bundle = _hashed_before_a_gap(self.bundle, outcome, self.request.golden)
        report = _report(outcome, self.history, self.bundle, self.request.drift, endpoint_started, earlier)
        self.history.add_endpoint_result(_record(report, self.run_id, endpoint_started, self.bundle))
        self.reports.append(report)
        if self.on_endpoint is not None:
            self.on_endpoint(report)
        settings = self.request.webhook
        if settings is None or not report.status.alerts:
            return
        delivery = _alert(report, settings, self.run_id, self.history)
        self.deliveries.append(delivery)
        if not delivery.delivered:
            self.extra.append(WEBHOOK_FAILED.finding(
                f"alert for {spec.name} ({report.status.value}) to {delivery.target} failed after "
                f"{delivery.attempts} attempt(s): {delivery.error}",
                subject=Subject(endpoint=spec.name, other="webhook"),
                evidence={"target": delivery.target, "attempts": delivery.attempts, "error": delivery.error}))

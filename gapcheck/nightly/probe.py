"""One endpoint against the golden bundle: readiness, deployment audit, batched inference, comparison.

Everything that goes wrong on the endpoint (down, timing out, not ready, a failed request, the
total deadline passed) ends as an *unreachable* outcome, never an exception: one endpoint failing
never stops the others, and nothing unreachable is ever recorded as a pass.

Inference sends the golden inputs in batches of the served ``max_batch_size`` (1 when the model
does not batch or its config cannot be read), with at most ``max_in_flight`` requests in flight,
one client per worker thread (tritonclient's HTTP client is not thread-safe). Each request's input
SHA256 comes from the fingerprints recorded with the bundle (see :class:`InputDigests`). Outputs
are compared sample by sample with the bundle's tolerances and :func:`gapcheck.compare.per_sample`
(``assert_close`` semantics, as export-diff; the error ratio is compare's: the largest per-element
|error| / allowed error, above 1 exactly where a sample fails).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from gapcheck.errors import EndpointError, GapcheckError, InputError, UsageError, one_line
from gapcheck.findings import Finding, Severity, Subject
from gapcheck.golden.bundle import GoldenBundle, PendingBundle, verified_fingerprints
from gapcheck.nightly.config import DEFAULT_MAX_IN_FLIGHT, EndpointSpec
from gapcheck.triton.endpoint import MalformedAnswerError, ModelNotFoundError, RequestRejectedError
from gapcheck.triton.names import shown_name, shown_names
from gapcheck.triton.url import clean_text, redact, secrets_in

if TYPE_CHECKING:
    from gapcheck.compare import Tolerance
    from gapcheck.export_diff.served_precision import ServedPrecision
    from gapcheck.nightly.deadline import DeadlineConnection, DeadlineEndpoint

logger = logging.getLogger(__name__)

WORST_SAMPLES = 5
# How to pair one endpoint's tensors only: the flags map every endpoint of the night.
PER_ENDPOINT_MAP = ("--triton-output-map / --triton-input-map apply to every endpoint; to map one endpoint only, give "
                    "triton_output_map / triton_input_map in its [[nightly.endpoints]] entry of the config file")
_RESTRICTED = ("restricted", "unauthori", "permission", "forbidden", "not allowed")
_GOLDEN = "golden bundle"  # what pairing messages call the side the deployment is compared with


class BadBundle(InputError):
    """The golden bundle is wrong (a file failed its verification while the endpoint was being checked, or its ONNX
    export does not parse): exit 2, not an unreachable endpoint."""


def verified(bundle: GoldenBundle | PendingBundle) -> GoldenBundle:
    """The verified bundle (waiting for a pending one's hashes); BadBundle when it fails."""
    if isinstance(bundle, GoldenBundle):
        return bundle
    try:
        return bundle.result()
    except InputError as exc:
        raise BadBundle(exc.message, hint=exc.hint) from None


@dataclass(frozen=True)
class SampleError:
    sample: int
    max_abs: float
    error_ratio: float
    passed: bool

    def as_dict(self) -> dict[str, Any]:
        return {"sample": self.sample, "max_abs_error": self.max_abs, "error_ratio": self.error_ratio,
                "passed": self.passed}


@dataclass(frozen=True)
class OutputComparison:
    output: str
    passed: bool
    max_abs: float
    max_rel: float
    mean_abs: float
    mismatch_fraction: float
    error_ratio: float
    failing_samples: int
    rtol: float
    atol: float
    worst: tuple[SampleError, ...]
    shape_mismatch: bool = False
    type_problem: str | None = None  # another dtype kind or shape than the golden output: no value compares
    served_nan: int = 0  # NaN among the served values compared (an all-NaN answer shows as max |err| inf)
    served_inf: int = 0  # +-inf among them
    served_values: int = 0  # the served values compared

    def nonfinite(self) -> str:
        """How many served values were NaN or inf, as a message says it ("" when none were)."""
        if not (self.served_nan or self.served_inf):
            return ""
        said = [f"{count} {what}" for count, what in ((self.served_nan, "NaN"), (self.served_inf, "inf")) if count]
        return f"{' and '.join(said)} of {self.served_values} served values"


@dataclass(frozen=True)
class EndpointOutcome:
    """What one endpoint did tonight (before the history gives it a status)."""

    spec: EndpointSpec
    reachable: bool
    error: str | None
    served_version: str | None
    config_hash: str | None
    max_batch_size: int | None
    outputs: tuple[OutputComparison, ...]
    findings: tuple[Finding, ...]
    requests: tuple[dict[str, Any], ...]  # per request: first sample, count, input SHA256 as sent
    samples: int
    seconds: dict[str, float] = field(default_factory=dict)
    precision: str = "fp32"  # fp16: the deployment declares FP16 (inputs sent as FP16, FP16 budgets)
    model_unknown: bool = False  # the server is up and does not have the model (endpoint_model_unknown)

    @property
    def gap(self) -> bool:
        return any(f.is_gap for f in self.findings)


def _connect(endpoint: DeadlineEndpoint) -> DeadlineConnection:
    """A client for ``endpoint`` whose every attempt is capped at the time its deadline leaves.

    Not :func:`gapcheck.triton.client.connect`: that makes a plain ``TritonConnection``, which bounds each attempt by
    ``timeout_s`` alone, so a server that accepts and never answers would hold the endpoint ``(retries + 1) *
    timeout_s`` past ``--deadline``."""
    from gapcheck.nightly.deadline import DeadlineConnection

    return DeadlineConnection(endpoint)


def _is_restricted(exc: BaseException) -> bool:
    from gapcheck.triton.client import RestrictedApiError

    return isinstance(exc, RestrictedApiError) or any(word in str(exc).lower() for word in _RESTRICTED)


def config_hash(config: dict[str, Any]) -> str:
    """SHA256 of the served model config as canonical JSON (key order and protocol do not matter).

    The two protocols spell one config differently: gRPC's protobuf JSON leaves out every field at its
    default (false, 0, "", empty lists and maps) and writes 64-bit integers as strings; HTTP lists them
    all, as numbers. Both are brought to the same form first, or a canary on HTTP and production on gRPC
    serving the same config would hash differently (and switching protocol would read as a change).
    """
    canonical = _canonical(_through_model_config(config))
    return hashlib.sha256(json.dumps(canonical if canonical is not None else {}, sort_keys=True,
                                     default=str).encode()).hexdigest()


def _through_model_config(config: dict[str, Any]) -> dict[str, Any]:
    """The config parsed as Triton's ``ModelConfig`` and written back: enum defaults spelt out by HTTP
    (``FORMAT_NONE``, ``PRIORITY_DEFAULT``) disappear as they do in gRPC's answer. A field this tritonclient
    does not know (a newer server) keeps the config as it is: then only :func:`_canonical` applies."""
    try:
        from google.protobuf import json_format
        from tritonclient.grpc import model_config_pb2

        message = json_format.ParseDict(config, model_config_pb2.ModelConfig())
        return json_format.MessageToDict(message, preserving_proto_field_name=True)
    except Exception:  # noqa: BLE001 - ParseError, a missing tritonclient: hash what we have
        return config


def _canonical(value: Any) -> Any:
    """Protobuf's default values dropped (None), integer strings as integers, recursively."""
    if isinstance(value, dict):
        kept = {str(k): c for k, c in ((k, _canonical(v)) for k, v in value.items()) if c is not None}
        return kept or None
    if isinstance(value, list):
        items = [_canonical(v) for v in value]
        return [{} if v is None else v for v in items] or None  # list positions matter: keep empty elements
    if value is None or value is False or value == "" or (isinstance(value, (int, float)) and value == 0):
        return None
    if isinstance(value, str) and value.lstrip("-").isdigit() and len(value) < 40:
        return int(value)
    return value


# Served values buffered before one vectorized comparison (16 MiB of float32): at 16 samples a batch, a
# dozen numpy calls per batch cost more than the arithmetic, and the main thread is the one reading answers.
FLUSH_ELEMENTS = 1 << 22
RELEASE_WAIT_S = 5.0  # how long an HTTP worker's closing job waits for the others (one stuck in a request)


class _Accumulator:
    """Per-output comparison across batches (answers arrive in any order).

    Batches are buffered and compared a group at a time with :func:`gapcheck.compare.per_sample` (the one
    comparator: every number, the error ratio included, means what it means in :mod:`gapcheck.compare`);
    per-sample results are kept as arrays (sample, max_abs, max_rel, mean_abs, mismatch fraction, error
    ratio, passed), and :class:`SampleError` objects are made only for the worst samples.
    """

    def __init__(self, name: str, rtol: float, atol: float, tolerance: Tolerance | None = None,
                 half: bool = False) -> None:
        from gapcheck.compare import Tolerance

        self.name, self.rtol, self.atol = name, rtol, atol
        # ``tolerance``: the bundle's policy at another precision (an FP16 deployment's budgets: atol scaled)
        self.tolerance = tolerance or Tolerance(rtol, atol)
        self.half = half  # the deployment declares FP16: float16 served for float32 is its precision, said once
        self._pending: list[tuple[int, np.ndarray, np.ndarray]] = []
        self._pending_elements = 0
        self._columns: list[tuple[np.ndarray, ...]] = []
        self.shape_mismatch = False
        self.type_problem: str | None = None
        self.width_change: str | None = None  # same kind, other width (float16 served for float32): compared
        self.served_nan = self.served_inf = self.served_values = 0

    def add(self, first: int, served: np.ndarray, golden: np.ndarray) -> None:
        problem = _type_problem(served, golden)
        if problem is not None:
            self.shape_mismatch = self.shape_mismatch or served.shape != golden.shape
            self.type_problem = self.type_problem or problem
            served = np.broadcast_to(np.float32(np.nan), golden.shape)  # every sample of the batch fails on it
        else:
            if served.dtype != golden.dtype and self.width_change is None and not (
                    self.half and served.dtype == np.float16):
                self.width_change = f"served {served.dtype}, golden {golden.dtype}"
            self._count_nonfinite(served)
        self._pending.append((first, served, golden))
        self._pending_elements += golden.size
        if self._pending_elements >= FLUSH_ELEMENTS:
            self._flush()

    def _count_nonfinite(self, served: np.ndarray) -> None:
        """NaN and inf among the served values (one pass when every value is finite, the usual case)."""
        self.served_values += served.size
        if served.dtype.kind in "fc" and not np.isfinite(served).all():
            self.served_nan += int(np.count_nonzero(np.isnan(served)))
            self.served_inf += int(np.count_nonzero(np.isinf(served)))

    def _flush(self) -> None:
        from gapcheck.compare import per_sample, per_sample_vectorized

        pending, self._pending, self._pending_elements = self._pending, [], 0
        if len(pending) > 1:
            served = np.concatenate([s for _, s, _ in pending])
            golden = np.concatenate([g for _, _, g in pending])
            grouped = per_sample_vectorized(served, golden, self.tolerance)
            if grouped is not None:
                samples = np.concatenate([np.arange(first, first + g.shape[0]) for first, _, g in pending])
                self._columns.append((samples, *self._stats_columns(grouped)))
                return
        for first, served, golden in pending:  # one batch, or a group that holds a non-finite value
            stats = per_sample(served, golden, self.tolerance)
            self._columns.append((np.arange(first, first + golden.shape[0]), *self._stats_columns(stats)))

    @staticmethod
    def _stats_columns(stats: Any) -> tuple[np.ndarray, ...]:
        return (stats.max_abs, stats.max_rel, stats.mean_abs, stats.mismatch_fraction, stats.error_ratio, stats.passed)

    def result(self) -> OutputComparison:
        self._flush()
        columns = [np.concatenate(c) for c in zip(*self._columns, strict=True)] if self._columns else [np.zeros(0)] * 7
        sample, max_abs, max_rel, mean_abs, mismatch, ratio = (c.astype(np.float64, copy=False) for c in columns[:6])
        passed = columns[6].astype(bool, copy=False)
        # Failing first, then the largest error ratio, the largest |err|, the lowest sample index.
        order = np.lexsort((sample, -max_abs, -ratio, passed))[:WORST_SAMPLES]
        worst = tuple(SampleError(int(sample[i]), float(max_abs[i]), float(ratio[i]), bool(passed[i])) for i in order)
        count = max(len(sample), 1)
        return OutputComparison(
            output=self.name, passed=bool(passed.all()) and not self.shape_mismatch,
            max_abs=float(max_abs.max(initial=0.0)), max_rel=float(max_rel.max(initial=0.0)),
            mean_abs=float(mean_abs.sum()) / count, mismatch_fraction=float(mismatch.sum()) / count,
            error_ratio=float(ratio.max(initial=0.0)), failing_samples=int((~passed).sum()), rtol=self.rtol,
            atol=self.atol, worst=worst, shape_mismatch=self.shape_mismatch, type_problem=self.type_problem,
            served_nan=self.served_nan, served_inf=self.served_inf, served_values=self.served_values)


def _kind(dtype: np.dtype) -> str:
    return {"u": "i", "c": "f"}.get(dtype.kind, dtype.kind)  # unsigned counts as integer, complex as float


def _type_problem(served: np.ndarray, golden: np.ndarray) -> str | None:
    """Why the served batch cannot be compared value by value with the golden one (None when it can)."""
    if served.shape != golden.shape:
        return (f"served shape {list(served.shape)} for a batch of {golden.shape[0]}, "
                f"golden {list(golden.shape)}")
    if _kind(served.dtype) != _kind(golden.dtype):
        return f"served dtype {served.dtype}, golden {golden.dtype}"
    return None


def _batches(count: int, size: int) -> list[tuple[int, int]]:
    size = max(1, size)
    return [(start, min(start + size, count)) for start in range(0, count, size)]


class InputDigests:
    """The input SHA256 reported per request, from the fingerprints ``golden record`` took of every sample.

    The inputs sent are slices of ``inputs.safetensors``, and the bundle's verification checked every recorded
    fingerprint against its sample: hashing them again per request would only repeat that (at 12 KB a sample,
    as long as a round trip on a small model). A request's digest is then the recorded fingerprint of its
    sample when it holds one (the same value :func:`gapcheck.tensors.fingerprint` gives the batch of one),
    else the SHA256 of ``"gapcheck-batch:"`` and the comma-joined fingerprints of its samples, in order.
    ``verified``: the fingerprints as the verified bundle holds them (:meth:`for_bundle`); otherwise every recorded one is
    checked here first: one that differs refuses the bundle (BadBundle, exit 2). None recorded (a hand-built
    bundle): every request is hashed as sent.
    """

    def __init__(self, manifest: dict[str, Any], inputs: dict[str, np.ndarray], count: int,
                 where: object = "", *, verified: list[dict[str, str]] | None = None) -> None:
        self.recorded = verified if verified is not None else verified_fingerprints(
            manifest, inputs, count, f"golden bundle {where}".strip(), BadBundle)

    @classmethod
    def for_bundle(cls, bundle: GoldenBundle) -> InputDigests:
        """The digests of a verified bundle (its fingerprints were checked as it was verified: not again)."""
        return cls(bundle.manifest, bundle.inputs, bundle.num_samples, bundle.path, verified=bundle.fingerprints)

    @property
    def from_record(self) -> bool:
        return self.recorded is not None

    def of(self, first: int, stop: int, sent: dict[str, np.ndarray]) -> dict[str, str]:
        from gapcheck.tensors import fingerprint

        if self.recorded is None:
            return {name: fingerprint(array) for name, array in sent.items()}
        return {name: batch_digest([self.recorded[i][name] for i in range(first, stop)]) for name in sent}


def batch_digest(fingerprints: list[str]) -> str:
    """The digest of a batch from its samples' fingerprints (a batch of one: that sample's own fingerprint)."""
    if len(fingerprints) == 1:
        return fingerprints[0]
    return hashlib.sha256(("gapcheck-batch:" + ",".join(fingerprints)).encode()).hexdigest()


class _Inference:
    """Sends the bundle's inputs in batches, bounded in flight, within the endpoint's deadline (a
    :class:`gapcheck.nightly.deadline.DeadlineEndpoint`: each request is capped at the time left).

    On gRPC every worker sends on one connection, readiness's when it hands it over: a channel multiplexes
    concurrent calls (HTTP/2 streams), so a client per thread would only add channels to make and close. HTTP's
    client (gevent) belongs to the thread that made it: there each worker has its own."""

    def __init__(self, spec: EndpointSpec, endpoint: DeadlineEndpoint, outputs: list[str],
                 spare: list[DeadlineConnection], casts: dict[str, np.dtype] | None = None) -> None:
        self.spec, self.endpoint, self.outputs = spec, endpoint, outputs
        self.casts = casts or {}  # input -> the dtype the deployment takes (FP16): float samples sent as that
        self._local = threading.local()
        self._connections: list[Any] = []
        self._lock = threading.Lock()
        self._spare = spare  # readiness's connection, already open: the first worker's (one channel less to open)
        self._shared = endpoint.protocol == "grpc"

    def _connection(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._shared_connection() if self._shared else self._own_connection()
        return conn

    def _shared_connection(self) -> Any:
        with self._lock:  # made once, under the lock: every worker sends on it
            if not self._connections:
                self._connections.append(self._spare.pop() if self._spare else _connect(self.endpoint))
            return self._connections[0]

    def _own_connection(self) -> Any:
        conn = _connect(self.endpoint)
        with self._lock:
            self._connections.append(conn)
        return conn

    def send(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from gapcheck.nightly.deadline import DeadlinePassed

        try:
            self.endpoint.time_left()  # a queued batch whose turn comes too late is not sent at all
        except DeadlinePassed as exc:
            raise DeadlinePassed(f"{exc} before all golden inputs were answered") from None
        sent = {}
        for name, array in feeds.items():  # under the name the deployment takes (its own, when it renames inputs)
            served = self.spec.sent_name(name)
            sent[served] = np.ascontiguousarray(as_sent(array, self.casts.get(served, self.casts.get(name))))
        return self._connection().infer(self.spec.model, sent, self.outputs, self.spec.version)

    def wind_down(self, pool: ThreadPoolExecutor, workers: int, queued: Iterable[Future[Any]], answered: bool) -> None:
        """Close every connection: behind the comparison once every answer is in (nothing waits for it), at once
        after a failure (the batches not yet sent cancelled first). Over HTTP each worker closes its own client and
        frees its gevent hub on its own thread (:func:`gapcheck.triton.client.release_thread_hub`): a barrier puts
        one such job on each of the pool's workers."""
        for future in queued:
            future.cancel()
        if self._shared:
            pool.submit(self.close)
        else:
            barrier = threading.Barrier(workers)  # the pool's max_workers: its jobs start any worker not started yet
            for _ in range(workers):
                pool.submit(self._release_own, barrier)
        pool.shutdown(wait=not answered)
        if not answered:
            self.close()  # what a broken barrier left (a worker stuck in a request past RELEASE_WAIT_S)

    def _release_own(self, barrier: threading.Barrier) -> None:
        from gapcheck.triton.client import release_thread_hub

        # broken: a worker still in a request; this job still ends its own thread's client and hub
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=RELEASE_WAIT_S)
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            self._local.conn = None
            self._forget(conn).close()
        release_thread_hub()

    def _forget(self, conn: Any) -> Any:
        with self._lock:
            if conn in self._connections:
                self._connections.remove(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()


@dataclass(frozen=True)
class ServedFacts:
    """What readiness read: the served version, config hash, max_batch_size and outputs, and the model's metadata and
    config as the server gave them (the deployment audit and the FP16 casts take them: each is asked once a night)."""

    version: str | None
    config_hash: str | None
    max_batch_size: int | None
    outputs: list[str]
    metadata: dict[str, Any]
    config: dict[str, Any] | None  # None: the model config API is restricted


def as_sent(array: np.ndarray, dtype: np.dtype | None) -> np.ndarray:
    """A float sample cast to the dtype the deployment declares (FP16), as its clients send it; anything else as is."""
    if dtype is None or array.dtype == dtype or array.dtype.kind != "f":
        return array
    return array.astype(dtype)


_TRITON_TYPES = {"float32": "TYPE_FP32", "float16": "TYPE_FP16", "float64": "TYPE_FP64"}


def served_precision(spec: EndpointSpec, bundle: GoldenBundle | PendingBundle, facts: ServedFacts) -> ServedPrecision:
    """Whether the deployment computes in FP16: what export-diff decides
    (:func:`gapcheck.export_diff.served_precision.declared_precision`), from what readiness read and the bundle's
    input types, before any request. Its one ``fp16_deployment`` finding is about the endpoint; the casts say which
    inputs are sent as FP16."""
    from gapcheck.export_diff.served_precision import declared_precision
    from gapcheck.triton.audit import served_model

    served = served_model(spec.model, facts.metadata, facts.config, facts.version)
    graph = {i.name: _TRITON_TYPES.get(i.dtype, f"TYPE_{i.dtype.upper()}") for i in bundle.input_infos}
    found = declared_precision(spec.model, served, graph, [], own_export=True, budgets="fp16")
    if not found.fp16:
        return found
    digests = ("requests' input_sha256 of " + ", ".join(found.input_dtypes) + ": SHA256 of the FP16 bytes sent; the "
               "golden bundle's own fingerprints (manifest samples.fingerprints, golden_hash) are of its FP32 "
               "samples") if found.input_dtypes else "inputs sent as recorded"
    said = [Finding(f.code, f.severity, f.message.replace("gapcheck's FP32 export", "the golden bundle's FP32 export"),
                    spec.name, {**f.evidence, "graph": "golden bundle export", "input_sha256": digests},
                    Subject(endpoint=spec.name)) for f in found.findings]
    return dataclasses.replace(found, findings=said)


def _served_facts(spec: EndpointSpec, conn: DeadlineConnection, findings: list[Finding]) -> ServedFacts:
    """Readiness, served version, config hash, max_batch_size and served outputs; EndpointError when down.

    On gRPC the model's metadata and config are asked beside its readiness (a channel serves any thread): one
    round trip's wait instead of three. They are only read once the model is ready, so every failure is said as
    before, in the same order (not live, not ready, then metadata, then config); every call keeps the endpoint's
    deadline. HTTP's client belongs to its thread: there they are asked one after the other."""
    from gapcheck.codes.nightly import AUDIT_LIMITED

    beside = conn.protocol == "grpc"
    metadata_asked = on_thread(lambda: conn.model_metadata(spec.model, spec.version)) if beside else None
    config_asked = on_thread(lambda: _hashed_config(conn, spec)) if beside else None
    # The connection is the caller's: the first inference worker reuses it (one channel less to open).
    # One round trip when the model is ready (a ready model's server is live). Otherwise the server's liveness is
    # waited for (retried, as it always was) and the model asked again, so the error still says which.
    if not conn.model_ready(spec.model, spec.version, wait=False):
        if not conn.server_live():
            raise EndpointError(f"Triton server {conn.display_url} is not live")
        if not conn.model_ready(spec.model, spec.version, wait=False):
            missing = _missing_model(conn, spec)  # a misspelt name is not an outage: the night says which
            if missing is not None:
                raise missing
            raise EndpointError(f"model {spec.model!r}{' version ' + spec.version if spec.version else ''} is "
                                f"not ready on {conn.display_url}")
        metadata_asked = config_asked = None  # asked before the model was ready: ask again
    metadata = metadata_asked.result() if metadata_asked else conn.model_metadata(spec.model, spec.version)
    versions = sorted((str(v) for v in metadata.get("versions", [])), key=lambda v: (len(v), v))
    served_version = spec.version or (versions[-1] if versions else None)
    outputs = [str(o["name"]) for o in metadata.get("outputs", [])]
    try:
        config, hashed = config_asked.result() if config_asked else _hashed_config(conn, spec)
    except EndpointError as exc:
        if not _is_restricted(exc):
            raise
        findings.append(AUDIT_LIMITED.finding(
            "the model config API is restricted: the config hash and max_batch_size are unknown (batches of 1)",
            subject=Subject(endpoint=spec.name), evidence={"error": str(exc)}))
        return ServedFacts(served_version, None, None, outputs, metadata, None)
    return ServedFacts(served_version, hashed, int(config.get("max_batch_size", 0)), outputs, metadata, config)


def _missing_model(conn: DeadlineConnection, spec: EndpointSpec) -> ModelNotFoundError | None:
    """Why a model that is not ready (or the version the endpoint pins) is not on the server at all, naming what it
    has, or None (it is there, only not ready; or the server will not tell). Asked only once the model is found not
    ready: no cost on a good night."""
    from gapcheck.triton.audit import missing_model, missing_version

    try:
        index = conn.repository_index()
    except EndpointError:  # restricted (RestrictedApiError is one) or failing: the model's metadata may still tell
        index = None
    missing = missing_model(conn, spec.model, index, hint="correct the endpoint's model: the URL's /MODEL, or model "
                                                          "in [[nightly.endpoints]]")
    if missing is None and spec.version:
        missing = missing_version(conn, spec.model, spec.version, index,
                                  hint="correct the endpoint's version (?version=N in its URL)")
    return missing


def _hashed_config(conn: DeadlineConnection, spec: EndpointSpec) -> tuple[dict[str, Any], str]:
    """The served model config and its hash (on gRPC both on the thread that asked, beside the readiness check)."""
    config = conn.model_config(spec.model, spec.version)
    return config, config_hash(config)


T = TypeVar("T")


def on_thread(fn: Callable[[], T]) -> Future[T]:
    """``fn()`` on a thread of its own, its outcome in the Future. Nothing joins the thread (it ends with its call,
    bounded by the endpoint's deadline): a caller that no longer needs the answer (the model was not ready, the
    endpoint failed) does not wait for it, nor does the interpreter at exit. Started without waiting for it to be
    scheduled (``threading.Thread.start`` waits: milliseconds on a busy machine, on the caller's path)."""
    import _thread

    done: Future[T] = Future()

    def work() -> None:
        try:
            done.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - kept for the caller, who raises it
            done.set_exception(exc)

    _thread.start_new_thread(work, ())
    return done


def _audit(spec: EndpointSpec, endpoint: Any, bundle: GoldenBundle | PendingBundle, facts: ServedFacts | None = None,
           fp16: bool = False) -> list[Finding]:
    """The deployment audit, given what readiness read (``facts``: not asked again). ``fp16``: the deployment declares
    FP16 (said once by :func:`served_precision`): FP16 declared where the export has FP32 is not a gap."""
    from gapcheck.triton.client import release_thread_hub

    try:
        return _audit_findings(spec, endpoint, bundle, facts, fp16)
    finally:
        release_thread_hub()  # the audit runs on a thread of its own: its HTTP client's gevent hub goes with it


def _audit_findings(spec: EndpointSpec, endpoint: Any, bundle: GoldenBundle | PendingBundle, facts: ServedFacts | None,
                    fp16: bool) -> list[Finding]:
    from gapcheck.codes.nightly import AUDIT_LIMITED
    from gapcheck.codes.triton import SERVED_NAMES
    from gapcheck.export_diff.served_precision import widened
    from gapcheck.triton.audit import ModelRead, audit_deployment

    try:
        # A pending bundle gives the export as soon as its own file matched its SHA256: the audit's requests go out
        # while the inputs are still hashed; its findings are reported only once the whole bundle is verified.
        onnx_model = bundle.onnx_model()
    except InputError as exc:
        raise BadBundle(exc.message, hint=exc.hint) from None
    try:
        read = ModelRead(facts.metadata, facts.config) if facts is not None else None
        result = audit_deployment(endpoint, spec.model, onnx_model=onnx_model, version=spec.version, read=read,
                                  input_map=spec.input_map, output_map=spec.output_map, side=_GOLDEN)
    except UsageError as exc:  # a mapped name this endpoint does not serve (paired_names refuses it first: exit 2)
        from gapcheck.codes.triton import NAME_MISMATCH

        return [NAME_MISMATCH.finding(f"{exc.message} ({PER_ENDPOINT_MAP})", subject=Subject(endpoint=spec.name),
                                      evidence={"error": exc.message})]
    except EndpointError as exc:
        return [AUDIT_LIMITED.finding(f"the deployment audit could not complete: {exc}",
                                      subject=Subject(endpoint=spec.name), evidence={"error": str(exc)})]
    # The audit's own codes keep their meaning; the subject says which endpoint they are about. The audit pairs
    # renamed tensors as paired_names did before the first request, which already said how (not twice).
    findings = [f for f in result.findings if not (fp16 and widened(f)) and f.code != SERVED_NAMES.code]
    return [Finding(f.code, f.severity, f.message, f.where, dict(f.evidence),
                    Subject(**{**f.subject.as_dict(), "endpoint": spec.name})) for f in findings]


_TRITON_TYPES_OF = {"float32": "TYPE_FP32", "float16": "TYPE_FP16", "float64": "TYPE_FP64", "int64": "TYPE_INT64",
                    "int32": "TYPE_INT32", "int8": "TYPE_INT8", "uint8": "TYPE_UINT8", "bool": "TYPE_BOOL"}


def paired_names(spec: EndpointSpec, bundle: GoldenBundle | PendingBundle, facts: ServedFacts,
                 findings: list[Finding]) -> EndpointSpec:
    """``spec`` with the names the deployment serves the golden inputs and outputs under, from what readiness read:
    the user's maps first, then :func:`gapcheck.triton.names.pair_tensors` (names, then what fits only one way);
    each renaming is a ``triton_served_names`` info in ``findings``. A map naming a served tensor the deployment
    does not have is a UsageError (exit 2) listing the served names, as a golden name the bundle lacks is. What
    cannot be paired is sent/asked under the golden name: the server's answer (a rejected request) or the missing
    output is the finding."""
    from gapcheck.codes.triton import SERVED_NAMES
    from gapcheck.triton.audit import served_model
    from gapcheck.triton.names import pair_tensors

    served = served_model(spec.model, facts.metadata, facts.config, facts.version)

    def sides(infos: tuple[Any, ...]) -> list[Any]:
        return [SimpleNamespace(name=i.name, data_type=_TRITON_TYPES_OF.get(i.dtype, f"TYPE_{i.dtype.upper()}"),
                                shape=(None, *i.shape[1:]) if i.shape else ()) for i in infos]

    try:  # a mapped served name this deployment lacks (a typo: INPUT_0 for INPUT__0) is the caller's mistake
        inputs = pair_tensors("input", sides(bundle.input_infos), served.inputs, spec.input_map, side=_GOLDEN)
        outputs = pair_tensors("output", sides(bundle.output_infos), served.outputs, spec.output_map, side=_GOLDEN)
    except UsageError as exc:
        raise UsageError(f"endpoint {spec.name!r}: {exc.message}", hint=PER_ENDPOINT_MAP,
                         parameter=exc.parameter) from None
    input_map, output_map = {**inputs.renamed, **spec.input_map}, {**outputs.renamed, **spec.output_map}
    for kind, pairing in (("input", inputs), ("output", outputs)):
        if pairing.renamed:
            shown = ", ".join(f"{g}={s}" for g, s in pairing.renamed.items())
            findings.append(SERVED_NAMES.finding(
                f"{spec.name} names its {kind}s its own way; paired {pairing.how}: {shown_names([shown], 1)} "
                "(golden=served)", subject=Subject(endpoint=spec.name, output=f"{kind} names"),
                evidence={"pairs": pairing.renamed, "how": pairing.how}))
    if input_map == spec.input_map and output_map == spec.output_map:
        return spec
    return dataclasses.replace(spec, input_map=input_map, output_map=output_map)


def _rejected(spec: EndpointSpec, exc: RequestRejectedError) -> Finding:
    """The server's "your request is wrong" as a deployment gap, in its own words (one line, secrets redacted)."""
    from gapcheck.codes.nightly import REQUEST_REJECTED

    # redacted before and after the control characters go (a token split by an escape the server printed)
    secrets = secrets_in("", spec.headers)
    reason = redact(clean_text(redact(exc.reason, secrets, fragments=True), 300), secrets, fragments=True)
    sent = ", ".join(f"{g}={s}" for g, s in spec.input_map.items())
    pairing = f"; inputs sent as {shown_names([sent], 1)} (golden=served)" if sent else ""
    return REQUEST_REJECTED.finding(
        f"{spec.name} ({spec.display_url}) refused the golden inputs as a wrong request [{exc.status}]: {reason}"
        f"{pairing}; fix the served config or pass --triton-input-map GOLDEN=SERVED",
        subject=Subject(endpoint=spec.name), evidence={"status": exc.status, "reason": reason,
                                                       "input_map": dict(spec.input_map)})


def _malformed(spec: EndpointSpec, exc: MalformedAnswerError) -> Finding:
    """An answer the client refused to read, as the deployment gap it is (one line, header values redacted)."""
    from gapcheck.codes.nightly import MALFORMED_ANSWER

    message = redact(_unreachable_message(exc), tuple(v for v in spec.headers.values() if v))
    return MALFORMED_ANSWER.finding(
        f"{spec.name} ({spec.display_url}) answered the golden inputs with a malformed response: {message}; no "
        "output was compared", subject=Subject(endpoint=spec.name), evidence={"error": message})


def _unreachable_message(exc: BaseException) -> str:
    """Why an endpoint could not be checked, on one line (:func:`gapcheck.errors.one_line`: colour codes removed, a
    long message cut). Our own errors are already worded (and redacted): no type, and their hint (e.g. which access
    header a restricted API expects); anything else is named by its type."""
    if isinstance(exc, GapcheckError):
        message = one_line(exc).removeprefix(f"{type(exc).__name__}: ") if exc.message.strip() else type(exc).__name__
        return f"{message} ({exc.hint})" if exc.hint else message
    return one_line(exc)


def _timed(fn: Any, *args: Any) -> tuple[Any, float]:
    tick = time.monotonic()
    return fn(*args), time.monotonic() - tick


def check_endpoint(spec: EndpointSpec, bundle: GoldenBundle | PendingBundle, *, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                   deadline_s: float = 600.0, retries: int = 2, audit: bool = True,
                   cancelled: threading.Event | None = None) -> EndpointOutcome:
    """Run the golden inputs through ``spec`` and compare; an unreachable endpoint is an outcome, not an exception.

    ``bundle`` may still be verifying (:func:`gapcheck.golden.bundle.open_bundle`): readiness runs and the
    first requests go out meanwhile, and every comparison waits for the verified bundle. A bundle that fails
    its verification raises :class:`BadBundle` (exit 2) whatever the endpoint did, never an outcome. ``cancelled``
    (set by a caller that stopped waiting): no further attempt starts."""
    from gapcheck.nightly.deadline import DeadlineEndpoint

    start = time.monotonic()
    deadline = start + deadline_s
    timings: dict[str, float] = {}
    findings: list[Finding] = []
    served: tuple[str | None, str | None, int | None] = (None, None, None)
    precision = "fp32"
    spare: list[DeadlineConnection] = []  # readiness's connection, until the first inference worker takes it over
    try:
        # Readiness and inference connect through _connect: every attempt stops at the deadline. The audit's own
        # connection (triton.audit, through client.connect) is a plain one: its attempts are bounded by timeout_s.
        bounded = DeadlineEndpoint.of(spec.triton_endpoint(retries), deadline, deadline_s, cancelled)
        # A bare host:port is probed once, here; resolve() keeps the class (dataclasses.replace), typed as its base.
        endpoint = cast(DeadlineEndpoint, bounded.resolve())
        spare.append(_connect(endpoint))
        facts = _served_facts(spec, spare[0], findings)
        asked, spec = spec, paired_names(spec, bundle, facts, findings)  # the deployment's own names, if it has them
        served = (facts.version, facts.config_hash, facts.max_batch_size)
        declared = served_precision(spec, bundle, facts)  # FP16 declared: inputs sent as FP16, FP16 budgets
        findings.extend(declared.findings)
        precision = "fp16" if declared.fp16 else "fp32"
        timings["readiness"] = time.monotonic() - start
        # A gRPC channel serves any thread; an HTTP client (gevent) stays with the thread that made it.
        handed = spare if spare[0].protocol == "grpc" else []
        outputs, requests = _audited_inference(spec, endpoint, bundle, (facts.max_batch_size or 1, max_in_flight),
                                               facts, declared, findings, handed, timings, audit and asked)
    except ModelNotFoundError as exc:  # the endpoint's own answer (not the bundle's fault): its outcome, not the night's
        timings["total"] = time.monotonic() - start
        verified(bundle)
        return _unknown_model(spec, bundle, exc, timings)
    except (BadBundle, UsageError):
        # the golden bundle itself is wrong (its ONNX export, read for the audit), or a map names a served tensor the
        # deployment lacks: exit 2, not the endpoint's fault
        raise
    except Exception as exc:  # noqa: BLE001 - whatever fails on this endpoint, the others still run
        timings["total"] = time.monotonic() - start
        verified(bundle)  # nothing about this endpoint is reported on an unverified bundle
        return _failed(spec, bundle, exc, (deadline, deadline_s), served, findings, timings, precision)
    finally:
        for conn in spare:  # not taken over (a failure before the inference, or no output to ask for)
            conn.close()
    timings["total"] = time.monotonic() - start
    return EndpointOutcome(spec, True, None, *served, outputs, tuple(findings), requests, bundle.num_samples, timings,
                           precision)


def _unknown_model(spec: EndpointSpec, bundle: GoldenBundle | PendingBundle, exc: ModelNotFoundError,
                   timings: dict[str, float]) -> EndpointOutcome:
    """An endpoint whose server does not have its model: unreachable tonight; whether that is a misspelt name (exit 2)
    or a removed model (exit 3) is the history's to say (:func:`gapcheck.nightly.run` knows the earlier nights)."""
    from gapcheck.codes.nightly import MODEL_UNKNOWN

    message = redact(exc.message, tuple(v for v in spec.headers.values() if v))
    finding = MODEL_UNKNOWN.finding(f"{spec.name} ({spec.display_url}) could not be checked: {message}",
                                    subject=Subject(endpoint=spec.name), evidence={"error": message, "hint": exc.hint})
    return EndpointOutcome(spec, False, message, None, None, None, (), (finding,), (), bundle.num_samples, timings,
                           model_unknown=True)


def _failed(spec: EndpointSpec, bundle: GoldenBundle | PendingBundle, exc: Exception, deadline: tuple[float, float],
            served: tuple[str | None, str | None, int | None], findings: list[Finding], timings: dict[str, float],
            precision: str) -> EndpointOutcome:
    """The outcome of an endpoint whose check failed: a request the server called wrong is a deployment gap (the
    endpoint answered); anything else leaves it unreachable (``deadline``: when, and the total it had)."""
    from gapcheck.codes.nightly import ENDPOINT_UNREACHABLE
    from gapcheck.nightly.deadline import deadline_message

    if isinstance(exc, RequestRejectedError):  # the server is up and says the request is wrong: not an outage
        return EndpointOutcome(spec, True, None, *served, (), (*findings, _rejected(spec, exc)), (),
                               bundle.num_samples, timings, precision)
    if isinstance(exc, MalformedAnswerError):  # the server is up and answered, wrongly: the deployment's gap
        return EndpointOutcome(spec, True, None, *served, (), (*findings, _malformed(spec, exc)), (),
                               bundle.num_samples, timings, precision)
    message = _unreachable_message(exc)
    # The last attempt, capped at the time left, fails as a plain timeout ("Deadline Exceeded" on gRPC):
    # say which deadline it was. (Timers fire within a few milliseconds of it, either side.)
    at, total = deadline
    if time.monotonic() > at - 0.05 and deadline_message(total) not in message:
        message = f"{message} ({deadline_message(total)})"
    message = redact(message, tuple(v for v in spec.headers.values() if v))
    finding = ENDPOINT_UNREACHABLE.finding(f"{spec.name} ({spec.display_url}) could not be checked: {message}",
                                           subject=Subject(endpoint=spec.name), evidence={"error": message})
    return EndpointOutcome(spec, False, message, *served, (), (*findings, finding), (), bundle.num_samples, timings,
                           precision)


def _audited_inference(spec: EndpointSpec, endpoint: DeadlineEndpoint, bundle: GoldenBundle | PendingBundle,
                       sizes: tuple[int, int], facts: ServedFacts, declared: ServedPrecision, findings: list[Finding],
                       spare: list[DeadlineConnection], timings: dict[str, float], audit: EndpointSpec | bool,
                       ) -> tuple[tuple[OutputComparison, ...], tuple[dict[str, Any], ...]]:
    """The inference and comparison (``sizes``: batch, requests in flight), the deployment audit beside it (``audit``:
    the endpoint as the user gave it, its own maps: the audit pairs the names itself; False: none): it reads
    metadata only, so it runs beside the inference instead of before it — started once every request is queued and
    the workers that send them are up, so it never delays the first request. Its findings go first."""
    side = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"audit-{spec.name}")
    audited: list[Future[tuple[list[Finding], float]]] = []
    audited_all = False

    def start_audit() -> None:
        if audit and not audited:
            audited.append(side.submit(_timed, _audit, cast(EndpointSpec, audit), endpoint, bundle, facts,
                                       declared.fp16))
    try:
        tick = time.monotonic()
        result = _infer_and_compare(spec, endpoint, bundle, *sizes, facts.outputs, findings, spare, start_audit,
                                    declared)
        timings["inference"] = time.monotonic() - tick
        start_audit()  # no output was asked for (none is served): the audit still runs
        if audited:
            audit_findings, timings["audit"] = audited[0].result()
            findings[:0] = audit_findings
        audited_all = True
    finally:
        # Done: the idle thread ends on its own (no join on this path). After a failure, the audit ends first.
        side.shutdown(wait=not audited_all)
    return result


def _infer_and_compare(spec: EndpointSpec, endpoint: Any, bundle: GoldenBundle | PendingBundle, batch: int,
                       max_in_flight: int, served_outputs: list[str], findings: list[Finding],
                       spare: list[DeadlineConnection], on_sent: Callable[[], None],
                       declared: ServedPrecision | None = None,
                       ) -> tuple[tuple[OutputComparison, ...], tuple[dict[str, Any], ...]]:
    findings.extend(_missing_outputs(spec, bundle, served_outputs))
    wanted = [o.name for o in bundle.output_infos if spec.served_name(o.name) in served_outputs]
    if not wanted:
        return (), ()
    fp16 = declared is not None and declared.fp16
    budgets = fp16_budgets(bundle, wanted) if fp16 else {}
    accumulators = {name: _Accumulator(name, budgets[name].rtol if fp16 else bundle.tolerances[name].rtol,
                                       budgets[name].atol if fp16 else bundle.tolerances[name].atol,
                                       budgets.get(name), half=fp16) for name in wanted}
    casts = {name: np.dtype(dtype) for name, dtype in declared.input_dtypes.items()} if declared else {}
    requests = _send_all(spec, endpoint, bundle, (batch, max_in_flight), accumulators, spare, on_sent, casts)
    comparisons = tuple(acc.result() for acc in accumulators.values())
    findings.extend(_comparison_findings(spec, bundle, list(accumulators.values()), comparisons))
    return comparisons, tuple(sorted(requests, key=lambda r: r["first_sample"]))


def _missing_outputs(spec: EndpointSpec, bundle: GoldenBundle | PendingBundle,
                     served_outputs: list[str]) -> list[Finding]:
    from gapcheck.codes.nightly import OUTPUT_MISSING

    missing = []
    for info in bundle.output_infos:
        served_as = spec.served_name(info.name)
        if served_as not in served_outputs:
            mapped = f" as {shown_name(served_as)} (--triton-output-map)" if served_as != info.name else ""
            missing.append(OUTPUT_MISSING.finding(
                f"{spec.name} does not serve golden output {shown_name(info.name)}{mapped} (it serves "
                f"{shown_names(served_outputs)})",
                subject=Subject(endpoint=spec.name, output=info.name), evidence={"served_outputs": served_outputs}))
    return missing


def _send_all(spec: EndpointSpec, endpoint: Any, bundle: GoldenBundle | PendingBundle, sizes: tuple[int, int],
              accumulators: dict[str, _Accumulator], spare: list[DeadlineConnection],
              on_sent: Callable[[], None], casts: dict[str, np.dtype] | None = None) -> list[dict[str, Any]]:
    """Send every batch (``sizes``: batch, requests in flight) and feed each answer to its output's accumulator; the
    requests made, in answer order. ``on_sent()`` once every batch is queued and the workers are up.

    Once every answer is in, the connections are closed by the pool's own worker behind the comparison (nothing
    waits on a channel's close; the interpreter joins the pool's threads at exit); after a failure, at once."""
    requests: list[dict[str, Any]] = []
    inputs = bundle.inputs if isinstance(bundle, GoldenBundle) else _to_send(bundle)
    casts = casts or {}
    inference = _Inference(spec, endpoint, [spec.served_name(name) for name in accumulators], spare, casts)
    # casts are keyed by the served input names; the digests by the golden ones (a renamed FP16 input: both)
    by_golden = {name: casts[spec.sent_name(name)] for name in inputs if spec.sent_name(name) in casts} | casts
    # Every batch is queued at once (slices of the bundle's arrays: views, no copies); the pool's
    # max_in_flight workers bound what is in flight, and they never wait for this thread to hand out work.
    batch, max_in_flight = sizes
    pool = ThreadPoolExecutor(max_workers=max_in_flight, thread_name_prefix=f"nightly-{spec.name}")
    answered = False
    pending: dict[Future[dict[str, np.ndarray]], tuple[int, int]] = {}
    try:
        for a, b in _batches(bundle.num_samples, batch):
            pending[pool.submit(inference.send, {name: array[a:b] for name, array in inputs.items()})] = (a, b)
        on_sent()
        # The requests are in flight; nothing is judged before the bundle is verified: every byte of its files and
        # every sample's recorded fingerprint (the digests reported per request are those fingerprints).
        golden = verified(bundle)
        digests = InputDigests.for_bundle(golden)
        reference = golden.reference
        for future in as_completed(pending):
            first, stop = pending[future]
            answer = future.result()  # an EndpointError ends the endpoint's run here
            sent = {name: array[first:stop] for name, array in inputs.items()}
            requests.append({"first_sample": first, "count": stop - first,
                             "input_sha256": _sent_digests(digests.of(first, stop, sent), sent, by_golden)})
            for name, acc in accumulators.items():
                acc.add(first, np.asarray(answer[spec.served_name(name)]), reference[name][first:stop])
        answered = True
    finally:
        # all answered: a worker closes every channel while this thread compares; else at once
        inference.wind_down(pool, max_in_flight, pending, answered)
    return requests


def _sent_digests(digests: dict[str, str], sent: dict[str, np.ndarray], casts: dict[str, np.dtype]) -> dict[str, str]:
    """Each input's SHA256 as SENT: an input cast to FP16 is the digest of the FP16 bytes (the bundle's recorded
    fingerprints are of its FP32 samples; the ``fp16_deployment`` finding says which is which)."""
    from gapcheck.tensors import fingerprint

    cast = {name: fingerprint(np.ascontiguousarray(as_sent(sent[name], dtype))) for name, dtype in casts.items()
            if name in sent and sent[name].dtype.kind == "f"}
    return {**digests, **cast} if cast else digests


def fp16_budgets(bundle: GoldenBundle | PendingBundle, names: list[str]) -> dict[str, Tolerance]:
    """The golden bundle's tolerance policy (its rtol, atol and overrides as recorded) at FP16, per output: what
    export-diff compares an FP16 deployment with (:meth:`gapcheck.groups.tolerance.ToleranceSpec.policy`)."""
    from gapcheck.groups.tolerance import ToleranceSpec

    recorded = bundle.manifest.get("tolerances", {})
    try:
        overrides = {str(k): (float(v["rtol"]), float(v["atol"]))
                     for k, v in (recorded.get("overrides") or {}).items()}
        spec = ToleranceSpec(rtol=_number(recorded.get("rtol")), atol=_number(recorded.get("atol")),
                             overrides=overrides)
        policy = spec.policy("fp16")
    except (GapcheckError, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise BadBundle(f"the golden bundle's tolerances cannot be read: {one_line(exc)}") from None
    dtypes = {o.name: o.dtype for o in bundle.output_infos}
    return {name: policy.for_name(name, dtypes.get(name, "float32")) for name in names}


def _number(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"not a number: {value!r}")
    return float(value)


def _to_send(bundle: PendingBundle) -> dict[str, np.ndarray]:
    """A pending bundle's inputs, to send while their hashes run, never to judge; BadBundle when they cannot be read."""
    try:
        return bundle.unverified_inputs
    except InputError as exc:
        raise BadBundle(exc.message, hint=exc.hint) from None


def _comparison_findings(spec: EndpointSpec, bundle: GoldenBundle | PendingBundle, accumulators: list[_Accumulator],
                         comparisons: tuple[OutputComparison, ...]) -> list[Finding]:
    from gapcheck.codes.nightly import GOLDEN_MISMATCH, OUTPUT_TYPE

    found = []
    for acc in accumulators:
        if acc.width_change is not None and acc.type_problem is None:
            found.append(OUTPUT_TYPE.finding(
                f"{spec.name} output {shown_name(acc.name)}: {acc.width_change} (values compared with the bundle's tolerances)",
                subject=Subject(endpoint=spec.name, output=acc.name), severity=Severity.WARNING,
                evidence={"problem": acc.width_change}))
    for c in comparisons:
        if c.type_problem is not None:
            found.append(OUTPUT_TYPE.finding(
                f"{spec.name} output {shown_name(c.output)}: {c.type_problem}: no sample can be compared",
                subject=Subject(endpoint=spec.name, output=c.output),
                evidence={"problem": c.type_problem, "samples": bundle.num_samples}))
        elif not c.passed:
            worst = ", ".join(f"#{w.sample} (|err| {w.max_abs:.3g}, {w.error_ratio:.3g}x its tolerance)"
                              for w in c.worst if not w.passed)
            served = spec.served_name(c.output)
            # a deployment that lists same-shaped outputs in another order fails here when paired by position
            paired = (f"; compared with served output {shown_name(served)}: if that is another output of the model, pair them "
                      f"for this endpoint only with triton_output_map = \"{c.output}=SERVED\" in its "
                      f"[[nightly.endpoints]] entry (--triton-output-map {c.output}=SERVED maps every endpoint)"
                      ) if served != c.output else ""
            nonfinite = c.nonfinite()  # an all-NaN answer is "max |err| inf": say what the server sent
            found.append(GOLDEN_MISMATCH.finding(
                f"{spec.name} output {shown_name(c.output)}: {c.failing_samples}/{bundle.num_samples} samples differ "
                f"from the golden reference, max |err| {c.max_abs:.3g}{f' ({nonfinite})' if nonfinite else ''} "
                f"(rtol {c.rtol:g}, atol {c.atol:g}); worst {worst}{paired}",
                subject=Subject(endpoint=spec.name, output=c.output),
                evidence={"max_abs_error": c.max_abs, "max_rel_error": c.max_rel, "error_ratio": c.error_ratio,
                          "failing_samples": c.failing_samples, "samples": bundle.num_samples,
                          "worst_samples": [w.as_dict() for w in c.worst], "rtol": c.rtol, "atol": c.atol,
                          "served_nan": c.served_nan, "served_inf": c.served_inf, "served_values": c.served_values}))
    return found

"""Remote reads (``http(s)://``, ``s3://``, ``gs://``, ... through fsspec) under the Triton client's rules.

Every remote read — a listing, a footer or header read, a whole image, one block of a streamed
table — has ONE total deadline (``[remote] timeout_s``, ``--remote-timeout``; 30 s by default) that
all its attempts share: transient failures (no answer, a refused or reset connection, HTTP
408/429/5xx) are retried up to ``retries`` (3) times with exponential backoff from 0.2 s capped at
2 s, but only while the deadline leaves time, so one read ends within ``timeout_s`` (plus the
moment it takes to notice). Two layers enforce it: for HTTP the aiohttp session itself gets
``ClientTimeout(total=…)`` (aiohttp's default is 300 s, the 302 s a silent server used to cost), and
for every protocol the attempt runs in a watchdog thread the caller stops waiting for when the
deadline's remaining time is spent.

Each retry is logged at WARNING (the CLI shows it: progress while a server stalls). A read that
failed raises :class:`RemoteReadError` (an :class:`~gapcheck.errors.EndpointError`: exit 3) with
one line naming the location (credentials redacted) and what happened. A host that failed a read
fails the next reads in the same process at once (for :data:`BREAKER_S`), so a dead server costs
one deadline per worker, not one per item.

The settings come from the :class:`~gapcheck.groups.remote.RemoteSpec` group (file < environment <
flags); the CLI hands them to every worker through ``GAPCHECK_REMOTE_TIMEOUT_S`` /
``GAPCHECK_REMOTE_RETRIES`` (the environment travels to process pools and a local Ray), which
library callers may set too. ``memory://`` and local paths are not remote.
"""
from __future__ import annotations

import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from gapcheck.errors import EndpointError, UsageError, one_line
from gapcheck.groups.remote import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    MAX_RETRIES,
    MAX_TIMEOUT_S,
    RETRIES_ENV,
    TIMEOUT_ENV,
)
from gapcheck.triton.url import clean_text, redact, secrets_in

logger = logging.getLogger(__name__)

T = TypeVar("T")
LOCAL_PROTOCOLS = frozenset({"file", "local", "memory"})
BREAKER_S = 300.0  # after a host failed every attempt, its next reads in this process fail at once for this long
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# ``scheme://user:password@`` anywhere in a text: a chained fsspec URL (``zip://a.csv::http://u:pw@h/a.zip``) or
# a library's message quoting the URL carries credentials past the first segment.
_USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([^/@\s'\"]+)@")


class RemoteReadError(EndpointError):
    """A remote read failed every attempt (no answer within the deadline, connection refused, 5xx): exit 3."""


@dataclass(frozen=True)
class RemotePolicy:
    """Deadline and retries of one remote call (the Triton client's defaults)."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES
    backoff_s: float = 0.2

    def __post_init__(self) -> None:
        for name, value, high in (("timeout_s", self.timeout_s, MAX_TIMEOUT_S), ("backoff_s", self.backoff_s, 60.0)):
            if not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 < value <= high:
                raise UsageError(f"the remote read {name} must be a number in (0, {high:g}], got {value!r}",
                                 parameter=f"remote_{name}")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or not 0 <= self.retries <= MAX_RETRIES:
            raise UsageError(f"the remote read retries must be an integer in [0, {MAX_RETRIES}], got {self.retries!r}",
                             parameter="remote_retries")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> "RemotePolicy":
        """The settings a worker reads: the environment the CLI sets from the resolved ``RemoteSpec`` group
        (:meth:`gapcheck.groups.remote.RemoteSpec.applied`), else the defaults."""
        env = os.environ if environ is None else environ
        timeout, retries = env.get(TIMEOUT_ENV), env.get(RETRIES_ENV)
        try:
            return cls(timeout_s=float(timeout) if timeout else DEFAULT_TIMEOUT_S,
                       retries=int(retries) if retries else DEFAULT_RETRIES)
        except ValueError as exc:
            raise UsageError(f"{TIMEOUT_ENV}/{RETRIES_ENV}: {exc}") from None

    def storage_options(self, protocol: str) -> dict[str, Any]:
        """fsspec options that bound every request of ``protocol`` by itself (HTTP: aiohttp's total timeout)."""
        if protocol in ("http", "https"):
            import aiohttp

            t = self.timeout_s
            return {"client_kwargs": {"timeout": aiohttp.ClientTimeout(total=t, connect=t, sock_read=t)}}
        return {}


def protocol_of(location: str) -> str:
    head, sep, _ = location.partition("://")
    return head.lower().split("::")[-1] if sep else "file"


def is_remote(location: str) -> bool:
    return "://" in location and protocol_of(location) not in LOCAL_PROTOCOLS


def host_of(location: str) -> str:
    rest = location.partition("://")[2]
    return f"{protocol_of(location)}://{rest.split('/', 1)[0].rsplit('@', 1)[-1]}"


def _userinfo(text: str) -> list[str]:
    """Every URL userinfo in ``text`` (and its ``:``-separated parts), wherever the URL starts."""
    found: list[str] = []
    for match in _USERINFO.finditer(text):
        found.append(match.group(1))
        found.extend(part for part in match.group(1).split(":") if len(part) >= 3)
    return found


def _hidden_parts(location: str) -> tuple[str, ...]:
    """The parts of a remote URL that may carry a token and are never printed: the userinfo, the query and fragment
    (a presigned ``?sig=``), and the folders between the host and the file (``/<token>/a.csv``). A chained URL
    (``zip://a.csv::s3://key:secret@bucket/a.zip``) hides the parts of every segment."""
    if "::" in location:
        parts = [p for segment in location.split("::") if segment for p in _hidden_parts(segment)]
        return tuple(sorted(set(parts + _userinfo(location)), key=len, reverse=True))
    if not is_remote(location):
        return secrets_in(location, None)
    rest = location.partition("://")[2]
    path, _, query = rest.partition("?")
    path, _, fragment = path.partition("#")
    parts = list(secrets_in(location, None))
    parts += [piece for piece in (query, fragment) if piece]
    folders = path.split("/", 1)[1].rsplit("/", 1)[0] if path.count("/") >= 2 else ""
    if folders:
        parts.append(folders)
    return tuple(sorted(set(parts), key=len, reverse=True))


def shown(text: str, location: str | None = None) -> str:
    """``text`` (a location, or a message about ``location``) safe to print: URL credentials, query strings and a
    remote URL's folders replaced, control characters neutralized."""
    hidden = _hidden_parts(text if location is None else location) + secrets_in(text, None) + tuple(_userinfo(text))
    return clean_text(redact(text, tuple(sorted(set(hidden), key=len, reverse=True))), limit=200)


def filesystem(location: str, policy: RemotePolicy | None = None) -> tuple[Any, str]:
    """``(fs, path)`` for ``location`` with the deadline's storage options (remote protocols)."""
    import fsspec

    options = (policy or RemotePolicy.from_env()).storage_options(protocol_of(location)) if is_remote(location) else {}
    return fsspec.core.url_to_fs(location, **options)


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 8:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def is_transient(exc: BaseException) -> bool:
    """No answer, a refused/reset connection, or a retryable HTTP status, anywhere in the exception's chain
    (fsspec's HTTP ``info`` turns any failure into ``FileNotFoundError`` from the real cause)."""
    import asyncio

    for item in _chain(exc):
        status = getattr(item, "status", None)
        if isinstance(status, int) and status in _TRANSIENT_STATUS:
            return True
        if isinstance(item, (TimeoutError, asyncio.TimeoutError, ConnectionError)):
            return True
        name = type(item).__name__
        if name in ("ClientConnectionError", "ClientConnectorError", "ServerDisconnectedError",
                    "ClientPayloadError", "ServerTimeoutError", "ClientOSError", "FSTimeoutError"):
            return True
    return False


_broken: dict[str, tuple[float, str]] = {}  # host -> (when it failed every attempt, why); per process
_broken_lock = threading.Lock()


def _within(fn: Callable[[], T], seconds: float) -> T:
    """``fn()`` in a daemon thread; stop waiting after ``seconds`` (the thread is abandoned: for HTTP the
    session's own timeout ends it soon after)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=run, name="gapcheck-remote-read", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise TimeoutError(f"no complete answer within the total deadline of {seconds:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def remote_call(what: str, location: str, fn: Callable[[], T], policy: RemotePolicy | None = None) -> T:
    """Run ``fn`` (one remote request) under the policy's total deadline with bounded retries.

    Permanent failures (not found, permission, bad data) are raised unchanged for the caller to report;
    transient ones are retried and, when every attempt failed, become one :class:`RemoteReadError`."""
    if not is_remote(location):
        return fn()
    policy = policy or RemotePolicy.from_env()
    host = host_of(location)
    with _broken_lock:
        broke = _broken.get(host)
    if broke and time.monotonic() - broke[0] < BREAKER_S:
        raise RemoteReadError(f"remote read of {shown(location)} ({what}) not tried: an earlier read from "
                              f"{shown(host)} failed every attempt ({broke[1]})")
    attempts = policy.retries + 1
    deadline = time.monotonic() + policy.timeout_s  # ONE deadline for the read: every attempt and pause inside it
    last, tried = "", 0
    for attempt in range(1, attempts + 1):
        tried = attempt
        try:
            return _within(fn, max(deadline - time.monotonic(), 0.001))
        except Exception as exc:  # noqa: BLE001 - classified below; permanent ones go back unchanged
            if not is_transient(exc):
                raise
            cause = exc.__cause__ if isinstance(exc, FileNotFoundError) and exc.__cause__ else exc
            last = shown(one_line(cause), location=location)
        pause = min(policy.backoff_s * 2 ** (attempt - 1), 2.0)
        if attempt == attempts or time.monotonic() + pause >= deadline:
            break  # no time left for another attempt
        logger.warning("remote read of %s (%s): attempt %d/%d failed (%s); retrying in %.1f s",
                       shown(location), what, attempt, attempts, last, pause)
        time.sleep(pause)
    with _broken_lock:
        _broken[host] = (time.monotonic(), last)
    tries = f" after {tried} attempt(s)" if tried > 1 else ""
    raise RemoteReadError(f"remote read of {shown(location)} ({what}) failed{tries} within its total deadline of "
                          f"{policy.timeout_s:g} s: {last}")


def forget_failures() -> None:
    """Clear the per-process record of failed hosts (tests; a long-lived process after a server came back)."""
    with _broken_lock:
        _broken.clear()


def read_all(url: str, limit: int, policy: RemotePolicy | None = None) -> bytes:
    """A remote file's bytes (at most ``limit`` + 1 read), each attempt on a fresh handle."""
    policy = policy or RemotePolicy.from_env()

    def fetch() -> bytes:
        fs, path = filesystem(url, policy)
        with fs.open(path, "rb") as handle:
            size = getattr(handle, "size", None)
            if size is not None and size > limit:
                raise ValueError(f"{size} bytes is over the {limit} byte limit")
            return bytes(handle.read(limit + 1))

    return remote_call("read", url, fetch, policy)


class GuardedFile:
    """A read-only remote file whose every request runs under :func:`remote_call`; a retry reopens the file
    and seeks back, so a request abandoned at its deadline never shares a handle with the next one."""

    def __init__(self, url: str, policy: RemotePolicy | None = None) -> None:
        self.url = url
        self.policy = policy or RemotePolicy.from_env()
        self._handle: Any = None
        self._owner: object | None = None
        self._position = 0
        self.closed = False
        self.size = self._call("open", lambda: getattr(self._open(), "size", None))

    def _open(self) -> Any:
        if self._handle is None:
            fs, path = filesystem(self.url, self.policy)
            self._handle = fs.open(path, "rb")
        return self._handle

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        def attempt() -> T:
            token = object()
            if self._owner is not None:  # the previous attempt was abandoned at its deadline: not its handle
                self._handle = None
            self._owner = token
            try:
                return fn()
            except BaseException:
                if self._owner is token:
                    self._handle = None  # possibly mid-request: the next attempt opens its own
                raise
            finally:
                if self._owner is token:
                    self._owner = None

        return remote_call(what, self.url, attempt, self.policy)

    def read(self, size: int = -1) -> bytes:
        start = self._position

        def fetch() -> bytes:
            handle = self._open()
            handle.seek(start)
            return bytes(handle.read(size))

        data = self._call("read", fetch)
        self._position = start + len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(memoryview(buffer)))
        memoryview(buffer)[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 2:
            if self.size is None:
                raise OSError("cannot seek from the end of a remote file of unknown size")
            offset += int(self.size)
        elif whence == 1:
            offset += self._position
        self._position = max(0, int(offset))
        return self._position

    def tell(self) -> int:
        return self._position

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        handle, self._handle, self.closed = self._handle, None, True
        if handle is not None:
            try:
                handle.close()
            except Exception:  # noqa: BLE001 - closing a half-read remote handle must not mask the result
                logger.debug("closing %s failed", shown(self.url), exc_info=True)

    def __enter__(self) -> "GuardedFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_file(url: str) -> Any:
    """A binary read handle: a :class:`GuardedFile` for remote URLs, fsspec's own for local and ``memory://``."""
    if is_remote(url):
        return GuardedFile(url)
    import fsspec

    return fsspec.open(url, "rb").open()

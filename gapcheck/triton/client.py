"""A thin, retrying wrapper over ``tritonclient`` that speaks HTTP and gRPC the same way.

Every call is bounded (per-call timeout, a fixed number of retries with exponential
backoff) and every failure ends as one :class:`gapcheck.errors.EndpointError` whose
message never contains a header value or URL credentials. Answers come back as plain
dicts with the HTTP/JSON field names for both protocols, so callers need not care
which one was used. Where the server is and how to talk to it (protocol, headers, TLS, timeout,
retries) is one value, :class:`TritonEndpoint`, that every Triton entry point takes.
"""
from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from gevent import Timeout as GeventTimeout
from google.protobuf.json_format import MessageToDict
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from gapcheck.errors import EndpointError, UsageError

logger = logging.getLogger(__name__)

T = TypeVar("T")
PROTOCOLS = ("grpc", "http")
REDACTED = "***"
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_RETRIES = 3

# Statuses worth another try: the server is starting, overloaded, or the network blinked.
_TRANSIENT_HTTP = {"408", "429", "500", "502", "503", "504"}
_TRANSIENT_GRPC = {"StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED", "StatusCode.RESOURCE_EXHAUSTED",
                   "StatusCode.INTERNAL", "StatusCode.UNKNOWN", "StatusCode.ABORTED"}
_TRANSIENT_TEXT = re.compile(r"not ready|unavailable|loading|timed? ?out|connection", re.IGNORECASE)
# Triton answers a missing/wrong auth header with UNAVAILABLE over gRPC; asking again cannot help.
_PERMANENT_TEXT = re.compile(r"restricted|unauthori[sz]ed|permission|forbidden", re.IGNORECASE)


@dataclass(frozen=True)
class TlsOptions:
    """TLS material (file paths). ``insecure`` skips certificate verification (HTTP only)."""

    root_certificates: str | None = None
    private_key: str | None = None
    certificate_chain: str | None = None
    insecure: bool = False


@dataclass(frozen=True)
class ServerAddress:
    """Where a server is, as the user gave it, minus anything secret."""

    address: str  # host:port, no scheme, no credentials
    ssl: bool

    @property
    def display(self) -> str:
        return ("https://" if self.ssl else "") + self.address


def parse_url(url: str, *, ssl: bool = False) -> ServerAddress:
    """Accept ``host:port``, ``http://host:port``, ``https://host:port`` or ``grpc://host:port``; drop userinfo."""
    text = url.strip()
    match = re.match(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*)://(?P<rest>.*)$", text)
    if match:
        scheme = match.group("scheme").lower()
        if scheme not in ("http", "https", "grpc", "grpcs"):
            raise UsageError(f"unsupported URL scheme {scheme!r} for a Triton server (use host:port)")
        ssl = ssl or scheme in ("https", "grpcs")
        text = match.group("rest")
    text = text.split("@")[-1].rstrip("/")  # credentials in the URL are never used nor shown
    if not text or "/" in text:
        raise UsageError("a Triton URL is host:port (optionally with a scheme), without a path")
    return ServerAddress(address=text, ssl=ssl)


def secrets_in(url: str, headers: dict[str, str] | None) -> tuple[str, ...]:
    """Every string that must never be printed: header values and URL userinfo."""
    values = [v for v in (headers or {}).values() if v]
    userinfo = re.match(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*://)?([^/@]+)@", url.strip())
    if userinfo:
        values.append(userinfo.group(1))
        values.extend(p for p in userinfo.group(1).split(":") if len(p) >= 3)
    # Longest first so a secret that contains another is replaced whole.
    return tuple(sorted(set(values), key=len, reverse=True))


def redact(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return text


@dataclass(frozen=True)
class TritonEndpoint:
    """How to reach one Triton server: the value every Triton entry point takes.

    ``headers`` (e.g. auth tokens) and credentials in ``url`` are secrets: they stay out of the repr,
    and :attr:`display_url` is the only form of the location meant for messages and reports.
    """

    url: str = field(repr=False)
    protocol: str = "grpc"
    headers: dict[str, str] = field(default_factory=dict, repr=False, hash=False)
    ssl: bool = False
    tls: TlsOptions | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise UsageError(f"protocol must be one of {', '.join(PROTOCOLS)}, not {self.protocol!r}")
        if self.timeout_s <= 0 or self.retries < 0:
            raise UsageError("timeout must be positive and retries non-negative")
        # A private copy: the caller's dict may change later, this value must not.
        object.__setattr__(self, "headers", dict(self.headers or {}))
        parse_url(self.url)  # a URL that is not host:port is a usage error when the endpoint is made

    def __repr__(self) -> str:
        # Written by hand (dataclasses keep a class's own __repr__) to show the location, redacted.
        return (f"TritonEndpoint({self.display_url!r}, protocol={self.protocol!r}, "
                f"headers=<{len(self.headers)} hidden>, ssl={self.ssl!r}, tls={self.tls!r}, "
                f"timeout_s={self.timeout_s!r}, retries={self.retries!r})")

    @property
    def address(self) -> ServerAddress:
        """host:port and whether TLS is on (TLS options imply TLS), without credentials."""
        return parse_url(self.url, ssl=self.ssl or self.tls is not None)

    @property
    def display_url(self) -> str:
        """The location, safe to print: no URL credentials, never a header."""
        return self.address.display

    @property
    def secrets(self) -> tuple[str, ...]:
        return secrets_in(self.url, self.headers)

    def connect(self, *, backoff_s: float = 0.2) -> "TritonConnection":
        """A client for this endpoint (close it, or use it as a context manager)."""
        return TritonConnection(self, backoff_s=backoff_s)


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, InferenceServerException):
        status = str(exc.status() or "")
        if _PERMANENT_TEXT.search(exc.message() or ""):
            return False
        return status in _TRANSIENT_HTTP or status in _TRANSIENT_GRPC or bool(_TRANSIENT_TEXT.search(exc.message() or ""))
    return isinstance(exc, (OSError, TimeoutError, GeventTimeout))


def _describe(exc: BaseException) -> str:
    if isinstance(exc, InferenceServerException):
        status = exc.status()
        return f"[{status}] {exc.message()}" if status else str(exc.message())
    if isinstance(exc, GeventTimeout):
        return "timed out"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _ints(values: Any) -> list[int]:
    # gRPC's JSON renders int64 dims as strings.
    return [int(v) for v in values or []]


def _normalize_io(entries: list[dict[str, Any]], dims_key: str) -> list[dict[str, Any]]:
    out = []
    for entry in entries or []:
        entry = dict(entry)
        entry[dims_key] = _ints(entry.get(dims_key))
        if "reshape" in entry and isinstance(entry["reshape"], dict):
            entry["reshape"] = {"shape": _ints(entry["reshape"].get("shape"))}
        out.append(entry)
    return out


class TritonConnection:
    """One client (HTTP or gRPC) with bounded, redacted, retrying calls."""

    def __init__(self, endpoint: TritonEndpoint, *, backoff_s: float = 0.2) -> None:
        self.endpoint = endpoint
        self.protocol = endpoint.protocol
        self.address = endpoint.address
        self._secrets = endpoint.secrets
        # gRPC metadata keys must be lower case; HTTP header names are case-insensitive anyway.
        self._headers = {k.lower(): v for k, v in endpoint.headers.items()} or None
        self.timeout_s = float(endpoint.timeout_s)
        self.retries = int(endpoint.retries)
        self.backoff_s = float(backoff_s)
        tls = endpoint.tls or TlsOptions()
        if self.protocol == "http":
            self._client: Any = httpclient.InferenceServerClient(
                self.address.address,
                connection_timeout=self.timeout_s,
                network_timeout=self.timeout_s,
                ssl=self.address.ssl,
                ssl_options=({"ca_certs": tls.root_certificates} if tls.root_certificates else None),
                insecure=tls.insecure,
            )
        else:
            self._client = grpcclient.InferenceServerClient(
                self.address.address,
                ssl=self.address.ssl,
                root_certificates=tls.root_certificates,
                private_key=tls.private_key,
                certificate_chain=tls.certificate_chain,
            )

    @property
    def display_url(self) -> str:
        return self.endpoint.display_url

    def redact(self, text: str) -> str:
        return redact(text, self._secrets)

    def call(self, what: str, fn: Callable[[], T], *, retry_if: Callable[[T], bool] | None = None) -> T:
        """Run ``fn`` with retries for transient failures (and while ``retry_if(result)``); EndpointError after."""
        attempts = self.retries + 1
        last = ""
        for attempt in range(1, attempts + 1):
            try:
                result = fn()
            except (InferenceServerException, OSError, TimeoutError, GeventTimeout) as exc:
                last = self.redact(_describe(exc))
                if not _is_transient(exc):
                    raise EndpointError(self._message(what, last, attempt)) from None
                logger.debug("%s: attempt %d/%d failed: %s", what, attempt, attempts, last)
            else:
                if retry_if is None or not retry_if(result):
                    return result
                last = "not ready"
                if attempt == attempts:
                    return result
            if attempt < attempts:
                time.sleep(min(self.backoff_s * 2 ** (attempt - 1), 2.0))
        raise EndpointError(self._message(what, last, attempts))

    def _message(self, what: str, detail: str, attempts: int) -> str:
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        return f"Triton {self.protocol} endpoint {self.display_url}: {what} failed{tries}: {detail}"

    # --- health and metadata -------------------------------------------------------------------------
    def _kw(self) -> dict[str, Any]:
        return {"headers": self._headers} if self.protocol == "http" else {
            "headers": self._headers, "client_timeout": self.timeout_s}

    def server_live(self) -> bool:
        return bool(self.call("server liveness", lambda: self._client.is_server_live(**self._kw()),
                              retry_if=lambda ok: not ok))

    def server_ready(self) -> bool:
        return bool(self.call("server readiness", lambda: self._client.is_server_ready(**self._kw()),
                              retry_if=lambda ok: not ok))

    def server_metadata(self) -> dict[str, Any]:
        answer = self.call("server metadata", lambda: self._client.get_server_metadata(**self._kw()))
        return self._as_dict(answer)

    def model_ready(self, model: str, version: str | None = None, *, wait: bool = True) -> bool:
        return bool(self.call(
            f"readiness of model {model!r}",
            lambda: self._client.is_model_ready(model, version or "", **self._kw()),
            retry_if=(lambda ok: not ok) if wait else None,
        ))

    def model_metadata(self, model: str, version: str | None = None) -> dict[str, Any]:
        answer = self._as_dict(self.call(
            f"metadata of model {model!r}", lambda: self._client.get_model_metadata(model, version or "", **self._kw())))
        answer["inputs"] = _normalize_io(answer.get("inputs", []), "shape")
        answer["outputs"] = _normalize_io(answer.get("outputs", []), "shape")
        return answer

    def model_config(self, model: str, version: str | None = None) -> dict[str, Any]:
        answer = self._as_dict(self.call(
            f"config of model {model!r}", lambda: self._client.get_model_config(model, version or "", **self._kw())))
        config = answer.get("config", answer) if self.protocol == "grpc" else answer
        config = dict(config)
        config["max_batch_size"] = int(config.get("max_batch_size", 0) or 0)
        config["input"] = _normalize_io(config.get("input", []), "dims")
        config["output"] = _normalize_io(config.get("output", []), "dims")
        return config

    def repository_index(self) -> list[dict[str, Any]]:
        """Every model the repository knows: name, version, state, reason (as far as the server says)."""
        answer = self.call("model repository index", lambda: self._client.get_model_repository_index(**self._kw()))
        entries = self._as_dict(answer)
        if isinstance(entries, dict):
            entries = entries.get("models", [])
        return [dict(e) for e in entries]

    # --- model control -------------------------------------------------------------------------------
    def load_model(self, model: str, *, config: str | None = None, files: dict[str, bytes] | None = None) -> None:
        def load() -> None:
            if self.protocol == "http":
                self._client.load_model(model, headers=self._headers, config=config, files=files)
            else:
                self._client.load_model(model, config=config, files=files, **self._kw())
        self.call(f"loading model {model!r}", load)

    def unload_model(self, model: str) -> None:
        self.call(f"unloading model {model!r}", lambda: self._client.unload_model(model, **self._kw()))

    # --- inference -----------------------------------------------------------------------------------
    def infer(
        self, model: str, feeds: dict[str, np.ndarray], outputs: list[str], version: str | None = None
    ) -> dict[str, np.ndarray]:
        module = httpclient if self.protocol == "http" else grpcclient
        inputs = []
        for name, array in feeds.items():
            array = np.ascontiguousarray(array)
            tensor = module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            if self.protocol == "http":
                tensor.set_data_from_numpy(array, binary_data=True)
            else:
                tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        requested = [
            module.InferRequestedOutput(name, binary_data=True) if self.protocol == "http"
            else module.InferRequestedOutput(name)
            for name in outputs
        ]

        def run() -> Any:
            if self.protocol == "http":
                return self._client.infer(model, inputs, model_version=version or "", outputs=requested,
                                          headers=self._headers)
            return self._client.infer(model, inputs, model_version=version or "", outputs=requested,
                                      **self._kw())

        result = self.call(f"inference on model {model!r}", run)
        arrays = {}
        for name in outputs:
            array = result.as_numpy(name)
            if array is None:
                raise EndpointError(f"Triton {self.protocol} endpoint {self.display_url}: "
                                    f"model {model!r} returned no output {name!r}")
            arrays[name] = array
        return arrays

    def _as_dict(self, answer: Any) -> Any:
        if self.protocol == "grpc" and not isinstance(answer, (dict, list)):
            return MessageToDict(answer, preserving_proto_field_name=True)
        return answer

    def close(self) -> None:
        try:
            self._client.close()
        except Exception as exc:  # noqa: BLE001 - closing must never mask the real outcome
            logger.debug("closing the Triton client failed: %s", self.redact(str(exc)))

    def __enter__(self) -> "TritonConnection":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

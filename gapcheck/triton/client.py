"""A thin, retrying wrapper over ``tritonclient`` that speaks HTTP and gRPC the same way.

Every call has a TOTAL deadline (``timeout_s``): gRPC carries it as the call's deadline, and
HTTP runs the whole request under a gevent timer, because the HTTP client's own timeout is per
socket read and a server that trickles one byte at a time would otherwise hold it forever.
Transient failures are retried a fixed number of times with exponential backoff, so one
call ends within ``(retries + 1) * timeout_s`` plus the backoff (at most 2 s a pause).

Every failure crossing this module's boundary is one gapcheck error whose message never holds
a header value or URL credentials (header values are checked before use, and every message is
redacted and freed of control characters):

- :class:`RestrictedApiError` — the server restricts that API (``--http-restricted-api`` /
  ``--grpc-restricted-protocol``) and the access header is missing or wrong. Not retried; exit 2,
  since only the caller can fix it. Callers that can do without the API catch it and say so.
- :class:`ProtocolMismatchError` — the port answers the other protocol (exit 2).
- :class:`gapcheck.errors.EndpointError` — anything else (exit 3).

Answers come back as plain dicts with the HTTP/JSON field names for both protocols. Where the
server is and how to talk to it is one value, :class:`TritonEndpoint`; a URL without a scheme
leaves the protocol open and the first connection probes for it (:mod:`gapcheck.triton.probe`).
"""
from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote

import gevent
import numpy as np

# gRPC's C core logs a failed TLS handshake to stderr at INFO, beside gapcheck's own one-line error.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
import tritonclient.grpc as grpcclient  # noqa: E402 - after the verbosity is set
import tritonclient.http as httpclient
from google.protobuf.json_format import MessageToDict
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from gapcheck.errors import EndpointError, one_line
from gapcheck.tensors import contiguous
from gapcheck.triton.bounded_http import BoundedHttpClient, ResponseTooLargeError
from gapcheck.triton.endpoint import (
    PROTOCOLS,
    MalformedAnswerError,
    ProtocolMismatchError,
    RequestRejectedError,
    RestrictedApiError,
    ServerAddress,
    TlsMismatchError,
    TritonEndpoint,
    parse_url,
)
from gapcheck.triton.probe import probe_protocol, speaks_tls
from gapcheck.triton.url import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    REDACTED,
    TlsOptions,
    clean_text,
    redact,
    secrets_in,
)

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_RETRIES", "DEFAULT_TIMEOUT_S", "PROTOCOLS", "REDACTED", "MalformedAnswerError",
           "ProtocolMismatchError", "RequestRejectedError", "ResponseTooLargeError", "RestrictedApiError",
           "ServerAddress", "TlsMismatchError", "TlsOptions", "TritonConnection", "TritonEndpoint", "connect",
           "parse_url", "redact", "release_thread_hub", "secrets_in"]

T = TypeVar("T")
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"  # how Triton's gRPC frontend spells a restricted protocol's key

# Statuses worth another try: the server is starting, overloaded, or the network blinked.
_TRANSIENT_HTTP = {"408", "429", "500", "502", "503", "504"}
_TRANSIENT_GRPC = {"StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED", "StatusCode.RESOURCE_EXHAUSTED",
                   "StatusCode.INTERNAL", "StatusCode.UNKNOWN", "StatusCode.ABORTED"}
_TRANSIENT_TEXT = re.compile(r"not ready|unavailable|loading|timed? ?out|connection", re.IGNORECASE)
# The server's "your request is wrong": a deployment/config gap or a wrong name, never an outage (RequestRejectedError).
_REJECTED = {"400", "404", "413", "422", "StatusCode.INVALID_ARGUMENT", "StatusCode.NOT_FOUND",
             "StatusCode.OUT_OF_RANGE"}
_RESTRICTED = re.compile(r"\bis restricted\b", re.IGNORECASE)
_EXPECTED_HEADER = re.compile(r"expecting header '([^']{1,200})'")
# Triton answers a missing/wrong auth header with UNAVAILABLE over gRPC; asking again cannot help.
_PERMANENT_TEXT = re.compile(r"restricted|unauthori[sz]ed|permission|forbidden|larger than max|deserializ",
                             re.IGNORECASE)
# A gRPC client on an HTTP/1 port sees the socket closed; an HTTP client on a gRPC port cannot parse the answer.
_WRONG_PROTOCOL_TEXT = re.compile(r"socket closed|failed to connect|expected http|parse|protocol|incomplete",
                                  re.IGNORECASE)
# A TLS client whose server answered in plain text.
_TLS_FAILED_TEXT = re.compile(r"ssl|tls|handshake|wrong.version.number", re.IGNORECASE)


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, InferenceServerException):
        status = str(exc.status() or "")
        if _PERMANENT_TEXT.search(exc.message() or ""):
            return False
        return status in _TRANSIENT_HTTP or status in _TRANSIENT_GRPC or bool(_TRANSIENT_TEXT.search(exc.message() or ""))
    return isinstance(exc, (OSError, TimeoutError, gevent.Timeout))


def _describe(exc: BaseException) -> str:
    if isinstance(exc, InferenceServerException):
        status = exc.status()
        return f"[{status}] {exc.message()}" if status else str(exc.message())
    if isinstance(exc, ValueError) and not isinstance(exc, UnicodeError) and "JSON" in type(exc).__name__:
        return f"the answer is not valid JSON ({one_line(exc)})"
    return one_line(exc)


def _answer_outputs(result: Any) -> list[tuple[str, list[Any]]]:
    """The outputs an inference answer carries, in order, as (name, declared shape) (HTTP: a JSON dict; gRPC: a
    protobuf message)."""
    response = result.get_response()
    entries = response.get("outputs") if isinstance(response, dict) else getattr(response, "outputs", None)
    try:
        entries = list(entries or [])  # protobuf's repeated fields iterate without an __iter__ attribute
    except TypeError:
        return []  # not a list of outputs: tritonclient's own reading says what is wrong with it
    outputs = []
    for entry in entries:
        name, shape = (entry.get("name"), entry.get("shape")) if isinstance(entry, dict) else (
            getattr(entry, "name", ""), getattr(entry, "shape", None))
        try:
            dims = list(shape or [])
        except TypeError:
            dims = []
        outputs.append((str(name), dims))
    return outputs


def _ints(values: Any) -> list[int]:
    # gRPC's JSON renders int64 dims as strings.
    return [int(v) for v in values or []]


def _normalize_io(entries: Any, dims_key: str) -> list[dict[str, Any]]:
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
        self.detected = endpoint.protocol is None  # True when a probe chose the protocol
        self.endpoint = endpoint.resolve(backoff_s=backoff_s)
        self.protocol: str = self.endpoint.protocol or "grpc"
        self.address = self.endpoint.address
        self._secrets = self.endpoint.secrets
        self._credentials = secrets_in("", self.endpoint.headers)  # their fragments too (a server's own words)
        self._headers = self._request_headers(self.endpoint.headers)
        # The endpoint's own per-attempt timeout; timeout_s is capped per attempt, per thread (one gRPC connection
        # serves several threads at once: each caps its own attempt, and its call reads its own cap).
        self._attempt_timeout_s = float(self.endpoint.timeout_s)
        self._attempt = threading.local()
        self.retries = int(self.endpoint.retries)
        self.max_response_bytes = int(self.endpoint.max_response_bytes)
        self.backoff_s = float(backoff_s)
        self._protocol_checked = False
        self._client: Any = self._make_client()

    def _request_headers(self, headers: dict[str, str]) -> dict[str, str] | None:
        # gRPC metadata keys must be lower case; HTTP header names are case-insensitive anyway.
        lowered = {k.lower(): v for k, v in headers.items()}
        if self.protocol == "grpc":
            # Triton's gRPC frontend checks a restricted protocol's key under a prefix; sending both
            # spellings lets one `triton-access-token` header work over both protocols.
            for key, value in list(lowered.items()):
                if not key.startswith(GRPC_HEADER_PREFIX):
                    lowered.setdefault(GRPC_HEADER_PREFIX + key, value)
        return lowered or None

    def _make_client(self) -> Any:
        tls = self.endpoint.tls or TlsOptions()
        if self.protocol == "http":
            client = BoundedHttpClient(
                self.address.address,
                connection_timeout=self.timeout_s,
                network_timeout=self.timeout_s,
                ssl=self.address.ssl,
                ssl_options=({"ca_certs": tls.root_certificates} if tls.root_certificates else None),
                insecure=tls.insecure,
            )
            client.max_response_bytes = self.max_response_bytes
            return client
        return grpcclient.InferenceServerClient(
            self.address.address,
            ssl=self.address.ssl,
            root_certificates=tls.root_certificates,
            private_key=tls.private_key,
            certificate_chain=tls.certificate_chain,
            # tritonclient's defaults with the receive size bounded (it would take 2 GiB a message).
            channel_args=self._grpc_channel_args(),
        )

    def _grpc_channel_args(self) -> list[tuple[str, Any]]:
        keepalive = grpcclient.KeepAliveOptions()
        return [("grpc.max_send_message_length", grpcclient.MAX_GRPC_MESSAGE_SIZE),
                ("grpc.max_receive_message_length", self.max_response_bytes),
                ("grpc.keepalive_time_ms", keepalive.keepalive_time_ms),
                ("grpc.keepalive_timeout_ms", keepalive.keepalive_timeout_ms),
                ("grpc.keepalive_permit_without_calls", keepalive.keepalive_permit_without_calls),
                ("grpc.http2.max_pings_without_data", keepalive.http2_max_pings_without_data)]

    @property
    def timeout_s(self) -> float:
        """The timeout of this thread's attempt (the endpoint's, or less once an attempt was capped)."""
        return float(getattr(self._attempt, "timeout_s", self._attempt_timeout_s))

    @timeout_s.setter
    def timeout_s(self, value: float) -> None:
        self._attempt.timeout_s = value

    @property
    def display_url(self) -> str:
        return self.endpoint.display_url

    def redact(self, text: str) -> str:
        """A server's message as one safe line: secrets hidden (:meth:`hide`), control characters gone, bounded."""
        return redact(clean_text(self.hide(text)), self._credentials, fragments=True)

    def hide(self, text: str) -> str:
        """``text`` with every secret of this endpoint replaced: URL credentials and header values whole, and any
        word sharing 8 characters with a header value (a server's own words may cut or re-case a token). Nothing
        else changes, so a tensor name keeps its identity (control characters are escaped where it is shown)."""
        return redact(redact(text, self._secrets), self._credentials, fragments=True)

    def _hidden(self, value: Any, seen: dict[str, str] | None = None) -> Any:
        """Every string of a server's answer (keys, values, nested lists) passed through :meth:`hide`: metadata,
        config and the repository index are shown by every command, so they are cleaned once, where they enter.
        ``seen`` remembers each distinct string's answer (keys and data types repeat in every tensor entry)."""
        seen = {} if seen is None else seen
        if isinstance(value, str):
            if value not in seen:
                seen[value] = self.hide(value)
            return seen[value]
        if isinstance(value, dict):
            return {self._hidden(k, seen): self._hidden(v, seen) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self._hidden(v, seen) for v in value]
        return value

    # --- the one way every request is made ----------------------------------------------------------
    def call(self, what: str, fn: Callable[[], T], *, retry_if: Callable[[T], bool] | None = None,
             api: str = "inference") -> T:
        """Run ``fn`` under the total deadline, with retries for transient failures (and while ``retry_if(result)``).

        ``api`` is Triton's name for the API group the request belongs to (for :class:`RestrictedApiError`).
        """
        attempts = self.retries + 1
        last = ""
        for attempt in range(1, attempts + 1):
            try:
                result = self._within_deadline(fn)
            except Exception as exc:  # noqa: BLE001 - every client failure becomes ours, redacted (a caller's own gevent timer passes)
                last = self.redact(_describe(exc))
                self._raise_if_restricted(what, exc, api)
                self._raise_if_wrong_protocol(exc)
                if not _is_transient(exc):
                    self._raise_if_rejected(what, exc, last, attempt)
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

    def _within_deadline(self, fn: Callable[[], T]) -> T:
        # Every attempt passes through here: cap it at the time the endpoint has left (unlimited for a plain
        # endpoint, the run's total deadline for a nightly one), so any caller of connect() keeps that deadline.
        # gRPC's client_timeout and the HTTP timer below both read self.timeout_s.
        self.timeout_s = min(self._attempt_timeout_s, self.endpoint.time_left())
        if self.protocol == "grpc":
            return fn()  # every gRPC call carries client_timeout: gRPC's deadline is already total
        timer = gevent.Timeout(self.timeout_s)
        timer.start()
        try:
            return fn()
        except gevent.Timeout as exc:
            if exc is not timer:
                raise
            # The pooled connection may hold half an answer: never reuse it.
            self._reset_client()
            raise TimeoutError(f"no complete answer within the total deadline of {self.timeout_s:g}s") from None
        except ResponseTooLargeError:
            self._reset_client()  # the rest of that body is still on the pooled connection
            raise
        finally:
            timer.close()

    def _reset_client(self) -> None:
        self.close()
        self._client = self._make_client()

    def _raise_if_restricted(self, what: str, exc: BaseException, api: str) -> None:
        if not isinstance(exc, InferenceServerException) or not _RESTRICTED.search(exc.message() or ""):
            return
        expected = _EXPECTED_HEADER.search(exc.message() or "")
        header = expected.group(1).removeprefix(GRPC_HEADER_PREFIX) if expected else None
        hint = (f"the server expects the access header '{header}' for its {api} API" if header
                else f"the server restricts its {api} API")
        raise RestrictedApiError(self._message(what, self.redact(_describe(exc)), 1), api=api, header=header,
                                 hint=hint) from None

    def _raise_if_rejected(self, what: str, exc: BaseException, said: str, attempt: int) -> None:
        status = str(exc.status() or "") if isinstance(exc, InferenceServerException) else ""
        if status in _REJECTED:
            reason = self.redact(str(exc.message() or "")) if isinstance(exc, InferenceServerException) else said
            raise RequestRejectedError(self._message(what, said, attempt), status=status, reason=reason) from None

    def _raise_if_wrong_protocol(self, exc: BaseException) -> None:
        """Probe once per connection when a failure looks like the other protocol (or TLS) answering."""
        if self._protocol_checked or isinstance(exc, ConnectionRefusedError):
            return
        text = _describe(exc)
        tls_failed = self.address.ssl and bool(_TLS_FAILED_TEXT.search(text))
        server_said = isinstance(exc, InferenceServerException) and str(exc.status() or "") not in (
            "", "StatusCode.UNAVAILABLE")
        if not tls_failed and (server_said or not _WRONG_PROTOCOL_TEXT.search(text)):
            return
        self._protocol_checked = True
        location = self.endpoint.location
        timeout_s = min(self.timeout_s, 5.0)
        try:
            if tls_failed:
                plain = probe_protocol(location.host, location.port, timeout_s=timeout_s)
                if plain is not None:
                    raise TlsMismatchError(self.address.address, plain, server_uses_tls=False)
                return
            answered = probe_protocol(location.host, location.port, timeout_s=timeout_s,
                                      ssl=self.address.ssl, tls=self.endpoint.tls)
            if answered is None and not self.address.ssl and speaks_tls(location.host, location.port,
                                                                        timeout_s=timeout_s):
                raise TlsMismatchError(self.address.address, self.protocol, server_uses_tls=True)
        except (OSError, TimeoutError):
            return
        if answered is not None and answered != self.protocol:
            raise ProtocolMismatchError(self.address.address, self.protocol, answered)

    def _message(self, what: str, detail: str, attempts: int) -> str:
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        return f"Triton {self.protocol} endpoint {self.display_url}: {what} failed{tries}: {detail}"

    # --- health and metadata -------------------------------------------------------------------------
    def _kw(self) -> dict[str, Any]:
        return {"headers": self._headers} if self.protocol == "http" else {
            "headers": self._headers, "client_timeout": self.timeout_s}

    def server_live(self) -> bool:
        return bool(self.call("server liveness", lambda: self._health("v2/health/live", "is_server_live"),
                              retry_if=lambda ok: not ok, api="health"))

    def server_ready(self) -> bool:
        return bool(self.call("server readiness", lambda: self._health("v2/health/ready", "is_server_ready"),
                              retry_if=lambda ok: not ok, api="health"))

    def _health(self, uri: str, grpc_method: str, *args: str) -> bool:
        """A health probe. tritonclient's HTTP client reads any non-200 as False, which would turn a
        restricted health API (403) into "not live"; so HTTP reads the status itself."""
        if self.protocol == "grpc":
            return bool(getattr(self._client, grpc_method)(*args, **self._kw()))
        response = self._client._get(request_uri=uri, headers=self._headers, query_params=None)
        if response.status_code == 403:
            body = response.read(4096).decode("utf-8", "replace")
            try:
                message = str(json.loads(body).get("error", body))
            except (ValueError, AttributeError):
                message = body
            raise InferenceServerException(msg=message, status="403")
        return bool(response.status_code == 200)

    def server_metadata(self) -> dict[str, Any]:
        answer = self.call("server metadata", lambda: self._client.get_server_metadata(**self._kw()),
                           api="metadata")
        return self._object(self._hidden(self._as_dict(answer)), "server metadata")

    def model_ready(self, model: str, version: str | None = None, *, wait: bool = True) -> bool:
        uri = f"v2/models/{quote(model)}" + (f"/versions/{quote(version)}" if version else "") + "/ready"
        return bool(self.call(
            f"readiness of model {model!r}", lambda: self._health(uri, "is_model_ready", model, version or ""),
            retry_if=(lambda ok: not ok) if wait else None, api="health",
        ))

    def model_metadata(self, model: str, version: str | None = None) -> dict[str, Any]:
        what = f"metadata of model {model!r}"
        answer = self._object(self._hidden(self._as_dict(self.call(
            what, lambda: self._client.get_model_metadata(model, version or "", **self._kw()), api="metadata"))), what)
        answer["inputs"] = self._io(answer.get("inputs", []), "shape", what)
        answer["outputs"] = self._io(answer.get("outputs", []), "shape", what)
        return answer

    def model_config(self, model: str, version: str | None = None) -> dict[str, Any]:
        what = f"config of model {model!r}"
        answer = self._object(self._hidden(self._as_dict(self.call(
            what, lambda: self._client.get_model_config(model, version or "", **self._kw()), api="model-config"))),
            what)
        config = self._object(answer.get("config", answer) if self.protocol == "grpc" else answer, what)
        try:
            config["max_batch_size"] = int(config.get("max_batch_size", 0) or 0)
        except (TypeError, ValueError):
            raise EndpointError(self._message(what, "max_batch_size is not a number", 1)) from None
        config["input"] = self._io(config.get("input", []), "dims", what)
        config["output"] = self._io(config.get("output", []), "dims", what)
        return config

    def repository_index(self) -> list[dict[str, Any]]:
        """Every model the repository knows: name, version, state, reason (as far as the server says)."""
        answer = self.call("model repository index", lambda: self._client.get_model_repository_index(**self._kw()),
                           api="model-repository")
        entries = self._hidden(self._as_dict(answer))
        if isinstance(entries, dict):
            entries = entries.get("models", [])
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise EndpointError(self._message("model repository index", "the answer is not a list of models", 1))
        return [dict(e) for e in entries]

    def _object(self, answer: Any, what: str) -> dict[str, Any]:
        if not isinstance(answer, dict):
            raise EndpointError(self._message(what, f"the answer is a JSON {type(answer).__name__}, not an object", 1))
        return dict(answer)

    def _io(self, entries: Any, dims_key: str, what: str) -> list[dict[str, Any]]:
        try:
            return _normalize_io(entries, dims_key)
        except (TypeError, ValueError, AttributeError):
            raise EndpointError(self._message(what, f"its tensors' {dims_key} are not lists of numbers", 1)) from None

    # --- model control -------------------------------------------------------------------------------
    def load_model(self, model: str, *, config: str | None = None, files: dict[str, bytes] | None = None) -> None:
        def load() -> None:
            if self.protocol == "http":
                self._client.load_model(model, headers=self._headers, config=config, files=files)
            else:
                self._client.load_model(model, config=config, files=files, **self._kw())
        self.call(f"loading model {model!r}", load, api="model-repository")

    def unload_model(self, model: str) -> None:
        self.call(f"unloading model {model!r}", lambda: self._client.unload_model(model, **self._kw()),
                  api="model-repository")

    # --- inference -----------------------------------------------------------------------------------
    def infer(
        self, model: str, feeds: dict[str, np.ndarray], outputs: list[str], version: str | None = None
    ) -> dict[str, np.ndarray]:
        module = httpclient if self.protocol == "http" else grpcclient
        inputs = []
        for name, array in feeds.items():
            array = contiguous(array)  # scalars keep rank 0
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

        result = self.call(f"inference on model {model!r}", run, api="inference")
        return self._arrays(model, result, outputs)

    def _arrays(self, model: str, result: Any, outputs: list[str]) -> dict[str, np.ndarray]:
        """The asked outputs of an answer as arrays. An answer that names an output twice is refused (tritonclient
        would read the first copy and drop the other unsaid, whichever of them is right), as is one whose data
        does not fit its declared shape; each error names the endpoint, the model and the output."""
        where = f"Triton {self.protocol} endpoint {self.display_url}: model {model!r}"
        answered = _answer_outputs(result)
        counts = Counter(name for name, _ in answered)
        repeated = sorted(name for name, count in counts.items() if count > 1)
        if repeated:
            raise MalformedAnswerError(self.redact(f"{where} answered output {repeated[0]!r} {counts[repeated[0]]} times "
                                            "(an answer holds each output once: which copy is the model's?)"))
        for name, dims in answered:  # numpy reads any negative dimension as "the rest": [n, -5] would pass
            if not all(isinstance(d, int) and d >= 0 for d in dims):
                raise MalformedAnswerError(self.redact(f"{where}: its output {name!r} declares the shape {dims} "
                                                "(dimensions must be whole numbers, not negative)"))
        arrays = {}
        for name in outputs:
            try:
                array = result.as_numpy(name)
            except Exception as exc:  # noqa: BLE001 - any unreadable answer (sizes, types, dtypes) is the endpoint's
                raise MalformedAnswerError(self.redact(f"{where}: its output {name!r} cannot be read as the array it "
                                                f"declares ({_describe(exc)})")) from None
            if array is None:
                raise MalformedAnswerError(self.redact(f"{where} returned no output {name!r}"))
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


def release_thread_hub() -> None:
    """Free this thread's gevent hub, if it made one and is not the main thread: gevent keeps a hub (an event loop, with
    its epoll and wake-up descriptors) for each thread that used it, and never frees a finished thread's. An HTTP
    client's thread calls this once its clients are closed, as its last use of them (nightly's inference workers,
    audit and endpoint threads: 8 descriptors an endpoint check over HTTP were leaked)."""
    from gevent._hub_local import get_hub_if_exists

    if threading.current_thread() is threading.main_thread():
        return
    hub = get_hub_if_exists()
    if hub is not None:
        hub.destroy(destroy_loop=True)


def connect(endpoint: TritonEndpoint, *, backoff_s: float = 0.2) -> TritonConnection:
    """A client for ``endpoint`` (close it, or use it as a context manager); the protocol is probed when open.

    A function of this module rather than a method of the light :class:`TritonEndpoint`, so that the value every
    option group and config builds never imports tritonclient (and the import arrows only point down)."""
    return TritonConnection(endpoint, backoff_s=backoff_s)

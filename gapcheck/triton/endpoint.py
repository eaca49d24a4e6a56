"""Where a Triton server is and how to talk to it: :class:`TritonEndpoint`, the value every entry point takes.

Light on purpose (no tritonclient, no gevent): options, configs and the CLI build endpoints without
importing a client. :func:`gapcheck.triton.client.connect` (endpoint) returns a
:class:`~gapcheck.triton.client.TritonConnection`.
A URL without a scheme leaves the protocol open; :meth:`TritonEndpoint.resolve` probes for it
(:mod:`gapcheck.triton.probe`). The errors every Triton call may end in that are not backend failures
live here too: :class:`RestrictedApiError` and :class:`ProtocolMismatchError` (both exit 2).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace

from gapcheck.errors import EndpointError, ExitCode, UsageError, one_line
from gapcheck.triton.probe import probe_protocol
from gapcheck.triton.url import (
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    EndpointUrl,
    TlsOptions,
    check_headers,
    clean_text,
    parse_endpoint_url,
    redact,
    secrets_in,
)

logger = logging.getLogger(__name__)

PROTOCOLS = ("grpc", "http")


class RestrictedApiError(EndpointError):
    """The server restricts this API and the request lacks the right access header (exit 2: the caller's to fix)."""

    exit_code = ExitCode.USAGE

    def __init__(self, message: str, *, api: str, header: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.api = api  # Triton's name for the API group: health, metadata, model-config, model-repository, ...
        self.header = header  # the header key the server expects (a name, never a value)


class RequestRejectedError(EndpointError):
    """The server is up and answered that the request is wrong (HTTP 400/404/413/422, gRPC INVALID_ARGUMENT, NOT_FOUND,
    OUT_OF_RANGE): an input name or shape the deployment does not take, a model it does not have. Retrying cannot
    help. Left alone it is an endpoint failure (exit 3); a caller that knows better turns it into a finding (nightly:
    a deployment gap) or a usage error (a model name that is not on the server). ``reason``: the server's own words,
    redacted and on one line."""

    def __init__(self, message: str, *, status: str, reason: str) -> None:
        super().__init__(message)
        self.status, self.reason = status, reason


class MalformedAnswerError(EndpointError):
    """The endpoint answered an inference request with a response that cannot be read as the outputs it declares (an
    output named twice, data that does not fit its declared shape, a negative dimension, an asked output missing):
    the deployment answered, wrongly. Left alone it is an endpoint failure (exit 3); nightly says it as a gap
    (``endpoint_malformed_answer``, exit 1)."""


class ModelNotFoundError(UsageError):
    """The model asked for is not on the server (a misspelt name): exit 2, naming what the server has."""


class ProtocolMismatchError(UsageError):
    """The port answers the other protocol than the one asked for."""

    def __init__(self, address: str, asked: str, answered: str) -> None:
        super().__init__(f"{address} answered {answered.upper()}, not {_protocol_name(asked)}: "
                         f"use an {answered}:// URL or protocol '{answered}'")
        self.address, self.asked, self.answered = address, asked, answered


class TlsMismatchError(UsageError):
    """TLS asked for on a port that speaks plain text, or plain text on a port that expects TLS."""

    def __init__(self, address: str, protocol: str, *, server_uses_tls: bool) -> None:
        scheme = protocol + ("s" if server_uses_tls else "")
        if server_uses_tls:
            message = f"{address} expects TLS: use {scheme}:// (with the server's CA certificate if needed)"
        else:
            message = f"{address} answered {_protocol_name(protocol)} without TLS: use {scheme}:// and no TLS options"
        super().__init__(message)
        self.address, self.protocol, self.server_uses_tls = address, protocol, server_uses_tls


def _protocol_name(protocol: str) -> str:
    return "gRPC" if protocol == "grpc" else protocol.upper()


@dataclass(frozen=True)
class ServerAddress:
    """Where a server is, as the user gave it, minus anything secret."""

    address: str  # host:port, no scheme, no credentials
    ssl: bool

    @property
    def display(self) -> str:
        return ("https://" if self.ssl else "") + self.address


def parse_url(url: str, *, ssl: bool = False) -> ServerAddress:
    """host:port and TLS of any accepted URL form (see :mod:`gapcheck.triton.url`); URL credentials refused."""
    location = parse_endpoint_url(url)
    return ServerAddress(address=location.address, ssl=ssl or location.ssl)


@dataclass(frozen=True)
class TritonEndpoint:
    """How to reach one Triton server: the value every Triton entry point takes.

    ``protocol`` None follows the URL's scheme, or probes a bare ``host:port`` on connect.
    ``headers`` (e.g. ``triton-access-token``) and credentials in ``url`` are secrets: they stay out of
    the repr, and :attr:`display_url` is the only form of the location meant for messages and reports.
    A URL may also name a model and version (``grpc://host:8001/resnet?version=3``): see :attr:`location`.
    """

    url: str = field(repr=False)
    protocol: str | None = None
    headers: dict[str, str] = field(default_factory=dict, repr=False, hash=False)
    ssl: bool = False
    tls: TlsOptions | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES

    def __post_init__(self) -> None:
        if self.protocol is not None and self.protocol not in PROTOCOLS:
            raise UsageError(f"protocol must be one of {', '.join(PROTOCOLS)}, not {self.protocol!r}")
        if not self.timeout_s > 0 or self.retries < 0:
            raise UsageError("timeout must be positive and retries non-negative")
        if not 1024 <= self.max_response_bytes < 2**31:
            raise UsageError("the response size limit must be between 1 KiB and 2 GiB")
        # A private copy: the caller's dict may change later, this value must not.
        object.__setattr__(self, "headers", check_headers(dict(self.headers or {})))
        location = parse_endpoint_url(self.url)
        if location.protocol and self.protocol and location.protocol != self.protocol:
            raise UsageError(f"the URL {location.display} says {location.protocol} but the protocol asked for "
                             f"is {self.protocol}")
        if location.protocol and self.ssl and not location.ssl:
            raise UsageError(f"the URL {location.display} has no TLS scheme but TLS is asked for: "
                             f"use {location.protocol}s://")
        if self.protocol is None and location.protocol is not None:
            object.__setattr__(self, "protocol", location.protocol)

    def __repr__(self) -> str:
        # Written by hand (dataclasses keep a class's own __repr__) to show the location, redacted.
        return (f"TritonEndpoint({self.display_url!r}, protocol={self.protocol!r}, "
                f"headers=<{len(self.headers)} hidden>, ssl={self.ssl!r}, tls={self.tls!r}, "
                f"timeout_s={self.timeout_s!r}, retries={self.retries!r})")

    @property
    def location(self) -> EndpointUrl:
        """The parsed URL (host, port, scheme's protocol and TLS, model and version if it named them)."""
        return parse_endpoint_url(self.url)

    @property
    def address(self) -> ServerAddress:
        """host:port and whether TLS is on (TLS options imply TLS), without credentials."""
        return parse_url(self.url, ssl=self.ssl or self.tls is not None)

    @property
    def display_url(self) -> str:
        """The location, safe to print: no URL credentials, never a header."""
        address = self.address
        if self.protocol is None:
            return address.display
        return f"{self.protocol}{'s' if address.ssl else ''}://{address.address}"

    @property
    def secrets(self) -> tuple[str, ...]:
        return secrets_in(self.url, self.headers)

    def resolve(self, *, backoff_s: float = 0.2) -> "TritonEndpoint":
        """This endpoint with a concrete protocol: probes a bare host:port (one fast request, retried if refused)."""
        if self.protocol is not None:
            return self
        location, last = self.location, ""
        for attempt in range(1, self.retries + 2):
            left = self.time_left(last)
            try:
                answered = probe_protocol(location.host, location.port, timeout_s=min(self.timeout_s, 5.0, left),
                                          ssl=self.address.ssl, tls=self.tls)
            except (OSError, TimeoutError) as exc:
                last = clean_text(redact(one_line(exc), self.secrets))
            else:
                if answered is None:
                    raise EndpointError(f"{self.display_url} answered neither HTTP nor gRPC: is it a Triton port?")
                logger.info("%s answered %s", self.display_url, _protocol_name(answered))
                return replace(self, protocol=answered)
            if attempt <= self.retries:
                time.sleep(min(backoff_s * 2 ** (attempt - 1), 2.0, self.time_left(last)))
        tries = f" after {self.retries + 1} attempts" if self.retries else ""
        raise EndpointError(f"Triton endpoint {self.display_url}: finding its protocol failed{tries}: {last}")

    def time_left(self, last_error: str = "") -> float:
        """Seconds this endpoint may still spend (no limit here; a subclass with a total deadline raises when
        none are left). ``last_error``: what the previous attempt said, for that message."""
        return float("inf")

"""THE Triton endpoint option group: declared once, used by triton-audit, export-diff and nightly.

A command's signature takes the ``Annotated`` aliases below (same flag names everywhere) and
gathers them into :class:`TritonOptions`; ``options.target()`` turns them into the library's
:class:`~gapcheck.triton.endpoint.TritonEndpoint` plus the model and version::

    def command(triton_url: TritonUrlOpt = None, triton_model: TritonModelOpt = None, protocol: ProtocolOpt = None,
                triton_version: TritonVersionOpt = None, triton_header: TritonHeaderOpt = [], ...):
        options = TritonOptions(url=triton_url, model=triton_model, ...)
        with triton_errors():
            endpoint, model, version = options.target()
            ...

:func:`triton_errors` rewords the library's errors in flag terms (a protocol mismatch names
``--protocol``; a restricted API names ``--triton-header``). A malformed header or a missing TLS
file is a usage error that never echoes a header value. Nothing here imports tritonclient.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from gapcheck.cli.choices import Protocol
from gapcheck.errors import UsageError
from gapcheck.triton.url import DEFAULT_RETRIES, DEFAULT_TIMEOUT_S, TlsOptions, parse_endpoint_url

if TYPE_CHECKING:
    from gapcheck.triton.endpoint import TritonEndpoint

TritonUrlOpt = Annotated[Optional[str], typer.Option(
    "--triton-url", help="Triton server: http://host:8000, https://..., grpc://host:8001, grpcs://..., or host:port "
    "(protocol detected); may end in /MODEL?version=N.")]
TritonModelOpt = Annotated[Optional[str], typer.Option("--triton-model", help="Model name on the server.")]
ProtocolOpt = Annotated[Optional[Protocol], typer.Option(
    "--protocol", help="http or grpc (default: the URL's scheme; detected for host:port).")]
TritonVersionOpt = Annotated[Optional[str], typer.Option("--triton-version", help="Model version expected on the server.")]
TritonHeaderOpt = Annotated[list[str], typer.Option(
    "--triton-header", help="Request header KEY:VALUE, e.g. triton-access-token:TOKEN (never printed). Repeatable.")]
TritonSslOpt = Annotated[bool, typer.Option("--triton-ssl", help="Use TLS (implied by https:// and grpcs://).")]
TritonRootCertOpt = Annotated[Optional[Path], typer.Option("--triton-ssl-root-cert", help="CA certificate (PEM).")]
TritonPrivateKeyOpt = Annotated[Optional[Path], typer.Option(
    "--triton-ssl-private-key", help="Client private key (PEM, gRPC).")]
TritonCertChainOpt = Annotated[Optional[Path], typer.Option(
    "--triton-ssl-cert-chain", help="Client certificate chain (PEM, gRPC).")]
TritonInsecureOpt = Annotated[bool, typer.Option(
    "--triton-ssl-insecure", help="TLS without verifying the server certificate (HTTP).")]
TritonTimeoutOpt = Annotated[float, typer.Option(
    "--triton-timeout", min=0.1, help="Total seconds one request may take (a deadline, not a per-read timeout).")]
TritonRetriesOpt = Annotated[int, typer.Option(
    "--triton-retries", min=0, help="Retries of a transient failure (with backoff).")]

# triton-audit's spellings before the group existed; hidden, still accepted.
LegacyHeaderOpt = Annotated[list[str], typer.Option("--header", hidden=True)]
LegacySslOpt = Annotated[bool, typer.Option("--ssl", hidden=True)]
LegacyRootCertOpt = Annotated[Optional[Path], typer.Option("--ssl-root-cert", hidden=True)]
LegacyPrivateKeyOpt = Annotated[Optional[Path], typer.Option("--ssl-private-key", hidden=True)]
LegacyCertChainOpt = Annotated[Optional[Path], typer.Option("--ssl-cert-chain", hidden=True)]
LegacyInsecureOpt = Annotated[bool, typer.Option("--ssl-insecure", hidden=True)]
LegacyTimeoutOpt = Annotated[Optional[float], typer.Option("--timeout", min=0.1, hidden=True)]
LegacyRetriesOpt = Annotated[Optional[int], typer.Option("--retries", min=0, hidden=True)]


def parse_headers(items: list[str], *, flag: str = "--triton-header") -> dict[str, str]:
    """``KEY:VALUE`` pairs; a malformed one is named by flag and position only, since its value may be a secret."""
    headers = {}
    for position, item in enumerate(items, start=1):
        key, sep, value = item.partition(":")
        if not sep or not key.strip(" \t"):
            raise UsageError(f"{flag} #{position} must be KEY:VALUE")
        # Only blanks are trimmed: a newline or control character is refused by the endpoint, not hidden.
        headers[key.strip(" \t")] = value.strip(" \t")
    return headers


def tls_options(ssl: bool, root_cert: Optional[Path] = None, private_key: Optional[Path] = None,
                cert_chain: Optional[Path] = None, insecure: bool = False) -> TlsOptions | None:
    """TLS files checked up front; None when nothing asks for TLS."""
    paths = (root_cert, private_key, cert_chain)
    for path in paths:
        if path is not None and not path.is_file():
            raise UsageError(f"TLS file {path} does not exist")
    if not ssl and not insecure and all(p is None for p in paths):
        return None
    root, key, chain = (str(p) if p else None for p in paths)
    return TlsOptions(root_certificates=root, private_key=key, certificate_chain=chain, insecure=insecure)


@dataclass(frozen=True)
class TritonOptions:
    """The parsed Triton endpoint options of any command."""

    url: str | None = None
    model: str | None = None
    protocol: Protocol | None = None
    version: str | None = None
    headers: list[str] = field(default_factory=list, repr=False)
    ssl: bool = False
    root_cert: Path | None = None
    private_key: Path | None = None
    cert_chain: Path | None = None
    insecure: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES
    header_flag: str = "--triton-header"

    @classmethod
    def from_values(cls, values: dict[str, object], *, headers: list[str]) -> TritonOptions:
        """From option parameter names (``triton_url``, ``protocol``, ... as in :data:`TRITON_CONFIG_KEYS`)."""
        def path(name: str) -> Path | None:
            value = values.get(name)
            return None if value is None else Path(str(value))

        protocol = values.get("protocol")
        return cls(url=_text(values.get("triton_url")), model=_text(values.get("triton_model")),
                   protocol=None if protocol is None else Protocol(str(getattr(protocol, "value", protocol))),
                   version=_text(values.get("triton_version")), headers=list(headers),
                   ssl=bool(values.get("triton_ssl")), root_cert=path("triton_ssl_root_cert"),
                   private_key=path("triton_ssl_private_key"), cert_chain=path("triton_ssl_cert_chain"),
                   insecure=bool(values.get("triton_ssl_insecure")),
                   timeout_s=float(str(values.get("triton_timeout", DEFAULT_TIMEOUT_S))),
                   retries=int(str(values.get("triton_retries", DEFAULT_RETRIES))))

    @property
    def given(self) -> bool:
        return self.url is not None

    def endpoint(self) -> "TritonEndpoint":
        from gapcheck.triton.endpoint import TritonEndpoint

        if self.url is None:
            raise UsageError("--triton-url is required")
        return TritonEndpoint(
            self.url, protocol=self.protocol.value if self.protocol else None,
            headers=parse_headers(self.headers, flag=self.header_flag), ssl=self.ssl,
            tls=tls_options(self.ssl, self.root_cert, self.private_key, self.cert_chain, self.insecure),
            timeout_s=self.timeout_s, retries=self.retries)

    def target(self) -> tuple["TritonEndpoint", str, str | None]:
        """Endpoint, model and version; the URL may name the model (``/MODEL?version=N``) instead of the flags."""
        if self.url is None:
            raise UsageError("--triton-url is required")
        location = parse_endpoint_url(self.url)
        model = _one("model", self.model, location.model, "--triton-model")
        version = _one("version", self.version, location.version, "--triton-version")
        if model is None:
            raise UsageError("name the model: --triton-model NAME, or a URL ending in /NAME")
        if "/" in model or any(ord(c) < 32 or ord(c) == 127 for c in model):
            raise UsageError("--triton-model must not contain '/' or control characters")
        return self.endpoint(), model, version


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _one(what: str, flag_value: str | None, url_value: str | None, flag: str) -> str | None:
    if flag_value is not None and url_value is not None and str(flag_value) != url_value:
        raise UsageError(f"the {what} in --triton-url ({url_value}) and {flag} ({flag_value}) differ")
    return flag_value if flag_value is not None else url_value


@contextmanager
def triton_errors() -> Iterator[None]:
    """Reword the library's Triton errors in flag terms (same exception families, same exit codes)."""
    from gapcheck.triton.endpoint import ProtocolMismatchError, RestrictedApiError

    try:
        yield
    except ProtocolMismatchError as exc:
        raise UsageError(f"{exc.address} answered {exc.answered.upper()}; pass {exc.answered}:// or "
                         f"--protocol {exc.answered}") from None
    except RestrictedApiError as exc:
        if exc.header:
            exc.hint = f"pass --triton-header {exc.header}:TOKEN (the server's {exc.api} API is restricted)"
        raise


#: option parameter -> field of the ``[triton]`` config section (headers stay on the command line or in nightly's
#: ``${ENV}`` references: a secret does not belong in a config file).
TRITON_CONFIG_KEYS = {"triton_url": "url", "triton_model": "model", "triton_version": "version", "protocol": "protocol",
                      "triton_timeout": "timeout_s", "triton_retries": "retries", "triton_ssl": "ssl",
                      "triton_ssl_root_cert": "ssl_root_cert", "triton_ssl_private_key": "ssl_private_key",
                      "triton_ssl_cert_chain": "ssl_cert_chain", "triton_ssl_insecure": "ssl_insecure"}


def from_config(ctx: typer.Context, config: Path | None, values: dict[str, object]) -> dict[str, object]:
    """``values`` (the Triton option parameters) with ``[triton]`` filling those left at their default
    (file < environment < flags)."""
    from gapcheck.cli.options import configured
    from gapcheck.config import load_config

    return {**values, **configured(ctx, load_config(config).section("triton"), TRITON_CONFIG_KEYS)}


def with_legacy(ctx: typer.Context, values: dict[str, object], old: dict[str, object]) -> dict[str, object]:
    """``values`` with the hidden old spellings applied: an old flag that was given counts as a flag (it beats
    the config), unless the new spelling of the same option was given too."""
    out = dict(values)
    for name, value in old.items():
        source = ctx.get_parameter_source(name)
        new_given = source is not None and getattr(source, "name", "") not in ("DEFAULT", "DEFAULT_MAP")
        if value is not None and not new_given:
            out[name] = value
    return out


def triton_endpoint(url: str, *, protocol: Protocol | None, headers: list[str], header_flag: str = "--triton-header",
                    ssl: bool = False, root_cert: Optional[Path] = None, private_key: Optional[Path] = None,
                    cert_chain: Optional[Path] = None, insecure: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S,
                    retries: int = DEFAULT_RETRIES) -> "TritonEndpoint":
    """The endpoint the options describe (kept for callers that pass the values one by one)."""
    return TritonOptions(url=url, protocol=protocol, headers=list(headers), ssl=ssl, root_cert=root_cert,
                         private_key=private_key, cert_chain=cert_chain, insecure=insecure, timeout_s=timeout_s,
                         retries=retries, header_flag=header_flag).endpoint()

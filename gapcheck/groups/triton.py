"""``TritonTarget``: how to reach a Triton server — URL, model, version, protocol, headers, TLS, per-request timeout,
retries, the total deadline per endpoint, and which served output answers which torch output.

Header names and values are checked here, before any work (CR, LF and other control characters refused, exit 2;
values never echoed). TLS files must exist. ``[triton]`` holds every key but the headers (a secret does not belong in
a config file; nightly's endpoint tables read them from ``${ENV}`` references).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional

from gapcheck.errors import UsageError, one_line
from gapcheck.groups.base import Group, Opt, check_input_file, parse_headers

# The same numbers as gapcheck.triton.url's (tested): kept as literals so --help imports nothing of triton/.
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_RETRIES = 3
DEFAULT_DEADLINE_S = 600.0
PROTOCOLS = ("grpc", "http")
#: the most NAME=SERVED pairs one input/output map may hold (refused past it, exit 2, before any work)
MAX_MAP_ITEMS = 10_000


@dataclass(frozen=True)
class TritonTarget(Group):
    url: str | None = None
    model: str | None = None
    protocol: str | None = None
    version: str | None = None
    headers: tuple[str, ...] = ()  # KEY:VALUE (secrets: never printed)
    ssl: bool = False
    ssl_root_cert: Path | None = None
    ssl_private_key: Path | None = None
    ssl_cert_chain: Path | None = None
    ssl_insecure: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES
    deadline_s: float = DEFAULT_DEADLINE_S
    output_map: tuple[str, ...] = ()  # torch_name=served_name
    input_map: tuple[str, ...] = ()  # graph_name=served_name

    SECTION: ClassVar[str | None] = "triton"
    OPTIONS: ClassVar[tuple[Opt, ...]] = (
        Opt("url", "--triton-url", "Triton server: http://host:8000, https://..., grpc://host:8001, grpcs://..., or "
            "host:port (protocol detected); may end in /MODEL?version=N.", Optional[str], key="url"),
        Opt("model", "--triton-model", "Model name on the server.", Optional[str], key="model"),
        Opt("protocol", "--protocol", "http or grpc (default: the URL's scheme; detected for host:port).",
            Optional[str], key="protocol"),
        Opt("version", "--triton-version", "Model version expected on the server.", Optional[str], key="version"),
        Opt("headers", "--triton-header", "Request header KEY:VALUE, e.g. triton-access-token:TOKEN (never printed). "
            "Repeatable.", list[str], aliases=("--header",)),
        Opt("ssl", "--triton-ssl", "Use TLS (implied by https:// and grpcs://).", bool, key="ssl", aliases=("--ssl",)),
        Opt("ssl_root_cert", "--triton-ssl-root-cert", "CA certificate (PEM).", Optional[Path], key="ssl_root_cert",
            aliases=("--ssl-root-cert",)),
        Opt("ssl_private_key", "--triton-ssl-private-key", "Client private key (PEM, gRPC).", Optional[Path],
            key="ssl_private_key", aliases=("--ssl-private-key",)),
        Opt("ssl_cert_chain", "--triton-ssl-cert-chain", "Client certificate chain (PEM, gRPC).", Optional[Path],
            key="ssl_cert_chain", aliases=("--ssl-cert-chain",)),
        Opt("ssl_insecure", "--triton-ssl-insecure", "TLS without verifying the server certificate (HTTP).", bool,
            key="ssl_insecure", aliases=("--ssl-insecure",)),
        Opt("timeout_s", "--triton-timeout", "Total seconds one request may take (a deadline, not a per-read timeout).",
            float, key="timeout_s", low=0.1, high=86400.0, aliases=("--timeout",)),
        Opt("retries", "--triton-retries", "Retries of a transient failure (with backoff).", int, key="retries",
            low=0, high=20, aliases=("--retries",)),
        Opt("deadline_s", "--triton-deadline", "Total seconds for everything sent to one endpoint.", float,
            key="deadline_s", low=0.0, low_open=True, high=7 * 86400.0, aliases=("--deadline",)),
        Opt("output_map", "--triton-output-map", "Served output names: torch_name=served_name[,...] (when the "
            "deployment renamed its outputs).", list[str], key="output_map"),
        Opt("input_map", "--triton-input-map", "Served input names: graph_name=served_name[,...] (e.g. x=INPUT__0), "
            "when the deployment names its inputs its own way and the pairing is ambiguous (one input, or inputs "
            "that differ in data type or shape, are paired without it).", list[str], key="input_map"),
    )

    def check(self) -> None:
        protocol = getattr(self.protocol, "value", self.protocol)
        if protocol is not None and protocol not in PROTOCOLS:
            raise UsageError(f"--protocol must be http or grpc, not {protocol!r}")
        object.__setattr__(self, "protocol", protocol)
        if self.version is not None:  # a number, as the URL's ?version=N: never a "stale version" gap for a typo
            from gapcheck.triton.url import check_version  # light (re, dataclasses)

            object.__setattr__(self, "version", check_version(self.version))
        for name in ("ssl_root_cert", "ssl_private_key", "ssl_cert_chain"):
            check_input_file(getattr(self, name), "TLS file")
        check_tls_files(self.ssl_root_cert, self.ssl_private_key, self.ssl_cert_chain)
        self.header_values()  # CR/LF and friends refused now, before any work
        self.outputs()
        self.inputs()
        if self.model is not None and ("/" in self.model or any(ord(c) < 32 or ord(c) == 127 for c in self.model)):
            raise UsageError("--triton-model must not contain '/' or control characters")
        if self.model is not None and not self.model.strip():  # '' asked the server for model '': a "not ready" gap
            raise UsageError("--triton-model is empty: name the model on the server")

    @property
    def given(self) -> bool:
        return self.url is not None

    def header_values(self, flag: str = "--triton-header") -> dict[str, str]:
        return parse_headers(self.headers, flag)

    def outputs(self) -> dict[str, str]:
        """``--triton-output-map``: torch output name -> served output name."""
        return _name_map(self.output_map, "--triton-output-map", "torch_name=served_name[,...]")

    def inputs(self) -> dict[str, str]:
        """``--triton-input-map``: graph (golden) input name -> served input name."""
        return _name_map(self.input_map, "--triton-input-map", "graph_name=served_name[,...]")

    def tls(self) -> Any:
        """``gapcheck.triton.url.TlsOptions`` when anything asks for TLS, else None."""
        from gapcheck.triton.url import TlsOptions

        paths = (self.ssl_root_cert, self.ssl_private_key, self.ssl_cert_chain)
        if not self.ssl and not self.ssl_insecure and all(p is None for p in paths):
            return None
        root, key, chain = (str(p) if p else None for p in paths)
        return TlsOptions(root_certificates=root, private_key=key, certificate_chain=chain, insecure=self.ssl_insecure)

    def endpoint(self, url: str | None = None, *, protocol: str | None = None, headers: dict[str, str] | None = None,
                 timeout_s: float | None = None) -> Any:
        """The ``gapcheck.triton.endpoint.TritonEndpoint``; with ``url`` another server (a nightly endpoint) reached with
        these settings, whose own scheme says whether it uses TLS (the TLS files apply to https://, grpcs:// and a
        bare host:port)."""
        from gapcheck.triton.endpoint import TritonEndpoint

        target = url if url is not None else self.url
        if target is None:
            raise UsageError("--triton-url is required")
        scheme = target.split("://")[0].lower() if "://" in target else None
        plain = scheme in ("http", "grpc")
        ssl = self.ssl if url is None else self.ssl and not plain  # this target's own URL: a mismatch is refused
        return TritonEndpoint(target, protocol=protocol if protocol is not None else self.protocol,
                              headers={**self.header_values(), **(headers or {})}, ssl=ssl,
                              tls=None if plain and url is not None else self.tls(),
                              timeout_s=self.timeout_s if timeout_s is None else timeout_s, retries=self.retries)

    def target(self) -> tuple[Any, str, str | None]:
        """Endpoint, model and version; the URL may name the model (``/MODEL?version=N``) instead of the flags."""
        from gapcheck.triton.url import parse_endpoint_url

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


def _name_map(items: tuple[str, ...], flag: str, form: str) -> dict[str, str]:
    """NAME=SERVED[,...] items as a dict; control characters, a missing side, a name given twice (either side):
    UsageError (exit 2), before any work. Names are tensor names: no control characters, at most 256 characters."""
    mapping: dict[str, str] = {}
    served_names: set[str] = set()  # the served side as a set: one look-up per item, not a scan (was quadratic)
    parameter = flag.removeprefix("--").replace("-", "_")
    for item in items:
        for pair in str(item).split(","):
            if not pair.strip():
                continue
            if len(mapping) >= MAX_MAP_ITEMS:  # a model has tens of tensors; this many is a generated mistake
                raise UsageError(f"{flag} holds more than {MAX_MAP_ITEMS} name pairs (the limit): "
                                 "map only the names the deployment renamed", parameter=parameter)
            if any(ord(c) < 32 or ord(c) == 127 for c in pair):
                raise UsageError(f"{flag}: a name holds a control character", parameter=parameter)
            name, sep, served = (part.strip() for part in pair.partition("="))
            if not sep or not name or not served or max(len(name), len(served)) > 256:
                raise UsageError(f"{flag} takes {form}, got {pair[:120]!r}", parameter=parameter)
            if name in mapping:
                raise UsageError(f"{flag} names {name!r} twice", parameter=parameter)
            if served in served_names:
                raise UsageError(f"{flag} maps two names to served {served!r}", parameter=parameter)
            mapping[name] = served
            served_names.add(served)
    return mapping


def _one(what: str, flag_value: str | None, url_value: str | None, flag: str) -> str | None:
    if flag_value is not None and url_value is not None and str(flag_value) != url_value:
        raise UsageError(f"the {what} in --triton-url ({url_value}) and {flag} ({flag_value}) differ")
    return flag_value if flag_value is not None else url_value


#: a certificate, key or chain file is a few kB; anything this large is not one (read before it is parsed)
_TLS_FILE_MAX_BYTES = 1 << 20


def check_tls_files(root: Path | None, key: Path | None, chain: Path | None) -> None:
    """The TLS files parse as what they claim to be, before any connection: gRPC's C core otherwise logs its own
    error line to stderr and the failure surfaces as an endpoint failure (exit 3) after the work started. A private
    key needs its certificate chain; an encrypted key is refused (a cron has no one to type its pass phrase, and
    OpenSSL would prompt on the terminal)."""
    import ssl  # stdlib, light

    for path in (root, key, chain):
        if path is not None and Path(path).stat().st_size > _TLS_FILE_MAX_BYTES:
            raise UsageError(f"TLS file {path} is over 1 MiB: not a PEM certificate or key")
    if key is not None and chain is None:
        raise UsageError("--triton-ssl-private-key (ssl_private_key) needs --triton-ssl-cert-chain (ssl_cert_chain): "
                         "the client certificate it belongs to")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if root is not None:
        try:
            context.load_verify_locations(cafile=str(root))
        except (ssl.SSLError, ValueError, OSError) as exc:
            raise UsageError(f"TLS file {root} is not a PEM CA certificate ({_reason(exc)})") from None
    if chain is not None:
        try:
            context.load_cert_chain(certfile=str(chain), keyfile=None if key is None else str(key),
                                    password=_no_pass_phrase)
        except (ssl.SSLError, ValueError, OSError) as exc:
            raise UsageError(f"TLS files {chain}{'' if key is None else ' + ' + str(key)} are not a PEM certificate "
                             f"chain with its unencrypted private key ({_reason(exc)})") from None


def _no_pass_phrase() -> bytes:
    raise ValueError("the private key is encrypted: give an unencrypted key file")


def _reason(exc: BaseException) -> str:
    return one_line(exc, limit=160)

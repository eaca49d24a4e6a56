"""Endpoint URLs, model names and secrets: the one parser every Triton entry point shares.

Forms accepted (credentials in the URL, ``user:password@``, are refused and never shown: gapcheck never sends
them, and silently dropping them would run unauthenticated; pass a header instead)::

    host:port                      protocol unknown: the client probes once (see gapcheck.triton.probe)
    http://host:8000   https://host:443      HTTP, without / with TLS
    grpc://host:8001   grpcs://host:443      gRPC, without / with TLS
    grpc://host:8001/resnet?version=3        also names a model and a version (nightly targets)
    http://host:8000/v2/models/resnet/versions/3   Triton's own REST path, same meaning

Without a port, ``http``/``grpc`` take Triton's defaults (8000/8001) and the TLS schemes 443.
Model names follow :func:`check_model_name`. This module imports nothing heavy.
"""
from __future__ import annotations

import base64
import binascii
import functools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from gapcheck.errors import UsageError

SCHEMES = {"http": ("http", False), "https": ("http", True), "grpc": ("grpc", False), "grpcs": ("grpc", True)}
DEFAULT_PORTS = {"http": 8000, "https": 443, "grpc": 8001, "grpcs": 443}
REDACTED = "***"
DEFAULT_TIMEOUT_S = 30.0  # total seconds one request may take (see gapcheck.triton.client)
DEFAULT_RETRIES = 3
# The largest answer one request may bring back (HTTP body or gRPC message): a server that streams a huge body
# quickly is stopped by bytes, since the deadline alone would let gigabytes through on a fast link.
DEFAULT_MAX_RESPONSE_BYTES = 256 * 2**20

# Model names end up as a directory, in URL paths and in config.pbtxt: the characters every one of those
# takes without quoting. Triton itself only needs a directory name; this is the safe common ground.
_MODEL_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,254}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_URL = re.compile(r"^(?:(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://)?(?:(?P<userinfo>[^/@]*)@)?"
                  r"(?P<host>\[[0-9A-Fa-f:.]+\]|[^/:?#\[\]]+)(?::(?P<port>[^/?#]*))?"
                  r"(?P<path>/[^?#]*)?(?:\?(?P<query>[^#]*))?$")


@dataclass(frozen=True)
class TlsOptions:
    """TLS material (file paths). ``insecure`` skips certificate verification (HTTP only)."""

    root_certificates: str | None = None
    private_key: str | None = None
    certificate_chain: str | None = None
    insecure: bool = False


@dataclass(frozen=True)
class EndpointUrl:
    """A parsed endpoint location. ``protocol`` is None when the URL had no scheme (probe to find out)."""

    host: str
    port: int
    protocol: str | None
    ssl: bool
    model: str | None = None
    version: str | None = None

    @property
    def address(self) -> str:
        """``host:port``, what the clients connect to."""
        return f"{self.host}:{self.port}"

    @property
    def display(self) -> str:
        """The location, safe to print (never credentials)."""
        if self.protocol is None:
            return ("https://" if self.ssl else "") + self.address
        scheme = self.protocol + ("s" if self.ssl else "")
        return f"{scheme}://{self.address}"


def check_model_name(name: str, *, what: str = "model name") -> str:
    """``name`` when Triton, a file system and a URL path all take it unquoted; else UsageError."""
    if not isinstance(name, str) or not _MODEL_NAME.fullmatch(name):  # match() takes "cnn\n" ($ before a newline)
        shown = "holds a control character," if isinstance(name, str) and _CONTROL.search(name) else f"{name!r}"
        raise UsageError(f"{what} {shown} is not a valid Triton model name: use 1-255 letters, digits, "
                         "'_', '.' or '-', starting with a letter, digit or '_'")
    return name


def plain_number(text: object, digits: int = 19) -> bool:
    """ASCII digits only, at most ``digits`` of them: ``str.isdigit`` also takes '²' and '١' (int() refuses the first),
    and int() refuses strings over 4300 digits, so neither is asked before this."""
    return isinstance(text, str) and 0 < len(text) <= digits and text.isascii() and text.isdigit()


def check_version(text: str | None, what: str = "--triton-version") -> str | None:
    """A model version as Triton numbers them (a positive int64), normalized (``007`` -> ``7``); UsageError else."""
    if text is None:
        return None
    if not plain_number(text) or not 0 < int(text) < 2**63:
        shown = f", not {text!r}" if isinstance(text, str) and text.isprintable() and len(text) <= 40 else ""
        raise UsageError(f"{what} must be a model version number from 1 to {2**63 - 1}{shown}")
    return str(int(text))


def _port(text: str | None, scheme: str | None) -> int:
    if text in (None, ""):
        if scheme is None:
            raise UsageError("a Triton URL without a scheme needs a port (host:port)")
        return DEFAULT_PORTS[scheme]
    if not plain_number(text, 5) or not 0 < int(text) < 65536:
        shown = f" {text!r}" if len(text) <= 20 else ""
        raise UsageError(f"the port{shown} of the Triton URL is not a number from 1 to 65535")
    return int(text)


def _model_and_version(path: str | None, query: str | None) -> tuple[str | None, str | None]:
    parts = [p for p in (path or "").split("/") if p]
    if parts[:2] == ["v2", "models"]:  # Triton's REST form
        parts = parts[2:]
        if not parts:
            raise UsageError("a Triton URL is [scheme://]host:port, optionally followed by /MODEL?version=N")
        if len(parts) == 3 and parts[1] == "versions":
            parts, query = parts[:1], f"version={parts[2]}" + (f"&{query}" if query else "")
    if len(parts) > 1:
        raise UsageError("a Triton URL is [scheme://]host:port, optionally followed by /MODEL?version=N")
    model = check_model_name(parts[0], what="model name in the URL") if parts else None
    version = None
    for item in (query or "").split("&"):
        if not item:
            continue
        key, _, value = item.partition("=")
        if key != "version" or not plain_number(value):
            raise UsageError("the only query a Triton URL takes is version=N (a number)")
        version = check_version(value, "the version in a Triton URL")
    if version is not None and model is None:
        raise UsageError("a version in a Triton URL needs a model: host:port/MODEL?version=N")
    return model, version


def parse_endpoint_url(url: str, *, allow_credentials: bool = False) -> EndpointUrl:
    """Parse any accepted form (see the module docstring); UsageError for anything else.

    A ``user:password@`` is refused (never shown) rather than dropped: every caller would otherwise run
    unauthenticated with the credentials silently unused (nightly night after night). ``allow_credentials=True``
    drops them instead, for callers that only want the location of a URL someone else will use."""
    text = (url or "").strip()
    if not text or _CONTROL.search(text) or " " in text:
        raise UsageError("a Triton URL must be [scheme://]host:port without spaces or control characters")
    match = _URL.match(text)
    if not match:
        raise UsageError("a Triton URL is [scheme://]host:port, optionally followed by /MODEL?version=N")
    if match.group("userinfo") is not None and not allow_credentials:
        raise UsageError("the URL holds credentials (user:password@, not shown), which gapcheck never sends: "
                         "remove them and pass a header instead (e.g. triton-access-token)")
    scheme = (match.group("scheme") or "").lower() or None
    if scheme is not None and scheme not in SCHEMES:
        raise UsageError(f"unsupported URL scheme {scheme!r} for a Triton server: use http, https, grpc or grpcs")
    protocol, ssl = SCHEMES[scheme] if scheme else (None, False)
    model, version = _model_and_version(match.group("path"), match.group("query"))
    return EndpointUrl(host=match.group("host"), port=_port(match.group("port"), scheme), protocol=protocol,
                       ssl=ssl, model=model, version=version)


def secrets_in(url: str, headers: dict[str, str] | None) -> tuple[str, ...]:
    """Every string that must never be printed: header values (and their escaped forms), the credentials after an
    ``Authorization`` scheme (a Bearer token alone; Basic's decoded ``user:password`` and password) and URL userinfo."""
    values: list[str] = []
    for value in (headers or {}).values():
        if value:
            values += [value, value.encode("unicode_escape").decode("ascii", "replace"), repr(value)[1:-1]]
            # A value split over lines by a message still leaks its longer lines; a server that says "invalid
            # token X" quotes the credential without its scheme ("Bearer X", "Basic X").
            values += [line for line in re.split(r"[\r\n]+", value) if len(line) >= 4]
            values += [part for part in value.split() if len(part) >= 8]
            values += _credentials(value)
    userinfo = re.match(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*://)?([^/@]+)@", (url or "").strip())
    if userinfo:
        values.append(userinfo.group(1))
        values.extend(p for p in userinfo.group(1).split(":") if len(p) >= 3)
    # Longest first so a secret that contains another is replaced whole.
    return tuple(sorted({v for v in values if v}, key=len, reverse=True))


# Authorization schemes whose second word is the credential itself (RFC 9110 registry and common API gateways).
_AUTH_SCHEMES = frozenset({"basic", "bearer", "token", "apikey", "api-key", "key", "jwt", "negotiate", "oauth",
                           "dpop", "sso", "session"})
_SCHEME_VALUE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_.+-]*)\s+(\S+)\s*$")


def _credentials(value: str) -> list[str]:
    """What a server may echo of an ``Authorization``-style ``<scheme> <credentials>`` value: the credentials
    alone (however short), and for Basic the decoded ``user:password`` and the password, which a server that
    checked them has in hand (a user name alone is not a secret, and hiding it would blank common words)."""
    match = _SCHEME_VALUE.match(value)
    if not match or match.group(1).lower() not in _AUTH_SCHEMES:
        return []  # "X-Team: vision research" is not a credential: its words must not vanish from tensor names
    scheme, token = match.groups()
    found = [token] if len(token) >= 3 else []
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(token + "=" * (-len(token) % 4), validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            return found
        user, sep, password = decoded.partition(":")
        found += [decoded] if decoded.isprintable() and len(decoded) >= 3 else []
        found += [password] if sep and password.isprintable() and len(password) >= 3 else []
    return found


def clean_text(text: str, limit: int = 400) -> str:
    """One line, no control characters (a hostile server writes what it likes), bounded length."""
    text = _CONTROL.sub("?", text.replace("\r", " ").replace("\n", " "))
    return text if len(text) <= limit else text[: limit - 3] + "..."


_WORD = re.compile(r"[A-Za-z0-9._~+/=-]{8,}")
# Characters a terminal, a browser or a JSON viewer shows as nothing (format characters such as U+200B, U+00AD,
# U+2060, U+FEFF; combining and enclosing marks drawn over their neighbour; control characters but line breaks and
# tabs): a secret split by them still reads whole.
_INVISIBLE = frozenset({"Cf", "Mn", "Me", "Cc"})
_HIDDEN_ASCII = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")


def _shown(char: str) -> bool:
    return char.isspace() or unicodedata.category(char) not in _INVISIBLE


def _view(text: str) -> tuple[str, Sequence[int]]:
    """``text`` as a reader sees it: invisible characters dropped, every other one NFKC-normalized (fullwidth
    ``Ｓ`` reads ``S``), with the index in ``text`` of every character of the view (to map matches back)."""
    if text.isascii() and not _HIDDEN_ASCII.search(text):  # the common case: the text is its own view
        return text, range(len(text))
    chars: list[str] = []
    origin: list[int] = []
    for index, char in enumerate(text):
        for normal in unicodedata.normalize("NFKC", char) if _shown(char) else "":
            if _shown(normal):
                chars.append(normal)
                origin.append(index)
    return "".join(chars), origin


def _spans(view: str, secrets: tuple[str, ...], windows: frozenset[str]) -> list[tuple[int, int]]:
    """Where in ``view`` a secret (or, with ``windows``, a word sharing 8 characters with one) stands."""
    spans = []
    for secret in secrets:
        start = view.find(secret)
        while start >= 0:
            spans.append((start, start + len(secret)))
            start = view.find(secret, start + len(secret))
    for match in _WORD.finditer(view) if windows else ():
        found = match.group().lower()
        if any(found[i:i + 8] in windows for i in range(len(found) - 7)):
            spans.append(match.span())
    return spans


@functools.lru_cache(maxsize=64)
def _prepared(secrets: tuple[str, ...], fragments: bool) -> tuple[tuple[str, ...], frozenset[str]]:
    """The secrets as a reader sees them, longest first, and (``fragments``) their 8-character windows: asked once
    per set of secrets, since a server's metadata is redacted string by string."""
    seen = tuple(sorted({_view(s)[0] for s in secrets} - {""}, key=len, reverse=True))
    return seen, frozenset(s.lower()[i:i + 8] for s in seen for i in range(len(s) - 7)) if fragments else frozenset()


def redact(text: str, secrets: tuple[str, ...], *, fragments: bool = False) -> str:
    """``text`` with every secret replaced. ``fragments`` (for credentials, not for URLs whose host must stay
    readable): also any word that shares 8 characters in a row with one, whatever its case (a server may echo a
    token cut short, lower-cased, or split by a control character it printed).

    Secrets are looked for in the text as a reader sees it (:func:`_view`: format characters and combining marks
    dropped, NFKC applied), so a token split by U+200B or U+00AD, or written in fullwidth letters, is found too;
    each match is mapped back and the ORIGINAL characters it covers are replaced."""
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    seen, windows = _prepared(tuple(secrets), fragments)
    if not seen:
        return text
    view, origin = _view(text)
    spans = sorted((origin[a], origin[b - 1] + 1) for a, b in _spans(view, seen, windows) if b > a)
    if not spans:
        return text
    merged: list[list[int]] = []
    for start, end in spans:  # sorted: overlapping matches become one replacement
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    parts, last = [], 0
    for start, end in merged:
        parts += [text[last:start], REDACTED]
        last = end
    return "".join(parts) + text[last:]


_HEADER_KEY = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # RFC 9110 token


def check_headers(headers: dict[str, str]) -> dict[str, str]:
    """Headers safe to send: token keys, printable values. Errors name the key, never the value."""
    for key, value in headers.items():
        if not isinstance(key, str) or not _HEADER_KEY.match(key):
            raise UsageError(f"header name {key!r} is not a valid HTTP header name" if isinstance(key, str)
                             and not _CONTROL.search(key) else "a header name holds a control character or space")
        if not isinstance(value, str):
            raise UsageError(f"header {key!r}: its value must be text")
        if _CONTROL.search(value.replace("\t", "")):
            raise UsageError(f"header {key!r}: its value holds a newline or control character "
                             "(not shown: header values are secret)")
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            raise UsageError(f"header {key!r}: its value holds characters HTTP headers cannot carry "
                             "(not shown: header values are secret)") from None
    return dict(headers)

"""What every option group is made of: :class:`Opt` (one option's flag, help, config key, range) and the checks
every value passes (one validator for numbers, one for headers, one for output paths).

A group is a frozen dataclass whose ``OPTIONS`` tuple describes its fields once; the CLI
(:mod:`gapcheck.cli.groups`) turns that tuple into typer options and resolves file < environment < flags,
and the library builds the group directly. Either way ``__post_init__`` runs :meth:`Group.validate`, so a
value refused on the command line is refused from a config file, the environment or Python too.
Nothing here imports torch or numpy.
"""
from __future__ import annotations

import math
import re
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

from gapcheck.errors import UsageError


@dataclass(frozen=True)
class Opt:
    """One option of a group.

    ``field``: the group's field; ``flag``: its spelling (``--num-samples``); ``kind``: the value's Python type as
    typer reads it (``list[str]`` for a repeatable flag); ``key``: its key in a config section (None: flag only);
    ``low``/``high``: the closed range of a number (``low_open``: the low end excluded); ``aliases``: hidden older
    spellings that are still accepted.
    """

    field: str
    flag: str
    help: str
    kind: Any = str
    key: str | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    aliases: tuple[str, ...] = ()
    metavar: str | None = None

    def environment(self, section: str) -> str | None:
        """The environment variable that sets it through ``[section]`` (gapcheck.config: GAPCHECK_<SECTION>__<KEY>)."""
        return None if self.key is None else f"GAPCHECK_{section.upper()}__{self.key.upper()}"


class Group:
    """Base of the option groups: validation of numbers from ``OPTIONS``, plus the group's own ``check()``."""

    OPTIONS: ClassVar[tuple[Opt, ...]] = ()
    SECTION: ClassVar[str | None] = None  # the group's own config section ([triton], [engine], [cache])

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        for opt in self.OPTIONS:
            value = getattr(self, opt.field)
            if opt.low is not None or opt.high is not None:
                check_number(value, opt.flag, low=opt.low, high=opt.high, low_open=opt.low_open)
        self.check()

    def check(self) -> None:
        """Cross-field checks of a group (override)."""

    @classmethod
    def option(cls, name: str) -> Opt:
        return next(opt for opt in cls.OPTIONS if opt.field == name)

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Each field's default (what a flag left alone and an absent config key give)."""
        out: dict[str, Any] = {}
        for f in fields(cls):  # type: ignore[arg-type]
            if f.default is not MISSING:
                out[f.name] = f.default
            elif f.default_factory is not MISSING:
                out[f.name] = f.default_factory()
        return out


def check_number(value: Any, name: str, *, low: float | None = 0.0, high: float | None = None,
                 low_open: bool = False) -> Any:
    """THE number check: finite, and within [low, high] (low excluded with ``low_open``); UsageError (exit 2) naming
    ``name`` otherwise. None passes (an option left unset). Every float option of every command goes through here."""
    if value is None or isinstance(value, bool):
        return value
    if not isinstance(value, (int, float)):
        raise UsageError(f"{name} must be a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"{name} must be a finite number, got {value!r}")
    if low is not None and (value <= low if low_open else value < low):
        raise UsageError(f"{name} must be {'>' if low_open else '>='} {low:g}, got {value!r}")
    if high is not None and value > high:
        raise UsageError(f"{name} must be <= {high:g}, got {value!r}")
    return value


_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # RFC 9110 token
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # tab is allowed inside a header value


#: Headers the client sets itself: framing (a user's content-length made every GET wait for a body until the deadline),
#: routing and connection management; and HTTP/2 pseudo-headers' plain names gRPC reserves.
RESERVED_HEADERS = frozenset({"content-length", "transfer-encoding", "host", "connection", "keep-alive", "upgrade",
                              "te", "trailer", "proxy-connection", "expect", "grpc-timeout",
                              "grpc-encoding", "grpc-accept-encoding"})
MAX_HEADER_VALUE = 16384  # characters: Triton's HTTP server (and most proxies) refuse headers over 8-16 KB


def check_header(name: str, value: str, where: str) -> tuple[str, str]:
    """THE header check: an RFC 9110 token name and a value without CR, LF or other control characters.
    Errors name ``where`` and the header name (when printable), never the value: header values are secrets."""
    if not isinstance(name, str) or not _HEADER_NAME.match(name):
        shown = f" {name!r}" if isinstance(name, str) and name.isprintable() else ""
        raise UsageError(f"{where}: header name{shown} is not a valid HTTP header name (letters, digits, -, no spaces "
                         "or control characters)")
    if name.lower() in RESERVED_HEADERS:
        raise UsageError(f"{where}: header {name!r} is set by the HTTP/gRPC client itself (it frames, routes or "
                         "times the request; given here it breaks every request): leave it out")
    if not isinstance(value, str) or _CONTROL.search(value):
        raise UsageError(f"{where}: header {name!r}: its value holds a newline or control character "
                         "(not shown: header values are secret)")
    if len(value) > MAX_HEADER_VALUE:
        raise UsageError(f"{where}: header {name!r}: its value is {len(value)} characters (at most {MAX_HEADER_VALUE}; "
                         "servers refuse longer headers) (not shown: header values are secret)")
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        raise UsageError(f"{where}: header {name!r}: its value holds characters HTTP headers cannot carry "
                         "(not shown: header values are secret)") from None
    return name, value


def parse_headers(items: tuple[str, ...] | list[str], flag: str) -> dict[str, str]:
    """``KEY:VALUE`` pairs, checked; a malformed one is named by flag and position only (its value may be a secret)."""
    headers = {}
    for position, item in enumerate(items, start=1):
        key, sep, value = item.partition(":")
        if not sep or not key.strip(" \t"):
            raise UsageError(f"{flag} #{position} must be KEY:VALUE")
        name, text = check_header(key.strip(" \t"), value.strip(" \t"), f"{flag} #{position}")
        headers[name] = text
    return headers


def check_output_file(path: Path | None, what: str) -> Path | None:
    """A file gapcheck will write after the work: checked now (exit 2), never after minutes of work."""
    if path is None:
        return None
    from gapcheck.atomic import check_writable

    return check_writable(path, what=what)


def check_input_file(path: Path | None, what: str) -> Path | None:
    """A file gapcheck will read: it must be a regular file now."""
    if path is not None and not Path(path).is_file():
        raise UsageError(f"{what} {path} does not exist or is not a file")
    return path

"""``RemoteSpec``: the deadline and retries of every remote read of a data split (``http(s)://``, ``s3://``, ...).

``timeout_s`` is ONE total deadline per read — a listing, a footer, an image, one block of a streamed table — that
every attempt of that read shares (retries included), so a silent server costs ``timeout_s`` per read, never
``(retries + 1) × timeout_s``. ``retries`` bounds the attempts inside that deadline (transient failures only).
Keys of ``[remote]`` (``timeout_s``, ``retries``; environment ``GAPCHECK_REMOTE__TIMEOUT_S`` /
``GAPCHECK_REMOTE__RETRIES``), flags ``--remote-timeout`` / ``--remote-retries``: file < environment < flags. The older
``GAPCHECK_REMOTE_TIMEOUT_S`` / ``GAPCHECK_REMOTE_RETRIES`` are read only when neither the file nor the newer
environment names set a value. Light: no fsspec or aiohttp at import.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar, Optional

from pydantic import Field

from gapcheck.config import Section, register_section
from gapcheck.groups.base import Group, Opt

TIMEOUT_ENV = "GAPCHECK_REMOTE_TIMEOUT_S"  # how the resolved values reach every worker (process pool, local Ray)
RETRIES_ENV = "GAPCHECK_REMOTE_RETRIES"
DEFAULT_TIMEOUT_S = 30.0  # the Triton client's total deadline (gapcheck.triton.url.DEFAULT_TIMEOUT_S)
DEFAULT_RETRIES = 3
MAX_TIMEOUT_S = 3600.0
MAX_RETRIES = 10


class RemoteSection(Section):
    """``[remote]``: the keys of :class:`RemoteSpec`."""

    timeout_s: Optional[float] = Field(default=None, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)
    retries: Optional[int] = Field(default=None, ge=0, le=MAX_RETRIES)


register_section("remote", RemoteSection)


@dataclass(frozen=True)
class RemoteSpec(Group):
    timeout_s: float | None = None  # None: the older environment name, else DEFAULT_TIMEOUT_S
    retries: int | None = None

    SECTION: ClassVar[str | None] = "remote"
    OPTIONS: ClassVar[tuple[Opt, ...]] = (
        Opt("timeout_s", "--remote-timeout", "Total deadline in seconds of one remote read of a split (http(s)://, "
            "s3:// ...), retries included. Default 30.", Optional[float], key="timeout_s", low=0.0, low_open=True,
            high=MAX_TIMEOUT_S, metavar="SECONDS"),
        Opt("retries", "--remote-retries", "Retries of a remote read after a transient failure (no answer, reset, "
            "HTTP 408/429/5xx), within its deadline. Default 3.", Optional[int], key="retries", low=0,
            high=MAX_RETRIES),
    )

    def resolved(self) -> tuple[float, int]:
        """(timeout_s, retries): the group's values, else the older environment names, else the defaults; checked."""
        from gapcheck.groups.base import check_number

        timeout, retries = self.timeout_s, self.retries
        try:
            if timeout is None:
                timeout = float(os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT_S)
            if retries is None:
                retries = int(os.environ.get(RETRIES_ENV) or DEFAULT_RETRIES)
        except ValueError as exc:
            from gapcheck.errors import UsageError
            raise UsageError(f"{TIMEOUT_ENV}/{RETRIES_ENV}: {exc}") from None
        check_number(timeout, TIMEOUT_ENV, low=0.0, low_open=True, high=MAX_TIMEOUT_S)
        check_number(retries, RETRIES_ENV, low=0, high=MAX_RETRIES)
        return float(timeout), int(retries)

    @contextlib.contextmanager
    def applied(self) -> Iterator[tuple[float, int]]:
        """Make these the remote read settings of this process and of the workers it starts inside the block
        (they read the environment), restoring the previous environment after."""
        timeout, retries = self.resolved()
        previous = {name: os.environ.get(name) for name in (TIMEOUT_ENV, RETRIES_ENV)}
        os.environ[TIMEOUT_ENV], os.environ[RETRIES_ENV] = repr(timeout), str(retries)
        try:
            yield timeout, retries
        finally:
            for name, value in previous.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

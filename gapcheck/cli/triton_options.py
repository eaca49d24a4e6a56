"""How the CLI words the library's Triton errors (:func:`triton_errors`).

The Triton options themselves are the :class:`gapcheck.groups.TritonTarget` group (flags, ``[triton]`` keys,
validation, ``endpoint()``/``target()``); commands declare it (:mod:`gapcheck.cli.groups`).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from gapcheck.errors import UsageError


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

"""Turn the Triton connection options of any command into one :class:`TritonEndpoint`.

``triton-audit`` and ``export-diff`` name their flags differently (``--header`` vs ``--triton-header``) but
parse them here, the same way: a malformed header or a missing TLS file is a usage error that never
echoes a header value.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from gapcheck.cli.choices import Protocol
from gapcheck.errors import UsageError
from gapcheck.triton.client import DEFAULT_RETRIES, DEFAULT_TIMEOUT_S, TlsOptions, TritonEndpoint


def parse_headers(items: list[str], *, flag: str = "--header") -> dict[str, str]:
    """``KEY:VALUE`` pairs; a malformed one is named by flag and position only, since its value may be a secret."""
    headers = {}
    for position, item in enumerate(items, start=1):
        key, sep, value = item.partition(":")
        if not sep or not key.strip():
            raise UsageError(f"{flag} #{position} must be KEY:VALUE")
        headers[key.strip()] = value.strip()
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
    return TlsOptions(*(str(p) if p else None for p in paths), insecure=insecure)


def triton_endpoint(
    url: str,
    *,
    protocol: Protocol,
    headers: list[str],
    header_flag: str,
    ssl: bool,
    root_cert: Optional[Path] = None,
    private_key: Optional[Path] = None,
    cert_chain: Optional[Path] = None,
    insecure: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    retries: int = DEFAULT_RETRIES,
) -> TritonEndpoint:
    """The endpoint the options describe; ``header_flag`` is the command's name for its header option."""
    return TritonEndpoint(
        url,
        protocol=protocol.value,
        headers=parse_headers(headers, flag=header_flag),
        ssl=ssl,
        tls=tls_options(ssl, root_cert, private_key, cert_chain, insecure),
        timeout_s=timeout_s,
        retries=retries,
    )

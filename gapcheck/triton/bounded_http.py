"""tritonclient's HTTP client with every response body bounded by bytes.

A total deadline stops a server that trickles; it does not stop one that sends gigabytes quickly.
tritonclient reads each body whole (``response.read()``), so the bound sits on the response object.
"""
from __future__ import annotations

from typing import Any

import tritonclient.http as httpclient

from gapcheck.triton.url import DEFAULT_MAX_RESPONSE_BYTES


class ResponseTooLargeError(Exception):
    """An answer larger than the endpoint's ``max_response_bytes`` (the connection is then dropped)."""


class _BoundedResponse:
    """A geventhttpclient response whose body is read at most ``limit`` bytes far.

    tritonclient reads every body whole with ``response.read()``; this wrapper refuses a declared
    ``Content-Length`` over the limit before reading anything, and stops a chunked or undeclared body
    as soon as it passes the limit, so a hostile server cannot make gapcheck allocate what it sends.
    """

    def __init__(self, response: Any, limit: int) -> None:
        self._response = response
        self._limit = limit
        declared = getattr(response, "content_length", None)
        if isinstance(declared, int) and declared > limit:
            raise ResponseTooLargeError(_too_large(limit, f"declares {declared} bytes"))
        # tritonclient inflates a gzip/deflate answer whole, unbounded (_infer_result.py: gzip.decompress of the
        # body): a few kilobytes could become gigabytes. gapcheck never asks for compression, so none is taken.
        encoding = str(response.get("Content-Encoding", "") or "").strip().lower()
        if encoding not in ("", "identity"):
            raise ResponseTooLargeError(f"the answer is compressed (Content-Encoding: {encoding[:40]!r}), which "
                                        "gapcheck never asks for: refused, its size once inflated is unbounded")

    def read(self, length: int | None = None) -> bytes:
        if length is not None:
            return bytes(self._response.read(length))
        chunks, total = [], 0
        while chunk := self._response.read(64 * 1024):
            total += len(chunk)
            if total > self._limit:
                raise ResponseTooLargeError(_too_large(self._limit, "went on past it"))
            chunks.append(chunk)
        return b"".join(chunks)

    def __getitem__(self, key: str) -> Any:
        return self._response[key]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._response, name)


def _too_large(limit: int, what: str) -> str:
    return f"the answer exceeds the response size limit of {limit} bytes ({what})"


class BoundedHttpClient(httpclient.InferenceServerClient):  # type: ignore[misc]
    """tritonclient's HTTP client with every response body bounded (see :class:`_BoundedResponse`)."""

    max_response_bytes = DEFAULT_MAX_RESPONSE_BYTES

    def _get(self, request_uri: str, headers: Any, query_params: Any) -> Any:
        return _BoundedResponse(super()._get(request_uri, headers, query_params), self.max_response_bytes)

    def _post(self, request_uri: str, request_body: Any, headers: Any, query_params: Any) -> Any:
        return _BoundedResponse(super()._post(request_uri, request_body, headers, query_params),
                                self.max_response_bytes)

"""A Triton Inference Server as a gapcheck backend (HTTP or gRPC).

Opening the backend checks, with bounded retries, that the server is live and the model
(version) ready, and reads the model's metadata once; ``infer`` sends exactly the arrays it
is given (no casting: an FP16-declared input must show up as an error, not be papered over),
except the inputs named in ``input_dtypes``: a caller that audited the deployment and found it
computes in FP16 (:mod:`gapcheck.export_diff.served_precision`) sends its FP32 samples as FP16.
Every failure is an :class:`gapcheck.errors.EndpointError` (exit 3) with header values redacted.

On a hardened server (restricted APIs) the backend uses what it may: readiness that cannot be
asked is skipped, tensors come from the model config when metadata is restricted, and what was
skipped is listed in :attr:`TritonBackend.restricted`. Only when neither metadata nor config may
be read, or inference itself is restricted, does it raise :class:`RestrictedApiError` (exit 2).
"""
from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
from tritonclient.utils import triton_to_np_dtype

from gapcheck.backends.base import TensorSpec
from gapcheck.errors import EndpointError
from gapcheck.tensors import contiguous, fingerprint
from gapcheck.triton.client import RestrictedApiError, TritonEndpoint, connect

logger = logging.getLogger(__name__)


def _spec(entry: dict[str, Any]) -> TensorSpec:
    datatype = str(entry.get("datatype", ""))
    dtype = triton_to_np_dtype(datatype)
    # BYTES maps to np.object_; BF16 has no numpy type: keep Triton's own name so nothing is lost.
    dtype_name = np.dtype(dtype).name if dtype is not None and datatype not in ("BYTES", "BF16") else datatype
    shape = tuple(None if int(d) < 0 else int(d) for d in entry.get("shape", []))
    return TensorSpec(name=str(entry["name"]), dtype=dtype_name, shape=shape)


class TritonBackend(AbstractContextManager["TritonBackend"]):
    """Run a model served by Triton; implements :class:`gapcheck.backends.base.Backend`."""

    def __init__(self, endpoint: TritonEndpoint, model: str, *, version: str | int | None = None,
                 output_map: dict[str, str] | None = None, input_dtypes: dict[str, str] | None = None,
                 input_map: dict[str, str] | None = None, not_served: tuple[str, ...] = ()) -> None:
        self.model = model
        # served input -> the dtype a float sample is sent as (FP16 for a deployment that takes FP16)
        self.input_dtypes = {name: np.dtype(dtype) for name, dtype in (input_dtypes or {}).items()}
        # graph output name -> served output name, for a deployment that names its outputs its own way:
        # infer() returns the served values under the graph's names (see export_diff.served_names)
        self.output_map = dict(output_map or {})
        # graph input name -> served input name (INPUT__0, images, ...): infer() sends each feed under the name the
        # deployment takes (gapcheck.triton.names pairs them); fingerprints stay keyed by the graph's names
        self.input_map = dict(input_map or {})
        # graph outputs the deployment does not serve (the caller's audit paired none with them): infer() does not
        # return them, and a comparison skips them (each is reported as its own gap by whoever audited)
        self.not_served = tuple(not_served)
        self.last_input_fingerprints: dict[str, str] = {}
        self.version = None if version in (None, "") else str(version)
        self.restricted: list[str] = []  # "what was not checked: API restricted", for reports
        self.connection = connect(endpoint)
        self.protocol = self.connection.protocol  # resolved: a bare host:port was probed
        self.name = f"triton-{self.protocol}"
        try:
            self._open()
        except BaseException:
            self.connection.close()
            raise

    @property
    def where(self) -> str:
        """Model, version and endpoint, safe to print."""
        version = f" v{self.version}" if self.version else ""
        return f"{self.model}{version} @ {self.connection.display_url} ({self.protocol})"

    def _open(self) -> None:
        conn = self.connection
        if not self._allowed("server liveness", conn.server_live, True):
            raise EndpointError(f"Triton server {conn.display_url} is not live")
        if not self._allowed("model readiness", lambda: conn.model_ready(self.model, self.version), True):
            raise EndpointError(f"model {self.model!r}{' version ' + self.version if self.version else ''} "
                                f"is not ready on {conn.display_url}{self._not_ready_reason()}")
        metadata = self._allowed("model metadata", lambda: conn.model_metadata(self.model, self.version), None)
        if metadata is None:
            metadata = self._metadata_from_config()
        self._inputs = [_spec(e) for e in metadata.get("inputs", [])]
        self._outputs = [_spec(e) for e in metadata.get("outputs", [])]
        self.served_versions = tuple(str(v) for v in metadata.get("versions", []))
        self.platform = str(metadata.get("platform", ""))
        logger.debug("opened %s: %d inputs, %d outputs", self.where, len(self._inputs), len(self._outputs))

    def _allowed(self, what: str, fn: Any, default: Any) -> Any:
        try:
            return fn()
        except RestrictedApiError as exc:
            self.restricted.append(f"{what} not checked: {exc.api} API restricted")
            return default

    def _metadata_from_config(self) -> dict[str, Any]:
        """Metadata's tensor entries rebuilt from the model config (full shapes, metadata data types)."""
        try:
            config = self.connection.model_config(self.model, self.version)
        except RestrictedApiError as exc:
            raise RestrictedApiError(f"{exc.message} (and the model metadata is restricted too: the tensors of "
                                     f"{self.model!r} cannot be read)", api=exc.api, header=exc.header,
                                     hint=exc.hint) from None
        batch = [-1] if int(config.get("max_batch_size", 0)) > 0 else []

        def entries(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
            out = []
            for item in items:
                dims = (item.get("reshape") or {}).get("shape", item.get("dims", []))
                datatype = str(item.get("data_type", "TYPE_INVALID")).removeprefix("TYPE_")
                out.append({"name": item.get("name", ""), "datatype": "BYTES" if datatype == "STRING" else datatype,
                            "shape": batch + [int(d) for d in dims]})
            return out

        return {"inputs": entries(config.get("input", [])), "outputs": entries(config.get("output", [])),
                "platform": str(config.get("platform", "") or config.get("backend", ""))}

    def _not_ready_reason(self) -> str:
        try:
            index = self.connection.repository_index()
        except EndpointError:
            return ""
        for entry in index:
            if entry.get("name") == self.model and (not self.version or str(entry.get("version", "")) == self.version):
                state, reason = entry.get("state", ""), entry.get("reason", "")
                if state or reason:
                    return f" (state {state or 'unknown'}{': ' + self.connection.redact(reason) if reason else ''})"
        return ""

    def input_specs(self) -> list[TensorSpec]:
        return list(self._inputs)

    def output_specs(self) -> list[TensorSpec]:
        return list(self._outputs)

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = [spec.name for spec in self._outputs]
        sent = {name: contiguous(self._as_served(name, array)) for name, array in feeds.items()}  # scalars: rank 0
        # The SHA256 of the bytes this request carries, so reports show what the server was fed.
        self.last_input_fingerprints = {name: fingerprint(array) for name, array in sent.items()}
        served = {self.input_map.get(name, name): array for name, array in sent.items()}
        values = self.connection.infer(self.model, served, outputs, self.version)
        if not self.output_map:
            return values
        graph_name = {served: graph for graph, served in self.output_map.items()}
        return {graph_name.get(name, name): array for name, array in values.items()}

    def _as_served(self, name: str, array: np.ndarray) -> np.ndarray:
        """A float sample cast to the dtype the deployment takes (``input_dtypes``); anything else as given."""
        dtype = self.input_dtypes.get(self.input_map.get(name, name), self.input_dtypes.get(name))
        array = np.asarray(array)
        if dtype is None or array.dtype == dtype or array.dtype.kind != "f":
            return array
        return array.astype(dtype)

    def close(self) -> None:
        self.connection.close()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

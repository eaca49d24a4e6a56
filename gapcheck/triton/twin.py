"""Server-side intermediates: run a temporary twin of a served model that also returns inner values.

The twin is the ONNX graph with the requested intermediate values marked as extra graph
outputs, loaded next to the real model through Triton's repository API (explicit model
control, config + file overrides), so the intermediates come from the server's own
runtime and settings. The twin is always unloaded afterwards, whatever happens.
"""
from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from gapcheck.errors import EndpointError, UsageError
from gapcheck.triton.client import RestrictedApiError, TritonConnection, TritonEndpoint, connect
from gapcheck.triton.repository import load_onnx, onnx_inputs, onnx_outputs

logger = logging.getLogger(__name__)

# Parts of the served config the twin inherits: they decide *how* the server runs the graph.
# Batching, warm-up, caching and version policies are left out: the twin gets whole tensors.
INHERITED_CONFIG_KEYS = ("platform", "backend", "runtime", "parameters", "optimization", "instance_group",
                         "default_model_filename")


def mark_outputs(model: onnx.ModelProto, value_names: list[str] | tuple[str, ...]) -> onnx.ModelProto:
    """A copy of ``model`` whose graph also outputs ``value_names`` (types from shape inference)."""
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    existing = {o.name for o in twin.graph.output}
    wanted = [n for n in dict.fromkeys(value_names) if n not in existing]
    if not wanted:
        return twin
    inferred = onnx.shape_inference.infer_shapes(twin)
    typed = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.input)}
    produced = {out for node in twin.graph.node for out in node.output} | {i.name for i in twin.graph.input}
    for name in wanted:
        if name not in produced:
            raise UsageError(f"'{name}' is not a value of the ONNX graph (no node produces it)")
        value = typed.get(name)
        if value is None or not value.type.tensor_type.elem_type:
            raise UsageError(f"the type of ONNX value '{name}' cannot be inferred, so it cannot be served as an output")
        twin.graph.output.append(value)
    return twin


def _dims(shape: tuple[int | None, ...]) -> list[int]:
    return [-1 if d is None else int(d) for d in shape]


def twin_config(served_config: dict[str, Any], twin: onnx.ModelProto, twin_name: str) -> dict[str, Any]:
    """Model config (JSON form) for the twin: the served model's runtime settings, the twin graph's tensors."""
    config = {k: served_config[k] for k in INHERITED_CONFIG_KEYS if served_config.get(k)}
    if "instance_group" in config:
        # Instance names belong to the original model; the server names the twin's itself.
        config["instance_group"] = [{k: v for k, v in g.items() if k != "name"} for g in config["instance_group"]]
    config["name"] = twin_name
    # No batching: inputs and intermediates keep their full shapes, whatever their leading axis means.
    config["max_batch_size"] = 0
    config["input"] = [{"name": t.name, "data_type": t.triton_type, "dims": _dims(t.shape)} for t in onnx_inputs(twin)]
    config["output"] = [{"name": t.name, "data_type": t.triton_type, "dims": _dims(t.shape)} for t in onnx_outputs(twin)]
    return config


def compare_intermediates_on_server(
    endpoint: TritonEndpoint,
    model: str,
    onnx_model: onnx.ModelProto | str | Path,
    value_names: list[str] | tuple[str, ...],
    feeds: dict[str, np.ndarray],
    *,
    version: str | int | None = None,
    extra_files: dict[str, bytes] | None = None,
) -> dict[str, np.ndarray]:
    """Run a twin of ``model`` that also returns ``value_names``; return every output of the twin by name.

    ``extra_files`` (paths relative to the version directory, e.g. ``{"model.py": ...}``) travel with the
    twin's ``model.onnx``, for backends that need more than the graph. Needs ``--model-control-mode=explicit``.
    """
    twin = mark_outputs(load_onnx(onnx_model), value_names)
    twin_name = f"{model}__gapcheck_twin_{uuid.uuid4().hex[:8]}"
    with connect(endpoint) as conn:
        try:
            config = twin_config(conn.model_config(model, None if version in (None, "") else str(version)), twin,
                                 twin_name)
        except RestrictedApiError as exc:
            raise _needs_api(exc, model, "its model config") from None
        files = {"file:1/model.onnx": twin.SerializeToString()}
        files.update({f"file:1/{path}": data for path, data in (extra_files or {}).items()})
        try:
            conn.load_model(twin_name, config=json.dumps(config), files=files)
        except RestrictedApiError as exc:
            raise _needs_api(exc, model, "loading a temporary model (model control)") from None
        except EndpointError as exc:
            if "polling" in str(exc) or "explicit" in str(exc) or "not allowed" in str(exc):
                raise EndpointError(f"cannot load a twin of '{model}' on {conn.display_url}: {exc}",
                                    hint="start Triton with --model-control-mode=explicit") from None
            _unload(conn, twin_name)
            raise
        try:
            if not conn.model_ready(twin_name):
                raise EndpointError(f"the twin of '{model}' did not become ready on {conn.display_url}")
            return conn.infer(twin_name, feeds, [o.name for o in twin.graph.output])
        finally:
            _unload(conn, twin_name)


def _needs_api(exc: RestrictedApiError, model: str, what: str) -> RestrictedApiError:
    """The server's own words, framed: layer-by-layer comparison on the server needs this API."""
    return RestrictedApiError(f"comparing layers of '{model}' on the server needs {what}, which the server "
                              f"restricts: {exc.message}", api=exc.api, header=exc.header, hint=exc.hint)


def _unload(conn: TritonConnection, twin_name: str) -> None:
    try:
        conn.unload_model(twin_name)
    except EndpointError as exc:  # never mask the outcome; but say the server may still hold the twin
        logger.warning("could not unload the twin %s: %s", twin_name, exc)

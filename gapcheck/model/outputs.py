"""A model's own names for its output tensors, shared by the exporters, the torch backend and every command that
names graph outputs (export-diff, ``gapcheck export``, golden bundles).

Outputs are named as the model names them: a dict / ``ModelOutput`` / namedtuple / nested tuple output gives one
tensor per key path (``logits``, ``last_hidden_state``, ``past_key_values.0.key``); a bare tensor is ``output``.
It lives in ``model/`` (below ``backends/``) because the exporters need the same names and order as the backend.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch.utils._pytree import SequenceKey, tree_flatten, tree_flatten_with_path

__all__ = ["named_tensor_leaves", "output_names"]


def named_tensor_leaves(value: Any, prefix: str = "") -> list[tuple[str, torch.Tensor]]:
    """Every tensor in a model's output with its key path, in the exporters' flattening order.

    The order is torch's pytree order (what both exporters flatten by): mappings (``ModelOutput``
    included) by key, namedtuples by field, sequences by index, and any type registered with pytree
    (e.g. transformers' ``DynamicCache`` once ``register_dynamic_cache_export_support()`` ran) by its
    own keys. A type pytree does not know that holds per-layer ``keys``/``values`` (a transformers
    ``Cache``) is named ``<name>.<i>.key`` / ``.value``; None and Python scalars are skipped.
    """
    try:
        flat, _ = tree_flatten_with_path(value)
    except Exception:  # noqa: BLE001 - a registered type without key support: plain order, positional names
        flat = [((SequenceKey(i),), leaf) for i, leaf in enumerate(tree_flatten(value)[0])]
    leaves: list[tuple[str, torch.Tensor]] = []
    for path, leaf in flat:
        name = ".".join(filter(None, [prefix, *(_key_name(k) for k in path)]))
        if isinstance(leaf, torch.Tensor):
            leaves.append((name or "output", leaf))
        else:
            leaves.extend(_cache_leaves(leaf, name))
    return leaves


def output_names(module: Any, sample: Mapping[str, Any]) -> list[str]:
    """Run ``module`` once on ``sample`` (input name -> array, in the order ``forward`` takes them) and return the
    model's own names of its output tensors, as ``gapcheck export`` and export-diff name the graph's outputs."""
    with torch.no_grad():
        outputs = module(*(torch.from_numpy(np.ascontiguousarray(v)) for v in sample.values()))
    return [name for name, _ in named_tensor_leaves(outputs)]


def _key_name(key: Any) -> str:
    for attribute in ("key", "idx", "name"):  # MappingKey, SequenceKey, GetAttrKey
        if hasattr(key, attribute):
            return str(getattr(key, attribute))
    return str(key)


def _cache_leaves(value: Any, name: str) -> list[tuple[str, torch.Tensor]]:
    layers = getattr(value, "layers", None)  # transformers' Cache: per layer keys and values
    if not isinstance(layers, (list, tuple)):
        return []
    leaves = []
    for i, layer in enumerate(layers):
        for part in ("keys", "values"):
            tensor = getattr(layer, part, None)
            if isinstance(tensor, torch.Tensor):
                leaves.append((f"{name}.{i}.{part[:-1]}" if name else f"{i}.{part[:-1]}", tensor))
    return leaves

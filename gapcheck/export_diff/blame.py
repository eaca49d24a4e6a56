"""Which parameter or attribute of a diverging module differs: the file's initializers against the checkpoint.

A module whose ONNX ops disagree with torch even when fed torch's inputs (a *local* divergence) either carries
another weight or computes another op. The nodes that compute it are compared with the torch module: each
initializer named like a parameter with that parameter, a Conv that a tool fused with its BatchNorm with the
conv's weight folded by the BatchNorm (``w * gamma / sqrt(var + eps)``, bias ``(b - mean) * gamma / sqrt(var + eps)
+ beta``), and a Conv's pads, strides, dilations and groups with the conv's own. One sentence per difference.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import numpy_helper
from torch import nn
from torch.nn.modules.conv import _ConvNd

from gapcheck.model.mapping import GraphIndex

_RTOL = 1e-4  # folding a BatchNorm rounds; a planted change of 1% is 100x this


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    scale = float(np.max(np.abs(b))) or 1.0
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) / scale


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.size == b.size and _rel(a.reshape(b.shape) if a.shape != b.shape else a, b) <= _RTOL


def _folded(conv: _ConvNd | nn.Linear, bn) -> tuple[np.ndarray, np.ndarray]:
    scale = (bn.weight.detach() / (bn.running_var + bn.eps).sqrt()).double().numpy()
    weight = conv.weight.detach().double().numpy()
    bias = conv.bias.detach().double().numpy() if conv.bias is not None else np.zeros(weight.shape[0])
    folded = weight * scale.reshape((-1,) + (1,) * (weight.ndim - 1))
    return folded, (bias - bn.running_mean.double().numpy()) * scale + bn.bias.detach().double().numpy()


def _fused_conv(init: dict[str, np.ndarray], node: onnx.NodeProto, conv, bn, first: str, norm: str) -> list[str]:
    weight = init.get(node.input[1]) if len(node.input) > 1 else None
    if weight is None:
        return []
    bias = init.get(node.input[2]) if len(node.input) > 2 else None
    expected_w, expected_b = _folded(conv, bn)
    w_ok = _same(weight, expected_w)
    b_ok = bias is None or _same(bias, expected_b)
    if w_ok and b_ok:
        return []
    if not w_ok and b_ok:
        return [f"{first}.weight differs from the checkpoint (the fused Conv's weight, {norm} folded in, is off by "
                f"max rel {_rel(weight.reshape(expected_w.shape), expected_w):.2g})"]
    if w_ok and bias is not None:
        return [f"the fused Conv's bias differs from {first}/{norm} folded ({norm}.bias or running_mean, max rel "
                f"{_rel(bias, expected_b):.2g})"]
    return [f"the fused Conv's weight and bias both differ: {norm}'s scale (weight or running_var) differs from the "
            f"checkpoint (max rel {_rel(weight.reshape(expected_w.shape), expected_w):.2g})"]


def _conv_attributes(node: onnx.NodeProto, conv: _ConvNd, name: str) -> list[str]:
    attrs = {a.name: list(onnx.helper.get_attribute_value(a)) if a.type == onnx.AttributeProto.INTS
             else onnx.helper.get_attribute_value(a) for a in node.attribute}
    found = []
    if isinstance(conv.padding, tuple):
        expected = list(conv.padding) * 2
        pads = attrs.get("pads", [0] * len(expected))
        if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") or list(pads) != expected:
            found.append(f"{name}'s padding differs: the ONNX Conv pads {pads}"
                         f"{' auto_pad ' + str(attrs.get('auto_pad')) if 'auto_pad' in attrs else ''}, torch padding "
                         f"{tuple(conv.padding)}")
    if conv.padding_mode != "zeros":
        found.append(f"{name}'s padding mode differs: torch pads with {conv.padding_mode!r}, the ONNX Conv with zeros")
    for attr, torch_value in (("strides", conv.stride), ("dilations", conv.dilation)):
        if attr in attrs and list(attrs[attr]) != list(torch_value):
            found.append(f"{name}'s {attr} differ: ONNX {attrs[attr]}, torch {tuple(torch_value)}")
    if attrs.get("group", 1) != conv.groups:
        found.append(f"{name}'s groups differ: ONNX {attrs.get('group', 1)}, torch {conv.groups}")
    return found


def _eps(nodes, node_ids: Sequence[int], submodules: dict[str, nn.Module], owner: str,
         group_members: Sequence[str]) -> list[str]:
    """A normalization's epsilon against the module's own eps."""
    near = (owner, *group_members, *(p for p in submodules if p.startswith(owner + ".") and p.count(".") == owner.count(".") + 1))
    candidates = [p for p in dict.fromkeys(near) if hasattr(submodules.get(p), "eps")]
    found = []
    for i in node_ids:
        node = nodes[i]
        if node.op_type not in ("LayerNormalization", "SkipLayerNormalization", "BatchNormalization",
                                "InstanceNormalization", "GroupNormalization", "SimplifiedLayerNormalization"):
            continue
        eps = next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == "epsilon"), 1e-5)
        for path in candidates:
            expected = float(getattr(submodules[path], "eps"))  # noqa: B009 - a Module attribute, not typed
            if not np.isclose(eps, expected, rtol=1e-3, atol=0.0):
                found.append(f"{path}'s epsilon differs: ONNX {node.op_type} epsilon {eps:.3g}, torch eps {expected:.3g}")
    return found


def differences(index: GraphIndex, node_ids: Sequence[int], module: nn.Module, owner: str,
                group_members: Sequence[str] = ()) -> list[str]:
    """Sentences naming what differs between the nodes ``node_ids`` and the torch modules they implement.

    ``owner`` is the diverging module; ``group_members`` the fused group it heads (conv, BatchNorm, ...), if any.
    """
    nodes = index.model.graph.node
    submodules = dict(module.named_modules())
    params = {n: t.detach().cpu().double().numpy() for n, t in [*module.named_parameters(), *module.named_buffers()]}
    used = {name for i in node_ids for name in nodes[i].input if name in index.initializers}
    init = {t.name: numpy_helper.to_array(t) for t in index.model.graph.initializer if t.name in used}
    found: list[str] = []
    conv_name = group_members[0] if group_members else owner
    conv = submodules.get(conv_name)
    for i in node_ids:
        node = nodes[i]
        if node.op_type != "Conv" or not isinstance(conv, _ConvNd):
            continue
        reads_conv = len(node.input) > 1 and (node.input[1] == f"{conv_name}.weight"
                                              or node.input[1] in init and init[node.input[1]].shape == conv.weight.shape)
        if not reads_conv:
            continue
        if len(group_members) > 1:
            found += _fused_conv(init, node, conv, submodules[group_members[1]], conv_name, group_members[1])
        found += _conv_attributes(node, conv, conv_name)
    found += _eps(nodes, node_ids, submodules, owner, group_members)
    fused = {f"{conv_name}.weight", f"{conv_name}.bias"} if len(group_members) > 1 else set()
    for name, array in init.items():
        if name in params and name not in fused and array.size == params[name].size and not _same(array, params[name]):
            off = _rel(array.reshape(params[name].shape), params[name])
            found.append(f"{name} differs from the checkpoint (max rel {off:.2g})")
    return list(dict.fromkeys(found))

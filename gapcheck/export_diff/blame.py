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
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.conv import _ConvNd

from gapcheck.export_diff.nchwc import DOMAIN as NCHWC_DOMAIN
from gapcheck.export_diff.nchwc import Layout, unblock_filter
from gapcheck.model.mapping import GraphIndex

_RTOL = 1e-4  # folding a BatchNorm rounds; a planted change of 1% is 100x this


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    scale = float(np.max(np.abs(b))) or 1.0
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) / scale


#: an FP16 file's weights are the checkpoint's rounded to FP16 (a relative step of 2**-11, folded or not): an FP16
#: rounding is no difference from the checkpoint, a planted change of 1% is 10x this
_RTOL_FP16 = 1e-3


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    rtol = _RTOL_FP16 if a.dtype == np.float16 else _RTOL
    return a.size == b.size and _rel(a.reshape(b.shape) if a.shape != b.shape else a, b) <= rtol


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


def _conv_attributes(node: onnx.NodeProto, conv: _ConvNd, name: str, block: int = 0) -> list[str]:
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
    group = attrs.get("group", 1)
    if block and node.domain == NCHWC_DOMAIN and conv.groups > 1 and group == -(-conv.groups // block) * block:
        group = conv.groups  # a depthwise NCHWc Conv counts the block's padding channels as groups too
    if group != conv.groups:
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
                group_members: Sequence[str] = (), layout: Layout | None = None) -> list[str]:
    """Sentences naming what differs between the nodes ``node_ids`` and the torch modules they implement.

    ``owner`` is the diverging module; ``group_members`` the fused group it heads (conv, BatchNorm, ...), if any;
    ``layout`` reads ONNX Runtime's NCHWc Conv weights back as OIHW.
    """
    nodes = index.model.graph.node
    submodules = dict(module.named_modules())
    params = {n: t.detach().cpu().double().numpy() for n, t in [*module.named_parameters(), *module.named_buffers()]}
    used = {name for i in node_ids for name in nodes[i].input if name in index.initializers}
    init = {t.name: numpy_helper.to_array(t) for t in index.model.graph.initializer if t.name in used}
    found: list[str] = []
    conv_name = group_members[0] if group_members else owner
    conv = submodules.get(conv_name)
    if isinstance(conv, _ConvNd) and layout:
        for i in node_ids:
            init.update(_plain_weights(nodes[i], init, layout, conv))
    for i in node_ids:
        node = nodes[i]
        if node.op_type not in ("Conv", "FusedConv") or not isinstance(conv, _ConvNd):
            continue
        reads_conv = len(node.input) > 1 and (node.input[1] == f"{conv_name}.weight"
                                              or node.input[1] in init and init[node.input[1]].shape == conv.weight.shape)
        if not reads_conv:
            continue
        if len(group_members) > 1 and isinstance(submodules.get(group_members[1]), _BatchNorm):
            found += _fused_conv(init, node, conv, submodules[group_members[1]], conv_name, group_members[1])
        found += _conv_attributes(node, conv, conv_name, layout.block if layout else 0)
    if isinstance(conv, _ConvNd) and len(group_members) > 1:
        for i in node_ids:
            found += _fused_activation(nodes[i], submodules, group_members)
    found += _eps(nodes, node_ids, submodules, owner, group_members)
    fused = {f"{conv_name}.weight", f"{conv_name}.bias"} if len(group_members) > 1 \
        and isinstance(submodules.get(group_members[1]), _BatchNorm) else set()
    for name, array in init.items():
        if name in params and name not in fused and array.size == params[name].size and not _same(array, params[name]):
            off = _rel(array.reshape(params[name].shape), params[name])
            found.append(f"{name} differs from the checkpoint (max rel {off:.2g})")
    if not found and not group_members:
        found += _renamed_parameters(init, params, submodules.get(owner), owner)
    return list(dict.fromkeys(found))


def _renamed_parameters(init: dict[str, np.ndarray], params: dict[str, np.ndarray], module: nn.Module | None,
                        owner: str) -> list[str]:
    """The owner's weight and bias read by value where a tool renamed them (a name-normalising tool, onnxslim's
    transposed copy): an initializer within a few % of the parameter (as it is, or transposed: a MatMul's weight)
    is that parameter, and it differs when it is not within rounding of it."""
    found = []
    for kind in ("weight", "bias"):
        reference = params.get(f"{owner}.{kind}")
        if module is None or reference is None or reference.size < 2:
            continue
        for name, array in init.items():
            if name in params or array.size != reference.size:
                continue
            views = [array.reshape(reference.shape)]
            if array.ndim == 2 and reference.ndim == 2:
                views.append(array.T.reshape(reference.shape))
            off = min(_rel(view, reference) for view in views)
            if (_RTOL_FP16 if array.dtype == np.float16 else _RTOL) < off <= _SLICE_MATCH:  # FP16 rounding: no change
                found.append(f"{owner}.{kind} differs from the checkpoint (the file's {name}, max rel {off:.2g})")
    return found


def _plain_weights(node: onnx.NodeProto, init: dict[str, np.ndarray], layout: Layout, conv: _ConvNd
                   ) -> dict[str, np.ndarray]:
    """An NCHWc Conv's weight and bias as torch's conv holds them (reordered back, the block's padding cut)."""
    if node.domain != NCHWC_DOMAIN or node.op_type != "Conv" or len(node.input) < 2 or node.input[1] not in init:
        return {}
    out_channels, in_channels = conv.weight.shape[:2]
    weight = init[node.input[1]]
    if weight.ndim != conv.weight.dim() or weight.shape[0] < out_channels or weight.shape[0] % layout.block:
        return {}
    plain = {node.input[1]: unblock_filter(weight, layout.block, node.input[0] not in layout.blocked,
                                           (out_channels, in_channels))}
    if len(node.input) > 2 and node.input[2] in init:
        plain[node.input[2]] = init[node.input[2]][:out_channels]
    return plain


#: A Conv's fused activation (ONNX Runtime's NCHWc Conv and FusedConv ``activation`` attribute) and the torch
#: modules that compute it
_ACTIVATIONS = {"Relu": ("ReLU",), "LeakyRelu": ("LeakyReLU",), "Tanh": ("Tanh",), "Sigmoid": ("Sigmoid",),
                "HardSigmoid": ("Hardsigmoid",), "Clip": ("ReLU6", "Hardtanh"), "HardSwish": ("Hardswish",),
                "QuickGelu": ("SiLU", "Swish"), "Gelu": ("GELU",)}  # QuickGelu: x sigmoid(alpha x), alpha 1 is SiLU
#: torch activation modules (by class name): what a changed activation may have been replaced by too
ACTIVATION_CLASSES = frozenset({c for v in _ACTIVATIONS.values() for c in v} | {"PReLU", "ELU", "Mish", "SELU"})


def _fused_activation(node: onnx.NodeProto, submodules: dict[str, nn.Module], members: Sequence[str]) -> list[str]:
    """The activation a Conv applies itself (or an activation node after it) against the group's activation module
    (a changed activation)."""
    fused = next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == "activation"), None)
    if fused is None and node.op_type in _ACTIVATIONS:
        alpha = next((a.f for a in node.attribute if a.name == "alpha"), 1.0)
        fused = node.op_type if node.op_type != "QuickGelu" or alpha == 1.0 else None
    if fused is None:
        return []
    fused = fused.decode() if isinstance(fused, bytes) else str(fused)
    activations = [p for p in members if type(submodules.get(p)).__name__ in ACTIVATION_CLASSES]
    how = "fused into the Conv" if node.op_type in ("Conv", "FusedConv") else "after the Conv"
    return [f"the ONNX graph computes {fused} ({how}) where torch's {path} is "
            f"{type(submodules[path]).__name__}" for path in activations
            if type(submodules[path]).__name__ not in _ACTIVATIONS.get(fused, ())]


def conv_by_weight(index: GraphIndex, node: onnx.NodeProto, module: nn.Module, layout: Layout | None
                   ) -> tuple[str, str | None] | None:
    """The torch conv whose weight a Conv node holds, whatever a tool named it, and the BatchNorm folded into it
    (None when the weight is the conv's own): each output filter points the same way as the conv's (a folded
    BatchNorm scales filters, a planted weight change of a few % barely turns them), and no other conv comes
    within ten times as close. The BatchNorm is the one whose folding reproduces the weight best."""
    init = {t.name: numpy_helper.to_array(t) for t in index.model.graph.initializer if t.name in node.input[1:3]}
    if len(node.input) < 2 or node.input[1] not in init:
        return None

    def as_conv(conv: _ConvNd) -> np.ndarray:
        weight = init[node.input[1]]
        return _plain_weights(node, init, layout, conv).get(node.input[1], weight) if layout else weight

    submodules = dict(module.named_modules())
    fits = sorted((_turn(as_conv(conv), conv.weight.detach().double().numpy()), path)
                  for path, conv in submodules.items()
                  if isinstance(conv, _ConvNd) and as_conv(conv).shape == tuple(conv.weight.shape))
    if not fits or fits[0][0] > 1e-2 or (len(fits) > 1 and fits[1][0] < 10 * fits[0][0]):
        return None
    path = fits[0][1]
    return path, _folded_norm(as_conv(submodules[path]), path, module)


def _turn(weight: np.ndarray, reference: np.ndarray) -> float:
    """1 - the smallest cosine between a filter of ``weight`` and the same filter of ``reference``."""
    a, b = weight.reshape(len(weight), -1).astype(np.float64), reference.reshape(len(reference), -1)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    live = norms > 0
    if not live.any():
        return float("inf")
    return float(1.0 - np.min(np.sum(a[live] * b[live], axis=1) / norms[live]))


def _folded_norm(weight: np.ndarray, conv_path: str, module: nn.Module) -> str | None:
    """The BatchNorm whose folding into ``conv_path`` comes nearest ``weight`` (None: the bare weight does)."""
    submodules = dict(module.named_modules())
    conv = submodules[conv_path]
    best = (_rel(weight, conv.weight.detach().double().numpy()), None)
    for path, norm in submodules.items():
        if isinstance(norm, _BatchNorm) and norm.num_features == conv.weight.shape[0] and norm.running_var is not None \
                and norm.weight is not None:
            best = min(best, (_rel(weight, _folded(conv, norm)[0]), path), key=lambda t: t[0])
    return best[1]


#: A slice of a fused initializer is a Linear's weight when within this fraction of it (a planted change of a few %
#: still names its Linear) and every other Linear of that shape is ten times farther (query, key and value differ O(1))
_SLICE_MATCH = 0.05


def _linear_slices(array: np.ndarray, weights: dict[str, np.ndarray]) -> list[tuple[str, int, int, float]] | None:
    """``array`` ([in, total]) as Linear weights side by side, transposed (ONNX Runtime's Attention qkv weight is
    [Wq^T Wk^T Wv^T]): (path, first column, last column, max rel) each, or None when it is not."""
    found: list[tuple[str, int, int, float]] = []
    start = 0
    while start < array.shape[1]:
        fits = sorted((_rel(array[:, start:start + w.shape[0]], w.T), path) for path, w in weights.items()
                      if w.shape[1] == array.shape[0] and start + w.shape[0] <= array.shape[1])
        if not fits or fits[0][0] > _SLICE_MATCH or (len(fits) > 1 and fits[1][0] < 10 * fits[0][0]):
            return None
        rel, path = fits[0]
        found.append((path, start, start + weights[path].shape[0], rel))
        start += weights[path].shape[0]
    return found if len(found) > 1 else None


def fused_linear_differences(index: GraphIndex, node: onnx.NodeProto, module: nn.Module) -> list[tuple[str, str]]:
    """A fused op that holds several Linears' parameters in one initializer (ONNX Runtime's ``Attention``: query, key
    and value weights concatenated, their biases too), read slice by slice against the checkpoint: (the Linear,
    the sentence) for each parameter that differs."""
    linears = {p: m for p, m in module.named_modules() if isinstance(m, nn.Linear)}
    weights = {p: m.weight.detach().double().numpy() for p, m in linears.items()}
    init = {t.name: numpy_helper.to_array(t) for t in index.model.graph.initializer if t.name in node.input}
    found: list[tuple[str, str]] = []
    for name in node.input:
        array = init.get(name)
        if array is None or array.ndim != 2:
            continue
        slices = _linear_slices(array.astype(np.float64), weights)
        if slices is None:
            continue
        what = f"the fused {node.op_type}'s {name}"
        found += [(path, f"{path}.weight differs from the checkpoint (columns {a}:{b} of {what}, max rel {rel:.2g})")
                  for path, a, b, rel in slices if rel > _RTOL]
        total = array.shape[1]
        for bias_name in node.input:
            bias = init.get(bias_name)
            if bias is None or bias.shape != (total,):
                continue
            for path, a, b, _ in slices:
                own = linears[path].bias
                expected = own.detach().double().numpy() if own is not None else np.zeros(b - a)
                if not _same(bias[a:b], expected):
                    found.append((path, f"{path}.bias differs from the checkpoint (entries {a}:{b} of the fused "
                                        f"{node.op_type}'s {bias_name}, max rel {_rel(bias[a:b], expected):.2g})"))
    return found

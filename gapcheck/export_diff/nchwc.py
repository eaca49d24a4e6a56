"""ONNX Runtime's blocked NCHWc layout, read back as torch's NCHW.

ONNX Runtime's optimizer at ORT_ENABLE_ALL (the file ``SessionOptions.optimized_model_filepath`` saves) rewrites a
CNN's Convs on a CPU as ``com.microsoft.nchwc`` ops: their values hold the channels in blocks of ``B`` (8 or 16, by
the CPU's vector width), padded to a multiple of ``B``, in the order ``[N][C/B][H][W][B]`` under the shape
``[N, C padded, H, W]``; ``ReorderOutput`` hands back plain NCHW. Elementwise ops fed blocked values (an activation
the layout transformer left, a residual ``Add``) compute blocked values too. The weights of an NCHWc Conv are
reordered as well: ``[O/B][I][KH][KW][B]`` when its input is plain or it is depthwise, else
``[O/B][I/B][KH][KW][Bi][Bo]``; its bias is only padded.

:class:`Layout` says which values are blocked and converts them both ways, so a module whose output ONNX Runtime
computes in a blocked Conv is compared (and localized, and its weights read back) like any other.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from gapcheck.model.mapping import GraphIndex

DOMAIN = "com.microsoft.nchwc"
_BLOCK_SIZES = (16, 8, 4)  # MLAS's NCHWc block sizes (AVX-512, AVX2/SSE, and a narrower one for safety)


def blocked_values(index: GraphIndex) -> frozenset[str]:
    """Values in the blocked layout: what an NCHWc op (ReorderOutput aside) computes, and what any other op computes
    from a blocked value (ONNX Runtime leaves only layout-agnostic ops between NCHWc ones: activations, Add, Concat
    along blocks)."""
    blocked: set[str] = set()
    for node in index.model.graph.node:  # graph order is topological
        if node.domain == DOMAIN and node.op_type == "ReorderOutput":
            continue
        if node.domain == DOMAIN or any(name in blocked for name in node.input):
            blocked.update(name for name in node.output if name)
    return frozenset(blocked)


def unblock(array: np.ndarray, block: int) -> np.ndarray:
    """``[N, Cp, *spatial]`` in blocked order -> plain NCHW order, same shape (padded channels kept)."""
    if array.ndim < 3 or array.shape[1] % block:
        return array
    n, cp, *spatial = array.shape
    flat = np.ascontiguousarray(array).reshape(n, cp // block, *spatial, block)
    return np.ascontiguousarray(np.moveaxis(flat, -1, 2)).reshape(array.shape)


def reblock(array: np.ndarray, block: int, like: np.ndarray | None = None) -> np.ndarray:
    """Plain NCHW -> the blocked order, channels padded to a multiple of ``block`` (with ``like``'s own padding when
    given: ONNX Runtime's blocked value of the same tensor, whose padded channels need not be zero)."""
    n, c, *spatial = array.shape
    cp = -(-c // block) * block
    padded = unblock(like, block).copy() if like is not None and like.shape[:1] + like.shape[2:] == array.shape[:1] \
        + array.shape[2:] and like.shape[1] == cp else np.zeros((n, cp, *spatial), array.dtype)
    padded[:, :c] = array
    flat = padded.reshape(n, cp // block, block, *spatial)
    return np.ascontiguousarray(np.moveaxis(flat, 2, -1)).reshape(padded.shape).astype(array.dtype)


def crop(array: np.ndarray, shape: tuple[int, ...], block: int) -> np.ndarray:
    """A plain padded value cut to torch's channel count ``shape[1]`` (when only the block's padding differs)."""
    if array.ndim == len(shape) and array.ndim >= 2 and array.shape[1] != shape[1] \
            and array.shape[1] - block < shape[1] < array.shape[1] and array.shape[2:] == tuple(shape[2:]):
        return array[:, :shape[1]]
    return array


def unblock_filter(weight: np.ndarray, block: int, plain_input: bool, channels: tuple[int, int] | None = None
                   ) -> np.ndarray:
    """An NCHWc Conv's reordered weight as OIHW (cut to ``channels``: torch's out/in channel counts, when given)."""
    op, ip, *kernel = weight.shape
    flat = np.ascontiguousarray(weight).ravel()
    if plain_input or ip == 1:  # [O/B][I][KH][KW][Bo]
        out = np.moveaxis(flat.reshape(op // block, ip, *kernel, block), -1, 1).reshape(weight.shape)
    else:  # [O/B][I/B][KH][KW][Bi][Bo]
        six = flat.reshape(op // block, ip // block, *kernel, block, block)
        out = six.transpose(0, 5, 1, 4, 2, 3).reshape(weight.shape)
    return out[:channels[0], :channels[1]] if channels else out


@dataclass(frozen=True)
class Layout:
    """Which values of a graph are blocked, and the block size (0: the graph has no NCHWc ops)."""

    blocked: frozenset[str] = frozenset()
    block: int = 0

    @classmethod
    def of(cls, model: onnx.ModelProto, index: GraphIndex, feeds: dict[str, np.ndarray]) -> Layout:
        """Read from the graph; the block size from one ReorderOutput, computed by ONNX Runtime on ``feeds`` (one
        more run, only for a graph that has NCHWc ops)."""
        blocked = blocked_values(index)
        if not blocked:
            return cls()
        return cls(blocked, _block_size(model, index, feeds))

    def __bool__(self) -> bool:
        return bool(self.blocked) and self.block > 0

    def plain(self, name: str, array: np.ndarray, shape: tuple[int, ...] | None = None) -> np.ndarray:
        """``array`` (ONNX Runtime's value of ``name``) in plain NCHW, cut to ``shape``'s channels when given."""
        if not self or name not in self.blocked:
            return array
        out = unblock(array, self.block)
        return crop(out, shape, self.block) if shape is not None else out

    def to_graph(self, name: str, array: np.ndarray, like: np.ndarray | None = None) -> np.ndarray:
        """torch's NCHW tensor for ``name``, in the layout the graph holds it in."""
        if not self or name not in self.blocked or array.ndim < 3:
            return array
        return reblock(array, self.block, like)


def _block_size(model: onnx.ModelProto, index: GraphIndex, feeds: dict[str, np.ndarray]) -> int:
    """The block size: the one under which a ReorderOutput's blocked input, read back, is its plain output."""
    from gapcheck.backends.onnxruntime import OnnxRuntimeBackend
    from gapcheck.errors import BackendError

    reorders = [n for n in model.graph.node if n.domain == DOMAIN and n.op_type == "ReorderOutput"]
    if not reorders:
        return 0
    node = reorders[0]
    try:
        got = OnnxRuntimeBackend(model, extra_outputs=[node.input[0], node.output[0]], name="onnxruntime-layout").infer(
            feeds, [node.input[0], node.output[0]])
    except BackendError:
        return 0
    blocked, plain = got[node.input[0]], got[node.output[0]]
    channels_last = any(a.name == "channels_last" and a.i for a in node.attribute)
    if channels_last and plain.ndim >= 3:
        plain = np.moveaxis(plain, -1, 1)
    for block in _BLOCK_SIZES:
        if blocked.ndim >= 3 and blocked.shape[1] % block == 0:
            candidate = crop(unblock(blocked, block), plain.shape, block)
            if candidate.shape == plain.shape and np.array_equal(candidate, plain):
                return block
    return 0

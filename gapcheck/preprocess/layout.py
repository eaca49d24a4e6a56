"""Layout and shape: where the channel axis is, and extra batch dimensions.

Everything downstream works on a canonical view: batch dimensions of size 1 squeezed
away, channels first (C, H, W), float64. The original layout and shape are kept so the
``layout`` and ``shape`` findings can name what differs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CHANNEL_COUNTS = (1, 2, 3, 4)


@dataclass(frozen=True)
class LayoutInfo:
    layout: str  # "CHW", "HWC", "HW" or "unknown"
    batch_dims: int  # leading singleton dimensions squeezed away
    shape: tuple[int, ...]

    @property
    def channel_axis(self) -> int | None:
        """The channel axis in the *original* array (for per-channel statistics)."""
        if self.layout == "CHW":
            return self.batch_dims
        if self.layout == "HWC":
            return len(self.shape) - 1
        return None


def detect_layout(shape: tuple[int, ...]) -> LayoutInfo:
    dims = list(shape)
    batch = 0
    while len(dims) > 3 and dims[0] == 1:
        dims.pop(0)
        batch += 1
    if len(dims) == 2:
        return LayoutInfo("HW", batch, tuple(shape))
    if len(dims) == 3:
        first, last = dims[0] in CHANNEL_COUNTS, dims[2] in CHANNEL_COUNTS
        if first and not last:
            return LayoutInfo("CHW", batch, tuple(shape))
        if last and not first:
            return LayoutInfo("HWC", batch, tuple(shape))
        if first and last:  # tiny images: torch's convention wins
            return LayoutInfo("CHW", batch, tuple(shape))
    return LayoutInfo("unknown", batch, tuple(shape))


def to_chw(array: np.ndarray, info: LayoutInfo | None = None) -> np.ndarray | None:
    """The canonical (C, H, W) float64 array, C-contiguous, or None when the layout is unknown.

    Contiguous on purpose: numpy sums a strided view (an HWC array seen as CHW) in another order than a
    contiguous one, so the same values would give other last bits on an engine that keeps the stage's own array
    (serial) than on one that ships a copy (local, ray), and the reports would differ.
    """
    chw = chw_view(array, info)
    return np.ascontiguousarray(chw, dtype=np.float64) if chw is not None else None


def chw_view(array: np.ndarray, info: LayoutInfo | None = None) -> np.ndarray | None:
    """The (C, H, W) view of ``array`` in its own dtype (no copy), or None when the layout is unknown."""
    info = info or detect_layout(array.shape)
    squeezed = array.reshape(array.shape[info.batch_dims :])
    if info.layout == "CHW":
        chw = squeezed
    elif info.layout == "HWC":
        chw = np.moveaxis(squeezed, -1, 0)
    elif info.layout == "HW":
        chw = squeezed[None]
    else:
        return None
    return chw


def spatial_shape(info: LayoutInfo) -> tuple[int, int] | None:
    dims = info.shape[info.batch_dims :]
    if info.layout == "CHW":
        return dims[1], dims[2]
    if info.layout in ("HWC", "HW"):
        return dims[0], dims[1]
    return None


def channel_count(info: LayoutInfo) -> int | None:
    dims = info.shape[info.batch_dims :]
    return {"CHW": dims[0], "HWC": dims[-1], "HW": 1}.get(info.layout) if info.layout != "unknown" else None


def lone_channel_apart(a: LayoutInfo, b: LayoutInfo) -> bool:
    """One side is an (H, W) image, the other a one-channel image of the same height and width that keeps its channel
    axis, (1, H, W) or (H, W, 1) (past any batch axes): the same grayscale picture with and without that axis, not
    another layout. Another channel count (grayscale against RGB) is not this, nor another size once squeezed (an
    (H, W) against a (W, H, 1), transposed): those are real shape differences, and the outputs are not compared."""
    return ((a.layout == "HW") != (b.layout == "HW") and channel_count(a) == channel_count(b) == 1
            and spatial_shape(a) == spatial_shape(b))


def without_lone_channel(array: np.ndarray) -> np.ndarray:
    """``array`` (batch axes already removed) without the channel axis of a one-channel (1, H, W) or (H, W, 1)
    image, as a view; any other array unchanged."""
    info = detect_layout(array.shape)
    if array.ndim != 3 or channel_count(info) != 1:
        return array
    return array.reshape(spatial_shape(info) or array.shape)


def colour_apart(a: LayoutInfo, b: LayoutInfo) -> bool:
    """One side is a one-channel (grayscale) image in any layout ((H, W), (1, H, W), (H, W, 1)), the other a colour one
    (3 channels, or 4 with alpha): one stage converted to grayscale. Its layout and channel order cannot be compared
    with the other's (a lone plane has neither), so only the channel count is a difference."""
    counts = (channel_count(a), channel_count(b))
    return 1 in counts and any(c in (3, 4) for c in counts)

"""Declarative stage recipes: a list of steps that describes a pipeline living outside Python.

Example (gapcheck.toml)::

    [preprocess.stages.infer]
    steps = [
      {op = "decode", backend = "cv2"},          # cv2 gives BGR, PIL gives RGB
      {op = "color", order = "rgb"},            # or "gray": ITU-R 601 luma, as PIL's convert('L')
      {op = "resize", size = 256, backend = "cv2", interpolation = "linear"},
      {op = "center_crop", size = 224},
      {op = "scale", factor = 0.00392156862745098},
      {op = "normalize", mean = [0.485, 0.456, 0.406], std = [0.229, 0.224, 0.225]},
      {op = "layout", to = "chw"},
      {op = "dtype", to = "float32"},
    ]

A recipe is a frozen, picklable callable; :meth:`Recipe.trace` also returns every
intermediate output so two recipes can be compared step by step.
"""
from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gapcheck.preprocess.imageops import ResizeMethod, center_crop, resize, shorter_side_size, validate_method
from gapcheck.preprocess.luminance import BT601, pil_gray

_PARAMS: dict[str, dict[str, tuple[type, ...]]] = {
    "decode": {"backend": (str,)},
    "color": {"order": (str,)},
    "resize": {"size": (int, list), "backend": (str,), "interpolation": (str,), "antialias": (bool,)},
    "center_crop": {"size": (int, list)},
    "scale": {"factor": (int, float)},
    "normalize": {"mean": (list,), "std": (list,)},
    "layout": {"to": (str,)},
    "dtype": {"to": (str,)},
    "batch": {},
}
_REQUIRED = {"color": ("order",), "resize": ("size",), "center_crop": ("size",), "scale": ("factor",),
             "normalize": ("mean", "std"), "layout": ("to",), "dtype": ("to",)}


@dataclass(frozen=True)
class Step:
    op: str
    params: tuple[tuple[str, Any], ...] = ()

    def get(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)

    @property
    def label(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.params)
        return f"{self.op}({args})"


@dataclass
class _State:
    image: np.ndarray
    color: str = "rgb"
    layout: str = "hwc"
    batched: bool = False

    def channel_axis(self) -> int:
        return (1 if self.batched else 0) if self.layout == "chw" else -1


def _size_pair(size: Any) -> tuple[int, int]:
    return (int(size), int(size)) if isinstance(size, int) else (int(size[0]), int(size[1]))


def parse_steps(raw_steps: list[dict[str, Any]]) -> "Recipe":
    """Validate a step list (from TOML or Python); raises ValueError naming the bad step."""
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ValueError("steps must be a non-empty list of tables")
    steps = []
    for index, raw in enumerate(raw_steps):
        where = f"step {index + 1}"
        if not isinstance(raw, dict) or "op" not in raw:
            raise ValueError(f"{where} must be a table with an 'op' key")
        op = raw["op"]
        if op not in _PARAMS:
            raise ValueError(f"{where}: unknown op {op!r} (known: {', '.join(_PARAMS)})")
        for key, value in raw.items():
            if key == "op":
                continue
            if key not in _PARAMS[op]:
                raise ValueError(f"{where} ({op}): unknown key {key!r} (known: {', '.join(_PARAMS[op]) or 'none'})")
            if isinstance(value, bool) and bool not in _PARAMS[op][key] or not isinstance(value, _PARAMS[op][key]):
                raise ValueError(f"{where} ({op}): {key} has the wrong type ({type(value).__name__})")
        for key in _REQUIRED.get(op, ()):
            if key not in raw:
                raise ValueError(f"{where} ({op}): missing {key!r}")
        params = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in raw.items() if k != "op")
        step = Step(op, params)
        _check_values(step, where)
        steps.append(step)
    if steps[0].op != "decode":
        raise ValueError("the first step must be {op = \"decode\"}")
    return Recipe(tuple(steps))


MAX_SIDE = 16384  # a resize or crop side above this is a typo, not a preprocessing step (and would allocate GBs)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_size(step: Step, where: str) -> None:
    size = step.get("size")
    sides = list(size) if isinstance(size, tuple) else [size]
    if isinstance(size, tuple) and len(size) != 2:
        raise ValueError(f"{where} ({step.op}): size is an int or [height, width]")
    for side in sides:
        if not isinstance(side, int) or isinstance(side, bool) or not 1 <= side <= MAX_SIDE:
            raise ValueError(f"{where} ({step.op}): size must be a whole number of pixels from 1 to {MAX_SIDE} "
                             f"(or two of them), got {size!r}")


def _check_normalize(step: Step, where: str) -> None:
    mean, std = step.get("mean"), step.get("std")
    if not all(_is_number(v) for v in (*mean, *std)):
        raise ValueError(f"{where} (normalize): mean and std must be finite numbers")
    if not 1 <= len(mean) <= 4 or len(mean) != len(std) or 0 in std:
        raise ValueError(f"{where} (normalize): mean and std need the same length (1 to 4 channels) and a non-zero std")


def _check_values(step: Step, where: str) -> None:
    if step.op == "decode" and step.get("backend", "pil") not in ("pil", "cv2"):
        raise ValueError(f"{where} (decode): backend must be 'pil' or 'cv2'")
    if step.op == "color" and step.get("order") not in ("rgb", "bgr", "gray"):
        raise ValueError(f"{where} (color): order must be 'rgb', 'bgr' or 'gray'")
    if step.op == "layout" and step.get("to") not in ("chw", "hwc"):
        raise ValueError(f"{where} (layout): to must be 'chw' or 'hwc'")
    if step.op == "dtype":
        try:
            np.dtype(step.get("to"))
        except TypeError as exc:
            raise ValueError(f"{where} (dtype): {exc}") from exc
    if step.op == "normalize":
        _check_normalize(step, where)
    if step.op == "scale" and (not _is_number(step.get("factor")) or step.get("factor") == 0):
        raise ValueError(f"{where} (scale): factor must be a finite, non-zero number, got {step.get('factor')!r}")
    if step.op == "resize":
        validate_method(_resize_method(step))
    if step.op in ("resize", "center_crop"):
        _check_size(step, where)


def _resize_method(step: Step) -> ResizeMethod:
    backend = step.get("backend", "pil")
    default = "linear" if backend == "cv2" else "bilinear"
    return ResizeMethod(backend, step.get("interpolation", default), bool(step.get("antialias", True)))


@dataclass(frozen=True)
class Recipe:
    steps: tuple[Step, ...] = field(default_factory=tuple)

    def __call__(self, sample: str | bytes) -> np.ndarray:
        return self.trace(sample)[-1][1]

    def trace(self, sample: str | bytes, rgb: bool = False) -> list[tuple[str, np.ndarray]]:
        """Run every step; return (step label, output) after each one.

        With ``rgb=True`` intermediate BGR images are shown in RGB order (for aligning steps by what they do; never
        for fingerprints, which are of what the step produced).
        """
        return [(step.label, shown if rgb else output) for step, output, shown, _ in self.trace_orders(sample)]

    def trace_orders(self, sample: str | bytes) -> list[tuple[Step, np.ndarray, np.ndarray, str]]:
        """Per step: the step, its output as produced, that output in RGB channel order (a view), its channel order.

        The RGB view lets a cv2 decode followed by a colour conversion line up with a PIL decode; the order tells a
        stage that never converts its BGR decode from one that does (their RGB views agree until a per-channel step).
        """
        state: _State | None = None
        outputs = []
        for step in self.steps:
            state = self._apply(step, state, sample)
            image = state.image
            shown = np.flip(image, axis=state.channel_axis()) if state.color == "bgr" else image
            outputs.append((step, image, shown, state.color))
        return outputs

    @property
    def resize_label(self) -> str:
        for step in self.steps:
            if step.op == "resize":
                return _resize_method(step).label
        return "none"

    @staticmethod
    def _apply(step: Step, state: _State | None, sample: str | bytes) -> _State:
        if step.op == "decode":
            data = sample if isinstance(sample, bytes) else Path(sample).read_bytes()
            if step.get("backend", "pil") == "cv2":
                import cv2

                image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
                if image is None:
                    raise ValueError("cv2.imdecode could not decode the sample")
                return _State(image, color="bgr")
            from PIL import Image

            with Image.open(io.BytesIO(data)) as pil_image:
                return _State(np.asarray(pil_image.convert("RGB")), color="rgb")
        assert state is not None  # parse_steps guarantees a decode first
        image, axis = state.image, state.channel_axis()
        if step.op == "color":
            return _convert_color(step.get("order"), state)
        if step.op in ("resize", "center_crop"):
            return _resize_or_crop(step, state)
        if step.op == "scale":
            return _State(image.astype(np.float32) * np.float32(step.get("factor")), state.color, state.layout, state.batched)
        if step.op == "normalize":
            shape = [1] * image.ndim
            shape[axis] = -1
            mean = np.asarray(step.get("mean"), np.float32).reshape(shape)
            std = np.asarray(step.get("std"), np.float32).reshape(shape)
            return _State((image.astype(np.float32) - mean) / std, state.color, state.layout, state.batched)
        if step.op == "layout":
            to = step.get("to")
            if state.batched:
                raise ValueError("layout needs an unbatched image; put it before the batch step")
            if image.ndim == 2:  # a grayscale plane gets its channel axis where the layout puts it
                image = image[None] if to == "chw" else image[..., None]
            elif to != state.layout:
                image = np.ascontiguousarray(np.moveaxis(image, -1, 0) if to == "chw" else np.moveaxis(image, 0, -1))
            return _State(image, state.color, to, state.batched)
        if step.op == "dtype":
            return _State(image.astype(np.dtype(step.get("to"))), state.color, state.layout, state.batched)
        if step.op == "batch":
            return _State(image[None], state.color, state.layout, True)
        raise ValueError(f"unknown op {step.op}")


def _convert_color(order: str, state: _State) -> _State:
    """Reorder the channels (rgb, bgr) or make one grayscale plane (H, W) from a colour HWC image."""
    if state.color == "gray":
        if order != "gray":
            raise ValueError(f"color: a grayscale image has no channels to put in {order} order")
        return state
    if order == "gray":
        if state.layout != "hwc" or state.batched:
            raise ValueError("color (gray) needs an unbatched HWC image; put it before layout/batch steps")
        return _State(_luma(state.image, state.color), "gray", state.layout, state.batched)
    image = state.image
    if order != state.color:
        image = np.flip(image, axis=state.channel_axis()).copy()
    return _State(image, order, state.layout, state.batched)


def _luma(image: np.ndarray, color: str) -> np.ndarray:
    """ITU-R 601 luma of an HWC colour image, as PIL's convert('L') makes it: on 8-bit images PIL's own conversion
    (so a declared step list replays a PIL grayscale stage bit for bit); in float32 otherwise."""
    rgb = image[..., 2::-1] if color == "bgr" else image[..., :3]
    if image.dtype == np.uint8:
        return pil_gray(rgb)
    return rgb.astype(np.float32) @ np.array(BT601, np.float32)


def _resize_or_crop(step: Step, state: _State) -> _State:
    if state.layout != "hwc" or state.batched:
        raise ValueError(f"{step.op} needs an unbatched HWC image; put it before layout/batch steps")
    image = state.image
    h, w = image.shape[:2]
    if step.op == "resize":
        size = step.get("size")
        target = shorter_side_size(h, w, size) if isinstance(size, int) else _size_pair(size)
        if target[0] * target[1] > MAX_SIDE * MAX_SIDE:
            raise ValueError(f"resize to {target[0]}x{target[1]} pixels is larger than {MAX_SIDE}x{MAX_SIDE}")
        if image.ndim == 3 and image.shape[-1] == 1:  # a grayscale (H, W, 1): PIL cannot hold it, cv2 drops the axis
            image = resize(image[..., 0], target[0], target[1], _resize_method(step))[..., None]
        else:
            image = resize(image, target[0], target[1], _resize_method(step))
    else:
        image = center_crop(image, *_size_pair(step.get("size")))
    return _State(np.ascontiguousarray(image), state.color, state.layout, state.batched)

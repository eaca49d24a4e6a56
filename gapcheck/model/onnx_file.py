"""Read and write ONNX files without torch: the hostile-input loader every command shares.

Kept apart from :mod:`gapcheck.model.export` (which imports torch) so that commands that only read an ONNX
file — ``triton-audit``, ``nightly``'s audit, ``export --triton-repo`` with ``--onnx`` — start in a fraction
of the time.
"""
from __future__ import annotations

from pathlib import Path

import onnx

from gapcheck.atomic import write_atomic
from gapcheck.errors import InputError, condense_error

# condense_error is re-exported for its older importers (it lives in gapcheck.errors)
__all__ = ["MAX_ONNX_BYTES", "ONNX_PROTOBUF_LIMIT", "condense_error", "load_onnx", "save_onnx"]

# Refuse ONNX files larger than this before parsing them (protobuf parsing holds the whole file in memory).
MAX_ONNX_BYTES = 4 * 1024**3
#: protobuf refuses messages of 2 GiB; stay clear of it: larger models keep their weights in external data
ONNX_PROTOBUF_LIMIT = 2**31 - 2**24


def load_onnx(path: str | Path) -> onnx.ModelProto:
    """Load and check an ONNX file, treating it as hostile: size-bounded, parse and checker errors condensed."""
    target = Path(path)
    if not target.is_file():
        raise InputError(f"ONNX file not found: {target}")
    size = target.stat().st_size
    if size == 0:
        raise InputError(f"ONNX file is empty: {target}")
    if size > MAX_ONNX_BYTES:
        raise InputError(f"ONNX file is {size / 1024**3:.1f} GiB, over the {MAX_ONNX_BYTES / 1024**3:.0f} GiB limit: {target}")
    try:
        model = onnx.load(str(target))
        onnx.checker.check_model(model)
    except Exception as exc:  # noqa: BLE001 - protobuf DecodeError, checker ValidationError, external data errors
        raise InputError(f"not a valid ONNX model: {target} ({condense_error(exc, 200)})") from exc
    if not model.graph.node:
        raise InputError(f"ONNX model has no nodes: {target}")
    return model


def save_onnx(model: onnx.ModelProto, path: str | Path) -> Path:
    """Write ``model`` to ``path`` atomically (:func:`gapcheck.atomic.write_atomic`); a model over protobuf's
    2 GiB cap is written by ONNX itself with its weights in ``<name>.data`` beside it."""
    target = Path(path)
    if model.ByteSize() <= ONNX_PROTOBUF_LIMIT:
        return write_atomic(target, model.SerializeToString(), what="ONNX output")
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(target), save_as_external_data=True, location=f"{target.name}.data")
    return target

"""Export cache: a second run on the same model and inputs (a nightly, a CI re-run) skips the ONNX export.

The key is the SHA256 of everything the export depends on:
- the weights: every parameter and buffer of the model as loaded (so a checkpoint, or a
  factory that initializes differently, gives another key);
- the code: the source files of the factory and of every module class in the model;
- the input specs (names, shapes, dtypes), the exporter, the opset, and the versions of
  torch, onnx, onnxscript and gapcheck.
export-diff leaves the output names out of the key (the weights and the code decide them, and a cached
graph's outputs carry them), so a cached run need not run the model before comparing.

Entries are ``<key>.onnx`` plus ``<key>.json`` (exporter, fallback reason, warnings) in the
cache folder: ``--cache-dir``, else ``$GAPCHECK_CACHE_DIR``, else ``$XDG_CACHE_HOME/gapcheck/exports``
(``~/.cache/gapcheck/exports``). Both files are written atomically; an entry that fails to load is
ignored and rewritten. Models over 2 GiB (which would need external data) are not cached.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
import torch

from gapcheck.model.export import ExportResult

log = logging.getLogger(__name__)
_MAX_CACHED_BYTES = 2 * 1024**3 - 1
_FORMAT = "1"


def default_cache_dir() -> Path:
    explicit = os.environ.get("GAPCHECK_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gapcheck" / "exports"


def _versions() -> str:
    """Versions of what makes the export, read from package metadata (importing onnxscript alone takes seconds)."""
    from importlib import metadata

    parts = [f"torch={torch.__version__}", f"onnx={onnx.__version__}"]
    for package in ("onnxscript", "gapcheck"):
        try:
            parts.append(f"{package}={metadata.version(package)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{package}=?")
    return ";".join(parts)


def _source_files(module: torch.nn.Module, factory: Callable | None) -> list[str]:
    files = set()
    objects = [type(m) for m in module.modules()] + ([factory] if factory is not None else [])
    for obj in objects:
        try:
            files.add(inspect.getsourcefile(obj) or "")
        except TypeError:  # builtins, TorchScript classes
            continue
    return sorted(f for f in files if f and os.path.isfile(f))


def export_key(
    module: torch.nn.Module,
    sample: dict[str, np.ndarray],
    *,
    exporter: str,
    opset: int | None,
    output_names: Sequence[str] = (),
    factory: Callable | None = None,
    sequence_inputs: Sequence[str] = (),
) -> str:
    """SHA256 over weights, code, input specs, exporter, opset and versions (see the module docstring)."""
    digest = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        digest.update(f"{label}:{len(data)}:".encode())
        digest.update(data)

    add("format", _FORMAT.encode())
    add("versions", _versions().encode())
    add("exporter", f"{exporter}:{opset}".encode())
    if sequence_inputs:  # a dynamic sequence axis makes another graph (absent: the keys of earlier versions hold)
        add("sequence", ",".join(sorted(sequence_inputs)).encode())
    add("class", f"{type(module).__module__}.{type(module).__qualname__}".encode())
    for name, array in sample.items():
        add("input", f"{name}:{tuple(array.shape)}:{array.dtype}".encode())
    if output_names:  # a caller that names the outputs itself keys by them too
        add("outputs", "\x00".join(output_names).encode())
    for path in _source_files(module, factory):
        add("source", path.encode() + b"\x00" + Path(path).read_bytes())
    state = module.state_dict()
    for name, tensor in state.items():
        if isinstance(tensor, torch.Tensor):
            data = tensor.detach().cpu().contiguous()
            if data.dtype == torch.bfloat16:
                data = data.view(torch.int16)
            add(f"tensor:{name}:{tuple(data.shape)}:{data.dtype}", data.numpy().tobytes())
    return digest.hexdigest()


def load_cached(cache_dir: Path, key: str) -> ExportResult | None:
    model_path, meta_path = cache_dir / f"{key}.onnx", cache_dir / f"{key}.json"
    if not (model_path.is_file() and meta_path.is_file()):
        return None
    try:
        meta = json.loads(meta_path.read_text())
        model = onnx.load(str(model_path))
    except Exception as exc:  # noqa: BLE001 - a truncated or foreign entry is a miss, not an error
        log.info("ignoring unreadable export cache entry %s: %s", model_path, exc)
        return None
    return ExportResult(model, meta["exporter"], meta.get("fallback_reason"), 0.0, tuple(meta.get("warnings", ())),
                        bool(meta.get("batch_baked")), cached=True)


def _write_atomic(path: Path, data: bytes) -> None:
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def store(cache_dir: Path, key: str, result: ExportResult) -> bool:
    """Write an entry; False (and a log line) when the model is too big or the folder is not writable."""
    data = result.model.SerializeToString() if result.model.ByteSize() <= _MAX_CACHED_BYTES else None
    if data is None:
        return False
    meta = {"exporter": result.exporter, "fallback_reason": result.fallback_reason, "warnings": list(result.warnings),
            "batch_baked": result.batch_baked, "export_seconds": result.seconds}
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        _write_atomic(cache_dir / f"{key}.onnx", data)
        _write_atomic(cache_dir / f"{key}.json", json.dumps(meta).encode())  # written last: marks the entry complete
    except OSError as exc:
        log.warning("export cache not written (%s): %s", cache_dir, exc)
        return False
    return True


class ExportCache:
    """The cache folder plus what keys an export beyond the model itself (the factory's source)."""

    def __init__(self, directory: Path | None = None, factory: Callable | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.factory = factory

    def key(self, module, sample, *, exporter: str, opset: int | None, output_names: Sequence[str] = (),
            sequence_inputs: Sequence[str] = ()) -> str:
        return export_key(module, sample, exporter=exporter, opset=opset, output_names=output_names, factory=self.factory,
                          sequence_inputs=sequence_inputs)

    def load(self, key: str) -> ExportResult | None:
        return load_cached(self.directory, key)

    def store(self, key: str, result: ExportResult) -> bool:
        return store(self.directory, key, result)

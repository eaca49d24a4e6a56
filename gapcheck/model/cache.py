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
cache folder: ``--cache-dir``, else ``[cache] dir``, else ``$GAPCHECK_CACHE_DIR``, else
``$XDG_CACHE_HOME/gapcheck/exports`` (``~/.cache/gapcheck/exports``). Both files are written atomically; an entry
that fails to load is ignored and rewritten. Models over 2 GiB (which would need external data) are not cached.

The folder is capped (``--cache-max-mb``, ``[cache] max_mb``, default :data:`DEFAULT_MAX_MB`): after each store
the least recently used entries go until the rest fit (a hit touches its ``.json``, whose modification time is the
entry's last use). Other processes may use and prune the same folder at the same time: an entry that vanishes
between listing and reading or removing is a miss, never an error. ``gapcheck cache info|prune|clear`` show and
trim it. Only what gapcheck provably wrote is ever removed: an entry whose ``.json`` is gapcheck's description of
that very key, and stale temporary files of gapcheck's own naming. A ``<key>.onnx`` without its ``.json`` (a writer
that died between the two renames, or a user's model named by its hash) is never removed by the automatic trim
after a store; ``gapcheck cache prune|clear`` (which first refuse a folder holding foreign files) remove it only
once it is older than :data:`_ORPHAN_S`, so another process's entry being written is left alone.
"""
from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import os
import re
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch and onnx load only when an entry is keyed or read: `gapcheck cache info` stays light
    import numpy as np
    import torch

    from gapcheck.model.export import ExportResult

log = logging.getLogger(__name__)
_MAX_CACHED_BYTES = 2 * 1024**3 - 1
_FORMAT = "1"
DEFAULT_MAX_MB = 4096  # the folder's default cap (a nightly over many model versions must not fill a disk)
_ENTRY = re.compile(r"^[0-9a-f]{64}\.(onnx|json)$")
_TEMP = re.compile(r"^\.[0-9a-f]{64}\.(onnx|json)\..*\.tmp$")
_STALE_TEMP_S = 3600.0  # a temporary file this old belongs to a writer that died
_ORPHAN_S = 600.0  # a .onnx without its .json younger than this may be another process's entry being written
_META_MAX_BYTES = 64 * 1024  # a description is a few hundred bytes


def default_cache_dir() -> Path:
    explicit = os.environ.get("GAPCHECK_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gapcheck" / "exports"


def _versions() -> str:
    """Versions of what makes the export, read from package metadata (importing onnxscript alone takes seconds)."""
    from importlib import metadata

    import onnx
    import torch

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
    import torch

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
    """The entry, or None when absent, unreadable, or removed by another process while being read."""
    import onnx

    from gapcheck.model.export import ExportResult

    model_path, meta_path = cache_dir / f"{key}.onnx", cache_dir / f"{key}.json"
    try:
        meta = json.loads(meta_path.read_text())
        model = onnx.load(str(model_path))
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - a truncated or foreign entry is a miss, not an error
        log.info("ignoring unreadable export cache entry %s: %s", model_path, exc)
        return None
    with contextlib.suppress(OSError):  # removed meanwhile, or a read-only cache: still a hit
        os.utime(meta_path)  # its last use: least recently used entries are evicted first
    return ExportResult(model, meta["exporter"], meta.get("fallback_reason"), 0.0, tuple(meta.get("warnings", ())),
                        bool(meta.get("batch_baked")), cached=True)


def store(cache_dir: Path, key: str, result: ExportResult, max_bytes: int | None = None) -> bool:
    """Write an entry, then evict least recently used ones over ``max_bytes``; False (and a log line) when the model
    is too big for the cache or the folder is not writable."""
    from gapcheck.atomic import write_atomic
    from gapcheck.errors import GapcheckError

    limit = DEFAULT_MAX_MB * 1024 * 1024 if max_bytes is None else max_bytes
    data = result.model.SerializeToString() if result.model.ByteSize() <= min(_MAX_CACHED_BYTES, limit) else None
    if data is None:
        return False
    meta = {"key": key, "exporter": result.exporter, "fallback_reason": result.fallback_reason, "warnings": list(result.warnings),
            "batch_baked": result.batch_baked, "export_seconds": result.seconds}
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(cache_dir / f"{key}.onnx", data, what="export cache entry")
        # written last: marks the entry complete
        write_atomic(cache_dir / f"{key}.json", json.dumps(meta).encode(), what="export cache entry")
    except (OSError, GapcheckError) as exc:
        log.warning("export cache not written (%s): %s", cache_dir, exc)
        return False
    prune(cache_dir, limit, keep=key, orphans=False)  # a lone .onnx may be a user's: never removed here
    return True


@dataclass(frozen=True)
class Entry:
    key: str
    bytes: int
    last_used: float  # the .json's modification time (0 for an incomplete entry: it goes first)


@dataclass(frozen=True)
class CacheInfo:
    directory: Path
    entries: int
    bytes: int
    max_bytes: int
    incomplete: int  # .onnx without its .json, stale temporary files

    def lines(self) -> list[str]:
        return [f"folder      {self.directory}", f"entries     {self.entries}",
                f"size        {self.bytes / 1024**2:.1f} MB of {self.max_bytes / 1024**2:.0f} MB",
                f"incomplete  {self.incomplete}"]


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:  # removed by another process meanwhile
        return None


def _is_regular(path: Path) -> bool | None:
    """Whether ``path`` is a regular file (not a link, folder, FIFO); None when it is gone."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return None


def _is_own_meta(path: Path, key: str) -> bool:
    """Whether ``path`` is the description gapcheck wrote for ``key`` (entries of earlier versions name no key)."""
    try:
        with path.open("rb") as handle:
            data = handle.read(_META_MAX_BYTES + 1)
        meta = json.loads(data) if len(data) <= _META_MAX_BYTES else None
    except (OSError, ValueError, RecursionError):
        return False
    return (isinstance(meta, dict) and isinstance(meta.get("exporter"), str)
            and meta.get("key", key) == key)


def check_folder(cache_dir: Path) -> None:
    """Refuse (UsageError, exit 2) a cache folder that is not a folder or holds something named like an entry that is
    not a regular file (a folder ``<sha256>.onnx``): found before any work, not as a backend failure after it."""
    from gapcheck.errors import UsageError

    if cache_dir.exists() and not cache_dir.is_dir():
        raise UsageError(f"export cache folder {cache_dir} is not a folder", parameter="cache_dir")
    try:
        names = os.listdir(cache_dir)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        raise UsageError(f"export cache folder {cache_dir} cannot be listed: {exc.strerror or type(exc).__name__}",
                         parameter="cache_dir") from None
    for name in sorted(names):
        if _ENTRY.match(name) and _is_regular(cache_dir / name) is False:
            raise UsageError(f"export cache folder {cache_dir} holds {name}, which is named like a cache entry but is "
                             "not a regular file", parameter="cache_dir")


def entries(cache_dir: Path, *, orphans: bool = True) -> tuple[list[Entry], list[Path]]:
    """Complete entries (oldest use first) and leftovers: stale temporary files and, with ``orphans``, a ``.onnx``
    without its ``.json`` older than :data:`_ORPHAN_S`. Files whose ``.json`` is not gapcheck's description of their
    key, and anything not a regular file, are neither: they are never removed."""
    try:
        names = os.listdir(cache_dir)
    except (FileNotFoundError, NotADirectoryError):
        return [], []
    found, leftovers = [], []
    now = time.time()
    for name in names:
        path = cache_dir / name
        if _TEMP.match(name):
            try:
                if stat.S_ISREG(os.lstat(path).st_mode) and now - path.stat().st_mtime > _STALE_TEMP_S:
                    leftovers.append(path)
            except OSError:
                pass
            continue
        if not _ENTRY.match(name) or not name.endswith(".onnx"):
            continue
        meta, key = path.with_suffix(".json"), name[:-5]
        if not _is_regular(path):
            continue
        model_bytes, meta_bytes = _size(path), _size(meta)
        if model_bytes is None:
            continue
        if meta_bytes is None:
            if orphans and _older_than(path, _ORPHAN_S, now):
                leftovers.append(path)
            continue
        if not _is_regular(meta) or not _is_own_meta(meta, key):
            continue
        try:
            used = meta.stat().st_mtime
        except OSError:
            continue
        found.append(Entry(key, model_bytes + meta_bytes, used))
    return sorted(found, key=lambda e: (e.last_used, e.key)), leftovers


def _older_than(path: Path, seconds: float, now: float) -> bool:
    try:
        return now - path.stat().st_mtime > seconds
    except OSError:
        return False


def _remove(cache_dir: Path, key: str) -> None:
    # The .json first: without it the entry is a miss for every reader at once.
    for suffix in (".json", ".onnx"):
        (cache_dir / f"{key}{suffix}").unlink(missing_ok=True)


def prune(cache_dir: Path, max_bytes: int, *, keep: str | None = None, orphans: bool = True) -> tuple[int, int]:
    """Remove least recently used entries until the rest fit in ``max_bytes`` (and leftovers); (entries, bytes) freed.
    ``keep`` (the entry just stored) goes last. Entries other processes remove meanwhile are skipped. ``orphans``:
    also old ``.onnx`` files without their ``.json`` (only for a folder checked to hold nothing foreign)."""
    found, leftovers = entries(cache_dir, orphans=orphans)
    freed = [0, 0]
    for path in leftovers:
        size = _size(path) or 0
        path.unlink(missing_ok=True)
        freed[1] += size
    total = sum(e.bytes for e in found)
    for entry in sorted(found, key=lambda e: e.key == keep):  # stable: oldest first, the kept one last
        if total <= max_bytes:
            break
        _remove(cache_dir, entry.key)
        total -= entry.bytes
        freed[0] += 1
        freed[1] += entry.bytes
    return freed[0], freed[1]


def clear(cache_dir: Path) -> tuple[int, int]:
    """Remove every entry and leftover (only files named like them); (entries, bytes) freed."""
    return prune(cache_dir, -1)


def info(cache_dir: Path, max_bytes: int) -> CacheInfo:
    found, leftovers = entries(cache_dir)
    return CacheInfo(cache_dir, len(found), sum(e.bytes for e in found), max_bytes, len(leftovers))


class ExportCache:
    """The cache folder, its size cap, and what keys an export beyond the model itself (the factory's source)."""

    def __init__(self, directory: Path | None = None, factory: Callable | None = None,
                 max_bytes: int | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        check_folder(self.directory)
        self.factory = factory
        self.max_bytes = DEFAULT_MAX_MB * 1024 * 1024 if max_bytes is None else max_bytes

    def key(self, module, sample, *, exporter: str, opset: int | None, output_names: Sequence[str] = (),
            sequence_inputs: Sequence[str] = ()) -> str:
        return export_key(module, sample, exporter=exporter, opset=opset, output_names=output_names, factory=self.factory,
                          sequence_inputs=sequence_inputs)

    def load(self, key: str) -> ExportResult | None:
        return load_cached(self.directory, key)

    def store(self, key: str, result: ExportResult) -> bool:
        return store(self.directory, key, result, self.max_bytes)

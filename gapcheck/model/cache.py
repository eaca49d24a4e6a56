"""Export cache: a second run on the same model and inputs (a nightly, a CI re-run) skips the ONNX export.

The key is the SHA256 of everything the export depends on:
- the weights: every parameter and buffer of the model as loaded (so a checkpoint, or a
  factory that initializes differently, gives another key);
- the code: the source files of the factory and of every module class in the model;
- the input specs (names, shapes, dtypes), the exporter, the opset, and the versions of
  torch, onnx, onnxscript and gapcheck.
export-diff leaves the output names out of the key (the weights and the code decide them, and a cached
graph's outputs carry them), so a cached run need not run the model before comparing.

Entries are ``<key>.onnx`` plus ``<key>.json`` (exporter, fallback reason, warnings, and the SHA256 and size of the
ONNX bytes) in the cache folder: ``--cache-dir``, else ``[cache] dir``, else ``$GAPCHECK_CACHE_DIR``, else
``$XDG_CACHE_HOME/gapcheck/exports`` (``~/.cache/gapcheck/exports``). Both files are written atomically; an entry
that fails to load is ignored and rewritten. Models over 2 GiB (which would need external data) are not cached.

The folder may be shared, so an entry is checked before it is used (never trusted for its name): both files are
opened without following symbolic links and must be regular files; the ONNX bytes are read once, hashed in a
thread while they are parsed (no second read of a large model, little added time), and must match the size and
SHA256 stored at store time (the model is used only after the hash matched), so a
truncated entry, or another model's valid ONNX put in its place, is a miss. Where others can write in the folder
(group/other write permission), only the current user's files are used: a digest proves the bytes are what the
entry's writer wrote, not who that writer was. Where they cannot, the folder owner's files are used too (a cache
filled by a build user and read by others). A refused entry is one warning line, then the export runs again and
replaces it; an entry of an earlier gapcheck (no digest) is exported again quietly.

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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gapcheck.reading import ReadRefused, Refusal, read_checked

if TYPE_CHECKING:  # torch and onnx load only when an entry is keyed or read: `gapcheck cache info` stays light
    import numpy as np
    import onnx
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


class _Untrusted(Exception):
    """An entry that is there but may not be used (the message says why); ``quiet``: nothing suspicious about it."""

    def __init__(self, reason: str, *, quiet: bool = False, changing: bool = False) -> None:
        super().__init__(reason)
        self.quiet = quiet
        self.changing = changing  # what another process storing the same key also causes, for a moment


def _trusted_owners(cache_dir: Path) -> set[int] | None:
    """Who may have written a usable entry: the current user, and the folder's owner when nobody else can write in
    the folder (then only its owner could have put files there). None where there are no POSIX owners."""
    if not hasattr(os, "getuid"):
        return None
    owners = {os.getuid()}
    with contextlib.suppress(OSError):
        folder = os.stat(cache_dir)
        if not folder.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            owners.add(folder.st_uid)
    return owners


def _untrusted(path: Path, exc: ReadRefused) -> _Untrusted:
    """The cache's words for a refused entry file (``changing``: what a writer replacing the entry also causes)."""
    name = path.suffix
    words = {
        Refusal.LINK: f"its {name} is a symbolic link",
        Refusal.NOT_REGULAR: f"its {name} is not a regular file",
        Refusal.OWNER: f"its {name} belongs to another user (uid {exc.uid}) in a folder others can write to",
        Refusal.SIZE: f"its {name} holds {exc.size:,} bytes, {exc.expected or 0:,} were written",
        Refusal.TOO_LARGE: f"its {name} is not gapcheck's description of this entry",  # only a .json has a limit
        Refusal.SHRANK: f"its {name} was cut short while read",
        Refusal.GREW: f"its {name} grew while read",
    }
    return _Untrusted(words[exc.reason], changing=exc.reason is Refusal.SIZE)


def _read_file(path: Path, owners: set[int] | None, *, size: int | None = None, limit: int | None = None) -> bytearray:
    """An entry file's bytes, read once: never through a symbolic link, only a regular file of a trusted owner
    (checked on the open descriptor, so it cannot be swapped between the check and the read), exactly ``size`` bytes
    when given, at most ``limit``."""
    try:
        return read_checked(path, owners=owners, expected_bytes=size, max_bytes=limit)
    except ReadRefused as exc:
        raise _untrusted(path, exc) from None


def _read_meta(path: Path, key: str, owners: set[int] | None) -> dict:
    data = _read_file(path, owners, limit=_META_MAX_BYTES)
    try:
        meta = json.loads(data)
    except (ValueError, RecursionError):
        meta = None
    if not isinstance(meta, dict) or meta.get("key", key) != key or not isinstance(meta.get("exporter"), str):
        raise _Untrusted(f"its {path.suffix} is not gapcheck's description of this entry")
    digest, size = meta.get("onnx_sha256"), meta.get("onnx_bytes")
    if digest is None and size is None:
        raise _Untrusted("written by an earlier gapcheck, without a digest", quiet=True)
    if meta.get("key") != key:  # every description with a digest names its key
        raise _Untrusted(f"its {path.suffix} is not gapcheck's description of this entry")
    if not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest) and type(size) is int
            and 0 < size <= _MAX_CACHED_BYTES):
        raise _Untrusted(f"its {path.suffix} holds no valid digest")
    return meta


def _parse_verified(data: bytearray, digest: str, name: str) -> onnx.ModelProto:
    """The model parsed from ``data`` while another thread hashes the same bytes (hashlib releases the GIL: a
    400 MB entry costs about the parse alone, not parse + hash); the model is returned only once the SHA256 matches
    the one stored with the entry."""
    import onnx

    with ThreadPoolExecutor(1, thread_name_prefix="gapcheck-cache-hash") as pool:
        hashed = pool.submit(lambda: hashlib.sha256(data).hexdigest())
        try:
            model = onnx.ModelProto.FromString(data)
        except Exception:  # noqa: BLE001 - bytes that do not parse: say whether they are the ones written
            model = None
        if hashed.result() != digest:
            raise _Untrusted(f"its {name} does not match the SHA256 stored with it (changed since it was written)",
                             changing=True)
    if model is None:
        raise _Untrusted(f"its {name} matches its SHA256 but does not parse as ONNX with this onnx version")
    return model


def load_cached(cache_dir: Path, key: str) -> ExportResult | None:
    """The entry, or None when absent, removed by another process while being read, or not to be trusted: a
    description that is not gapcheck's, ONNX bytes that do not match the SHA256 stored at store time (truncated,
    swapped), a symbolic link, or a file of another user in a folder others can write to. An entry that is there but
    refused gives one warning line; the caller exports again and the store replaces it."""
    model_path, meta_path = cache_dir / f"{key}.onnx", cache_dir / f"{key}.json"
    owners = _trusted_owners(cache_dir)
    try:
        try:
            result = _read_entry(meta_path, model_path, key, owners)
        except _Untrusted as exc:
            if not exc.changing:
                raise
            # another process may be storing this key right now (.onnx replaced, .json not yet): one more look
            time.sleep(0.05)
            result = _read_entry(meta_path, model_path, key, owners)
    except FileNotFoundError:
        return None
    except _Untrusted as exc:
        (log.info if exc.quiet else log.warning)("export cache entry %s... in %s not used (%s); exporting again", key[:12],
                                                 cache_dir, exc)
        return None
    except Exception as exc:  # noqa: BLE001 - anything else unreadable is a miss, not an error
        log.warning("export cache entry %s... in %s not used (unreadable: %s); exporting again", key[:12], cache_dir,
                    type(exc).__name__)
        return None
    with contextlib.suppress(OSError):  # removed meanwhile, or a read-only cache: still a hit
        os.utime(meta_path, follow_symlinks=False)  # its last use: least recently used entries are evicted first
    return result


def _read_entry(meta_path: Path, model_path: Path, key: str, owners: set[int] | None) -> ExportResult:
    from gapcheck.model.export import ExportResult

    meta = _read_meta(meta_path, key, owners)
    model = _parse_verified(_read_file(model_path, owners, size=meta["onnx_bytes"]), meta["onnx_sha256"], model_path.suffix)
    return ExportResult(model, meta["exporter"], _optional_text(meta.get("fallback_reason")), 0.0,
                        tuple(str(w) for w in _list(meta.get("warnings"))), meta.get("batch_baked") is True,
                        cached=True)


def _optional_text(value: object) -> str | None:
    return None if value is None else str(value)


def _list(value: object) -> list:
    return value if isinstance(value, list) else []


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
            "batch_baked": result.batch_baked, "export_seconds": result.seconds,
            "onnx_sha256": hashlib.sha256(data).hexdigest(), "onnx_bytes": len(data)}  # checked at every load
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        for suffix in (".json", ".onnx"):  # a link planted under the entry's name goes (the link, never its target)
            if (cache_dir / f"{key}{suffix}").is_symlink():
                (cache_dir / f"{key}{suffix}").unlink()
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


def check_is_folder(cache_dir: Path) -> None:
    """Refuse (UsageError, exit 2) a cache path that exists and is not a folder (a regular file, a FIFO): the one
    check every command that names the cache makes, ``cache info`` included."""
    from gapcheck.errors import UsageError

    if cache_dir.exists() and not cache_dir.is_dir():
        raise UsageError(f"export cache folder {cache_dir} is not a folder", parameter="cache_dir")


def check_folder(cache_dir: Path) -> None:
    """Refuse (UsageError, exit 2) a cache folder that is not a folder or holds something named like an entry that is
    neither a regular file nor a symbolic link (a folder ``<sha256>.onnx``, which no store can replace): found before
    any work, not as a backend failure after it."""
    from gapcheck.errors import UsageError

    check_is_folder(cache_dir)
    try:
        names = os.listdir(cache_dir)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        raise UsageError(f"export cache folder {cache_dir} cannot be listed: {exc.strerror or type(exc).__name__}",
                         parameter="cache_dir") from None
    for name in sorted(names):
        # a symbolic link is only refused as an entry (a miss, then replaced by the store): a link another user
        # plants in a shared folder must not stop everyone's runs
        if _ENTRY.match(name) and _is_regular(cache_dir / name) is False and not (cache_dir / name).is_symlink():
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

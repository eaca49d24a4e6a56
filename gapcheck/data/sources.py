"""Where samples come from: image folders, tables (.csv, .parquet), arrays (.npy/.npz), a torch Dataset callable.

A source spec is ``name=location``; the location is a local path, a glob, an fsspec URL
(``file://``, ``memory://``, ``s3://`` with its backend installed) or ``pkg.module:attr`` naming a
callable that returns a torch ``Dataset``. Planning (this module) runs on the driver and only
*lists*: file names, parquet footers, array headers, the dataset's length. The bytes are read by
the workers (:mod:`gapcheck.data.readers`), so raw data never passes through the driver.

Listing problems (a symlink loop, an unreadable folder, files of an unknown kind) are returned
as :class:`BadItem` values to be reported, never dropped. ``memory://`` filesystems live in one
process: use them with the serial engine.
"""
from __future__ import annotations

import enum
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, NamedTuple

from gapcheck.data.remote import RemoteReadError, filesystem, is_remote, open_file, remote_call, shown
from gapcheck.errors import InputError, UsageError

IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"})
TABLE_EXTENSIONS = frozenset({".csv", ".parquet", ".pq"})
ARRAY_EXTENSIONS = frozenset({".npy", ".npz"})
_CALLABLE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
MAX_LISTED = 10_000_000  # a listing larger than this is refused before anything is allocated for it


class SourceKind(str, enum.Enum):
    images = "images"  # image files, or a Dataset yielding 2-D/3-D tensors
    table = "table"  # csv/parquet/npy/npz, or a Dataset yielding 1-D feature vectors


class BadItem(NamedTuple):
    """A listed path that cannot be used, and why (reported with the split, never dropped)."""

    item: str
    reason: str


@dataclass(frozen=True)
class SourceSpec:
    """A split (or side) as the user named it: ``name`` and where its samples are."""

    name: str
    location: str
    columns: tuple[str, ...] | None = None


@dataclass(frozen=True)
class SourcePlan:
    """What the driver learned by listing a source: its kind, the shard payloads, problems, skipped files."""

    spec: SourceSpec
    kind: SourceKind
    payloads: tuple[dict[str, Any], ...]
    items: int
    bad: tuple[BadItem, ...] = ()
    skipped: tuple[str, ...] = field(default=())
    items_known: bool = True  # False when a CSV is planned: its rows are only counted once a worker reads it


def parse_split(text: str) -> SourceSpec:
    """``name=location`` → :class:`SourceSpec` (a bare location is named after its last path part)."""
    name, sep, location = text.partition("=")
    if not sep or any(ch in name for ch in "/\\:*?"):  # no name given (a '=' inside a path, e.g. date=2024-01-01)
        location = text
        name = PurePosixPath(text.rstrip("/")).stem or "split"
    name, location = name.strip(), location.strip()
    if not name or not location:
        raise UsageError(f"a split must be name=location, got {shown(text)!r}")
    return SourceSpec(name=name, location=location)


def _filesystem(location: str) -> tuple[Any, str, str]:
    try:
        fs, path = filesystem(location)
    except (ImportError, ValueError) as exc:
        raise UsageError(f"cannot open {shown(location)}: {shown(str(exc), location)}") from None
    except OSError as exc:  # a chained URL (zip://a.csv::http://...) opens its outer file here
        raise InputError(f"cannot open {shown(location)}: {shown(f'{type(exc).__name__}: {exc}', location)}") from None
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return fs, path, protocol


def _url(protocol: str, path: str) -> str:
    if "://" in path:  # http(s) paths keep their scheme in fsspec
        return path
    return path if protocol in ("file", "local") else f"{protocol}://{path.lstrip('/')}" if protocol == "memory" \
        else f"{protocol}://{path}"


def _walk_local(root: str) -> tuple[list[str], list[BadItem]]:
    """Every file under ``root`` following symlinks, with loops detected (by device+inode) and reported."""
    files: list[str] = []
    bad: list[BadItem] = []
    seen: set[tuple[int, int]] = set()
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            info = os.stat(folder)
        except OSError as exc:
            bad.append(BadItem(folder, "symlink loop" if exc.errno == 40 else f"unreadable folder: {exc.strerror}"))
            continue
        key = (info.st_dev, info.st_ino)
        if key in seen:
            bad.append(BadItem(folder, "symlink loop (folder already visited)"))
            continue
        seen.add(key)
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            bad.append(BadItem(folder, f"unreadable folder: {exc.strerror}"))
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=True):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=True):
                    files.append(entry.path)
                else:
                    bad.append(BadItem(entry.path, "symlink loop" if entry.is_symlink() else "not a regular file"))
            except OSError as exc:
                bad.append(BadItem(entry.path, "symlink loop" if exc.errno == 40 else f"unreadable: {exc.strerror}"))
            if len(files) > MAX_LISTED:
                raise InputError(f"{root}: more than {MAX_LISTED} files")
    return sorted(files), bad


def list_files(location: str) -> tuple[str, list[str], list[BadItem]]:
    """(protocol, sorted file paths, listing problems) for a path, a glob or an fsspec URL."""
    fs, path, protocol = _filesystem(location)
    local = protocol in ("file", "local")
    if any(ch in path for ch in "*?["):
        return protocol, *_glob(fs, path, location)
    if local:
        try:
            os.stat(path)
        except OSError as exc:
            if exc.errno == 40:
                return protocol, [], [BadItem(path, "symlink loop")]
            raise InputError(f"{shown(location)}: not found") from exc
        if os.path.isdir(path):
            files, bad = _walk_local(path)
            return protocol, files, bad
        if not os.path.isfile(path):  # a FIFO or device would block the worker that opens it, forever
            return protocol, [], [BadItem(path, "not a regular file")]
        return protocol, [path], []
    if not is_remote(location):
        if not fs.exists(path):
            raise InputError(f"{shown(location)}: not found")
        return protocol, sorted(fs.find(path)) if fs.isdir(path) else [path], []
    try:  # one request under the deadline: fsspec's http exists() reads a timeout as "not there"
        info = remote_call("listing", location, lambda: fs.info(path))
    except FileNotFoundError:
        raise InputError(f"{shown(location)}: not found") from None
    if info.get("type") == "directory":
        return protocol, sorted(remote_call("listing", location, lambda: fs.find(path))), []
    return protocol, [path], []


def _glob(fs: Any, path: str, location: str) -> tuple[list[str], list[BadItem]]:
    """Files matched by a glob (one listing call under the remote deadline), and matches that are not files."""
    def listing() -> tuple[list[str], list[BadItem]]:
        matched = sorted(fs.glob(path))
        regular = {p for p in matched if fs.isfile(p)}
        files = [p for p in matched if p in regular]
        return files, [BadItem(p, "not a regular file") for p in matched if p not in regular and not fs.isdir(p)]

    return remote_call("listing", location, listing)


def glob_matches(location: str) -> list[str] | None:
    """The local files a glob location matches now (None: not a local glob), for checks made before any work."""
    import glob

    path = location[len("file://"):] if location.startswith("file://") else location
    if "://" in path or not any(ch in path for ch in "*?["):
        return None
    return sorted(glob.glob(path, recursive=True))


def plan(spec: SourceSpec, shard_size: int = 256) -> SourcePlan:
    """List ``spec`` and cut it into shard payloads of about ``shard_size`` items."""
    if _CALLABLE.match(spec.location) and "://" not in spec.location:
        return _plan_dataset(spec, shard_size)
    try:
        protocol, files, bad = list_files(spec.location)
    except InputError as exc:
        raise InputError(f"split {spec.name}: {exc}") from None
    suffix = {f: PurePosixPath(f).suffix.lower() for f in files}
    images = [f for f in files if suffix[f] in IMAGE_EXTENSIONS]
    tables = [f for f in files if suffix[f] in TABLE_EXTENSIONS | ARRAY_EXTENSIONS]
    if images and tables:
        raise UsageError(f"split {spec.name!r} mixes images and tables ({shown(spec.location)}); give one kind per split")
    used = set(images) | set(tables)
    skipped = tuple(f for f in files if f not in used)
    if not used and not bad:
        extra = f" ({len(skipped)} other file(s), e.g. {shown(PurePosixPath(skipped[0]).name)})" if skipped else ""
        raise InputError(f"split {spec.name} ({shown(spec.location)}) holds no image or table files{extra}")
    if tables:
        planned = _plan_tables(spec, protocol, tables, bad, skipped, shard_size)
    else:
        planned = _plan_images(spec, protocol, images, bad, skipped, shard_size)
    if not planned.payloads and planned.bad:
        refuse_unreadable(spec, [(b.item, b.reason) for b in planned.bad])
    return planned


def refuse_unreadable(spec: SourceSpec, bad: list[tuple[str, str]]) -> None:
    """A split none of whose items could be read is bad input (exit 2), one line naming the split and the reason;
    a split with some bad items is checked over the rest and the bad ones are counted (``bad_input``)."""
    first_item, first_reason = bad[0]
    more = f" (and {len(bad) - 1} more item(s))" if len(bad) > 1 else ""
    raise InputError(f"split {spec.name} ({shown(spec.location)}) cannot be read: {shown(first_item)}: "
                     f"{shown(first_reason)}{more}")


def _root(spec: SourceSpec) -> str:
    _, path, _ = _filesystem(spec.location)
    return path if not any(ch in path for ch in "*?[") else os.path.dirname(path.split("*")[0])


def _plan_images(spec: SourceSpec, protocol: str, images: list[str], bad: list[BadItem], skipped: tuple[str, ...],
                 shard_size: int) -> SourcePlan:
    root = _root(spec).rstrip("/")
    relative = [p[len(root) + 1:] if p.startswith(root + "/") else PurePosixPath(p).name for p in images]
    # ImageFolder convention: every image one folder below the root → the folder is the label.
    folders = [r.split("/")[0] if r.count("/") == 1 else None for r in relative]
    labels = folders if images and all(folders) else None
    payloads = []
    for start in range(0, len(images), shard_size):
        stop = start + shard_size
        payloads.append({"kind": "images", "split": spec.name, "urls": [_url(protocol, p) for p in images[start:stop]],
                         "names": relative[start:stop], "labels": labels[start:stop] if labels else None,
                         "offset": start})
    return SourcePlan(spec, SourceKind.images, tuple(payloads), len(images), tuple(bad), skipped)


def _plan_tables(spec: SourceSpec, protocol: str, files: list[str], bad: list[BadItem], skipped: tuple[str, ...],
                 shard_size: int) -> SourcePlan:
    payloads: list[dict[str, Any]] = []
    offset = 0
    known = True
    root = _root(spec).rstrip("/")
    for path in files:
        url = _url(protocol, path)
        suffix = PurePosixPath(path).suffix.lower()
        # rows are named by the file's path under the split's folder: two part.csv in two subfolders stay apart
        name = path[len(root) + 1:] if path.startswith(root + "/") else PurePosixPath(path).name
        base = {"kind": "table", "split": spec.name, "url": url, "name": name,
                "columns": list(spec.columns) if spec.columns else None}
        try:
            if protocol in ("file", "local") and suffix == ".csv":
                _check_readable(path)  # read whole by a worker later: refuse an unopenable one now
            pieces = _table_pieces(url, suffix)
        except RemoteReadError:
            raise  # the server, not the table: exit 3 with its one line
        except Exception as exc:  # noqa: BLE001 - a corrupt table is reported like a corrupt image
            bad.append(BadItem(url, f"unreadable table: {type(exc).__name__}: {exc}"))
            continue
        for piece, rows in pieces:
            payloads.append({**base, **piece, "format": suffix.lstrip("."), "offset": offset})
            offset += rows if rows is not None else 0
            known = known and rows is not None
    return SourcePlan(spec, SourceKind.table, tuple(payloads), offset, tuple(bad), skipped, items_known=known)


def _check_readable(path: str) -> None:
    """Open a local file the way a worker will (non-blocking: a FIFO swapped in never blocks) and check it is a
    regular file: permission denied or a vanished file is found before any work."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("not a regular file (a FIFO, device or folder)")
    finally:
        os.close(fd)


def _table_pieces(url: str, suffix: str) -> list[tuple[dict[str, Any], int | None]]:
    """Shards of one table file: parquet row groups, .npy row ranges (from the footer/header), else the whole file."""
    if suffix in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        with open_file(url) as handle:
            meta = pq.ParquetFile(handle).metadata
        return [({"row_group": i, "first_row": sum(meta.row_group(j).num_rows for j in range(i))},
                 meta.row_group(i).num_rows) for i in range(meta.num_row_groups)]
    if suffix == ".npy":
        with open_file(url) as handle:
            shape, declared = _npy_header(handle)
            start = handle.tell()
            size = handle.seek(0, 2)
        if start + declared > size:  # a lying header would plan (and allocate for) rows that are not there
            raise ValueError(f"the header declares shape {shape} ({declared} bytes) but the file holds "
                             f"{size - start} bytes of data")
        rows = shape[0] if shape else 1
        step = 65_536
        return [({"start": s, "stop": min(s + step, rows), "first_row": s}, min(step, rows - s))
                for s in range(0, rows, step)] or [({"start": 0, "stop": 0, "first_row": 0}, 0)]
    if suffix == ".npz":
        _check_npz(url)
    return [({"first_row": 0}, None)]


MAX_NPZ_BYTES = 1 << 30  # an .npz is read whole by one worker: its arrays together may declare at most this


def _npy_header(handle: Any) -> tuple[tuple[int, ...], int]:
    """(shape, data bytes) from an .npy header, read without touching the data."""
    import numpy as np

    version = np.lib.format.read_magic(handle)
    reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = reader(handle)
    count = 1
    for dim in shape:
        count *= int(dim)
    return tuple(int(d) for d in shape), count * dtype.itemsize


def _check_npz(url: str) -> None:
    """Refuse an .npz whose arrays declare more than :data:`MAX_NPZ_BYTES`, or more than the archive says it
    holds (a zip bomb or a lying header), before any worker decompresses it."""
    import zipfile

    with open_file(url) as handle, zipfile.ZipFile(handle) as archive:
        total = 0
        for info in archive.infolist():
            if not info.filename.endswith(".npy"):
                continue
            with archive.open(info) as member:
                shape, declared = _npy_header(member)
            if declared > info.file_size:
                raise ValueError(f"{info.filename}: the header declares {declared} bytes, the archive holds "
                                 f"{info.file_size}")
            total += declared
            if total > MAX_NPZ_BYTES:
                raise ValueError(f"its arrays declare more than {MAX_NPZ_BYTES} bytes (an .npz is read whole by "
                                 f"one worker; save large matrices as .npy, which is read in row blocks)")


def _plan_dataset(spec: SourceSpec, shard_size: int) -> SourcePlan:
    from gapcheck.data.readers import dataset_sample_kind, load_dataset

    dataset = load_dataset(spec.location)
    try:
        size = len(dataset)
    except TypeError as exc:
        raise UsageError(f"{shown(spec.location)} returned a dataset without len(); gapcheck needs a map-style Dataset") from exc
    except Exception as exc:  # noqa: BLE001 - the user's __len__ failing (e.g. negative) is bad input
        raise InputError(f"len() of the dataset {shown(spec.location)} raised {type(exc).__name__}: {exc}") from exc
    if size > MAX_LISTED:
        raise InputError(f"{shown(spec.location)}: len() is {size}, more than the {MAX_LISTED} samples gapcheck plans")
    kind = SourceKind.images if dataset_sample_kind(spec.location, size) == "images" else SourceKind.table
    payloads = tuple({"kind": "dataset", "sample_kind": kind.value, "split": spec.name, "callable": spec.location,
                      "start": s, "stop": min(s + shard_size, size), "offset": s} for s in range(0, size, shard_size))
    return SourcePlan(spec, kind, payloads, size)

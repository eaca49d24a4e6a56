"""The one atomic file writer, and the check every output path passes before any work starts.

Every file gapcheck leaves behind (reports, cache entries, bundle members, Triton configs) is written the
same way: a temporary file in the target's own folder, flushed and fsync'd, then renamed over the target.
A reader (a cron job, another gapcheck process, a Triton server polling its repository) sees the old file
or the new one, never half of one. This module sits on the lowest floor (it imports only
:mod:`gapcheck.errors`), so any layer may use it.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from gapcheck.errors import UsageError

__all__ = ["check_folder", "check_not_input", "check_writable", "write_atomic"]


def check_writable(path: str | Path, what: str = "report", *, probe: bool = True) -> Path:
    """Fail early (UsageError, exit 2) when ``path`` cannot be written: a directory, under a file, an unwritable folder,
    or a path the atomic rename must not replace (a symbolic link, a device, a FIFO)."""
    target = Path(path)
    if target.is_symlink():  # the rename would replace the link (or, followed, write where someone else points it)
        raise UsageError(f"{what} path {target} is a symbolic link; give the file's real path")
    if target.is_dir():
        raise UsageError(f"{what} path {target} is a directory")
    if target.exists() and not target.is_file():  # a device, FIFO or socket: the rename would replace it
        raise UsageError(f"{what} path {target} is not a regular file")
    parent = target.parent if str(target.parent) else Path(".")
    if check_folder(parent, f"{what} path {target}") == parent and probe:
        _probe_folder(parent, target, what)
    return target


def check_not_input(path: str | Path, what: str, inputs: Iterable[tuple[str, str | Path]]) -> None:
    """Refuse (UsageError, exit 2, before any work) an output ``path`` that is one of the command's ``inputs``
    (``(flag, path)`` pairs) or lies inside one where it could replace something (:func:`_replaces_inside`): the
    atomic rename would replace the user's checkpoint, sample or bundle member with a report. Compared by real path
    (links and ``..`` resolved) and, when both exist, by inode."""
    target = _real(path)
    for label, source in inputs:
        real = _real(source)
        if target == real or _same_file(path, source):
            raise UsageError(f"{what} path {path} is also {label} {source}: an output never replaces a file the "
                             "command reads or writes; give another path")
        companion = next((suffix for suffix in COMPANION_SUFFIXES if target == real + suffix), None)
        if companion is not None:
            raise UsageError(f"{what} path {path} is the {companion} file that goes with {label} {source}: replacing "
                             "it would lose or corrupt what is written there; give another path")
        if target.startswith(real.rstrip(os.sep) + os.sep) and _replaces_inside(target, label, real):
            raise UsageError(f"{what} path {path} lies inside {label} {source}: an output is never written into "
                             "a folder the command reads or writes; give a path outside it")


#: Files that live beside an input and belong to it: SQLite's write-ahead log, shared memory and rollback journal
#: (a history's last rows may be only in its -wal), and nightly's lock. A report there would destroy them.
COMPANION_SUFFIXES = ("-wal", "-shm", "-journal", ".lock")

#: Folders the command itself fills: any path inside them may be one of its outputs (a bundle's manifest, a model's
#: config.pbtxt), so nothing else is written there, existing or not.
OUTPUT_FOLDER_FLAGS = frozenset({"--out", "--triton-repo"})


def _replaces_inside(target: str, label: str, folder: str) -> bool:
    """Whether an output at ``target`` inside the input ``folder`` could destroy something: it replaces a file that
    is there now (a sample, a bundle member), or the folder is one the work creates or fills. A new report inside a
    folder that is only read (``--samples .  --json r.json``) replaces nothing and is allowed."""
    return os.path.lexists(target) or label in OUTPUT_FOLDER_FLAGS or not os.path.isdir(folder)


def _real(path: str | Path) -> str:
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):  # a NUL in the name: nothing on disk can be it
        return os.path.abspath(path)


def _same_file(a: str | Path, b: str | Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):  # either does not exist (yet), or a NUL in a name
        return False


def check_folder(folder: str | Path, label: str) -> Path:
    """The first existing folder at or above ``folder`` (where a write would create the rest), checked to be a
    writable directory; UsageError ``"{label}: {folder} is not a directory"`` / ``"... is not writable"`` otherwise."""
    start = Path(folder)
    for existing in (start, *start.parents):
        if existing.exists():
            if not existing.is_dir():
                raise UsageError(f"{label}: {existing} is not a directory")
            if not os.access(existing, os.W_OK | os.X_OK):
                raise UsageError(f"{label}: {existing} is not writable")
            return existing
    return Path(".")


def _probe_folder(folder: Path, target: Path, what: str) -> None:
    """Create and remove a file where the output will go: os.access says yes for root on /proc or a read-only mount."""
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".probe", dir=folder)
    except OSError as exc:
        raise UsageError(f"{what} path {target}: cannot create a file in {folder} ({exc.strerror})") from None
    os.close(fd)
    Path(probe).unlink(missing_ok=True)


def write_atomic(path: str | Path, data: str | bytes, *, what: str = "report") -> Path:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` atomically: temp file in the same folder, fsync, rename.

    The path is checked first (:func:`check_writable` without its probe: the temp file made next is the probe),
    missing folders are created, and the file gets the permissions any new file would get under the umask
    (``mkstemp`` makes 0600). On any failure the temp file is removed and the target is left as it was.
    """
    target = check_writable(path, what, probe=False)
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
            os.fchmod(handle.fileno(), 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def _umask() -> int:
    mask = os.umask(0)  # reading the umask means setting it: put it straight back
    os.umask(mask)
    return mask

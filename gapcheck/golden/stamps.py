"""Verification stamps: a golden bundle verified once is not hashed again while its files are the very files verified.

A night re-reads the bundle it verified the night before. Hashing it again (the SHA256 of every file and of every
sample, 11 ms of CPU a night for 1,000 small samples, 100 ms at 10,000) proves nothing new when nothing has touched
the files since: so after a full verification, :class:`Stamps` keeps each file's identity as the kernel gives it
for the open descriptor (device, inode, size, modification and change times in nanoseconds) under a key made of
the bundle's real path and its manifest's SHA256. The next open whose descriptors show the same identities takes
the stamp for the hashes; any other identity verifies the bundle in full, as before.

When a stamp is trusted (on by default; ``GAPCHECK_VERIFY_STAMPS=0`` turns them off). Any write through
``write(2)``, and any rename or replacement of a file, sets its change time (``st_ctime``) to the current time; no
system call lets a user set it back (``utime`` sets the other two and the change time to now), and a replaced file
has another inode or a new change time. A write through a shared writable memory mapping sets the times only when a
clean page is first written: while the page stays dirty (until the kernel writes it back), further writes through
the same mapping change the bytes and neither time (the attacker review of issue 23 showed it). So a stamp is only
written, and only taken, when that cannot happen behind the owner's back (:meth:`Stamps.refusal`):

- every file is owned by the current user (or root) and writable by neither its group nor others (the mode's group
  bits are also the mask of any ACL): only someone who could as well change gapcheck itself, or the history it
  writes, can hold a writable mapping of it;
- every file is on a local disk filesystem (ext2/3/4, XFS, Btrfs, F2FS, overlayfs over them): one whose mapped pages
  are written back, so that the next write meets a clean page and sets the times. Not tmpfs or ramfs (never written
  back), nor network or FUSE filesystems (another machine's writes, another cache);
- the kernel writes dirty pages back (``/proc/sys/vm``: expiry and flusher interval set, no laptop mode), and a stamp
  is written only for files whose times are older than the verification's start by the racy window, past that
  writeback (60 s, or the writeback's own time plus 10 s when that is longer; git's "racily clean" rule for a change
  within the clock's tick too): a page dirtied when the times were last set has been written back since.

And a stamp never turns a night's verdict: a night that took a stamp and finds a gap hashes the bundle in full before
it says so (``gapcheck.nightly.run``), so a file rotted on the disk (its times unchanged) is exit 2, not an alarm.
A stamp is itself a hostile file: read only when it is a regular file owned by the current user, of bounded size,
never through a link; anything else is no stamp. ``golden verify`` never reads a stamp (it always hashes everything).
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = "gapcheck-verified/1"
RACY_NS = 60_000_000_000  # 60 s: past dirty-page writeback (30 s + 5 s by default) and any timestamp granularity
_MAX_STAMP_BYTES = 64 * 1024
# statfs(2) f_type of the local disk filesystems whose mapped pages are written back, a write fault on a clean page
# setting the file's times (their page_mkwrite calls file_update_time); overlayfs reports the upper file's times.
DISK_FILESYSTEMS = {0xEF53: "ext2/3/4", 0x58465342: "xfs", 0x9123683E: "btrfs", 0xF2F52010: "f2fs",
                    0x794C7630: "overlayfs"}
_VM = Path("/proc/sys/vm")


def file_identity(fd: int) -> list[int]:
    """What the kernel says about the open file: device, inode, size, modification and change times (ns)."""
    info = os.fstat(fd)
    return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


def filesystem_type(fd: int) -> int | None:
    """``statfs(2)``'s ``f_type`` of the filesystem holding the open file; None where it cannot be asked."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return None
    buffer = ctypes.create_string_buffer(512)  # struct statfs: 120 bytes on 64-bit Linux, f_type its first field
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.fstatfs(fd, buffer) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return ctypes.c_long.from_buffer(buffer).value & 0xFFFFFFFF


def writeback_ns() -> int | None:
    """How long a dirty page may stay unwritten (expiry plus the flusher's interval), in ns; None when the kernel
    does not write pages back on its own (an interval or expiry of 0, laptop mode) or cannot be asked."""
    try:
        expire, every, laptop = (int((_VM / name).read_text()) for name in
                                 ("dirty_expire_centisecs", "dirty_writeback_centisecs", "laptop_mode"))
    except (OSError, ValueError):
        return None
    if expire <= 0 or every <= 0 or laptop != 0:
        return None
    return (expire + every) * 10_000_000


@dataclass(frozen=True)
class Stamps:
    """Where the stamps live (one small JSON file each), and how old a file must be for its stamp to be kept."""

    folder: Path
    racy_ns: int = RACY_NS

    @classmethod
    def default(cls) -> Stamps | None:
        """Beside the export cache (``$GAPCHECK_CACHE_DIR/../gapcheck-verified``, else ``~/.cache/gapcheck/verified``); None
        (every file hashed every night) with ``GAPCHECK_VERIFY_STAMPS=0`` or where the kernel does not write dirty
        pages back: see the module's docstring."""
        if os.environ.get("GAPCHECK_VERIFY_STAMPS", "1").strip() == "0":
            return None
        writeback = writeback_ns()
        if writeback is None:
            return None
        from gapcheck.model.cache import default_cache_dir

        parent = default_cache_dir().parent  # ~/.cache/gapcheck; beside a GAPCHECK_CACHE_DIR=/tmp/x, /tmp: named ours
        folder = parent / ("verified" if parent.name == "gapcheck" else "gapcheck-verified")
        return cls(folder, max(RACY_NS, writeback + 10_000_000_000))

    @staticmethod
    def refusal(fd: int) -> str | None:
        """Why the open file may not be taken on a stamp (nor stamped), or None: see the module's docstring."""
        info = os.fstat(fd)
        owners = {os.geteuid(), 0} if hasattr(os, "geteuid") else set()
        if info.st_uid not in owners:
            return "it is owned by another user"
        if info.st_mode & 0o022:
            return "its group or others may write it"
        kind = filesystem_type(fd)
        if kind not in DISK_FILESYSTEMS:
            return f"it is not on a local disk filesystem (type {kind:#x})" if kind is not None else \
                "its filesystem cannot be told"
        return None

    def _path(self, bundle: Path, bundle_hash: str) -> Path:
        key = hashlib.sha256(f"{FORMAT}\0{os.path.realpath(bundle)}\0{bundle_hash}".encode(
            "utf-8", "surrogateescape")).hexdigest()
        return self.folder / f"{key}.json"

    def holds(self, bundle: Path, bundle_hash: str, identities: dict[str, list[int]]) -> bool:
        """Whether a stamp says these very files (``identities``: name -> :func:`file_identity`) were verified."""
        from gapcheck.reading import ReadRefused, read_checked

        owners = {os.getuid()} if hasattr(os, "getuid") else None
        if not _private_folder(self.folder):
            return False
        try:
            data = read_checked(self._path(bundle, bundle_hash), owners=owners, max_bytes=_MAX_STAMP_BYTES)
            stamp = json.loads(data)
        except (OSError, ValueError, ReadRefused):  # missing, unreadable, foreign, a link, too large, not JSON
            return False
        return (isinstance(stamp, dict) and stamp.get("format") == FORMAT and stamp.get("bundle_hash") == bundle_hash
                and stamp.get("files") == identities)

    def record(self, bundle: Path, bundle_hash: str, identities: dict[str, list[int]], started_ns: int) -> bool:
        """Keep a stamp for files verified from ``started_ns`` on (:func:`time.time_ns`); False (nothing written)
        when a file changed too recently to tell a later change apart, or the stamp cannot be written (a stamp is
        only ever a saving: failing to keep one costs the next night its hashes, nothing else)."""
        if any(max(identity[3], identity[4]) >= started_ns - self.racy_ns for identity in identities.values()):
            return False
        stamp: dict[str, Any] = {"format": FORMAT, "bundle": os.path.realpath(bundle), "bundle_hash": bundle_hash,
                                 "files": identities, "verified_at": time.time()}
        try:
            _write_private(self.folder, self._path(bundle, bundle_hash), json.dumps(stamp, sort_keys=True))
        except OSError:
            return False
        return True


def _private_folder(folder: Path) -> bool:
    """Whether ``folder`` is a folder itself (not a link to one), the current user's, that nobody else may enter:
    a link or folder someone else planted there is never written into nor read from (the attacker review, D15)."""
    try:
        info = os.lstat(folder)
    except OSError:
        return False
    owner = os.geteuid() if hasattr(os, "geteuid") else info.st_uid
    return stat.S_ISDIR(info.st_mode) and info.st_uid == owner and not info.st_mode & 0o077


def _write_private(folder: Path, path: Path, text: str) -> None:
    """``text`` into ``path`` atomically (written beside, then renamed), the folder private to the user (OSError, and
    nothing written, when the folder is a link or not private)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not _private_folder(folder):
        raise PermissionError(f"{folder} is not a private folder of the current user")
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with open(fd, "w", encoding="utf-8", closefd=True) as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise

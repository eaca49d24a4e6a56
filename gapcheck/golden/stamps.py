"""Verification stamps: a golden bundle verified once is not hashed again while its files are the very files verified.

A night re-reads the bundle it verified the night before. Hashing it again (the SHA256 of every file and of every
sample, 11 ms of CPU a night for 1,000 small samples, 100 ms at 10,000) proves nothing new when nothing has touched
the files since: so after a full verification, :class:`Stamps` keeps each file's identity as the kernel gives it
for the open descriptor (device, inode, size, modification and change times in nanoseconds) under a key made of
the bundle's real path and its manifest's SHA256. The next open whose descriptors show the same identities takes
the stamp for the hashes; any other identity verifies the bundle in full, as before.

Why this is opt-in (``GAPCHECK_VERIFY_STAMPS=1``; off by default). Any write through ``write(2)``, and any rename or
replacement of a file, sets its change time (``st_ctime``) to the current time; no system call lets a user set it
back (``utime`` sets the other two and the change time to now), and a replaced file has another inode or a new
change time. But a write through a shared writable memory mapping updates the times only when a clean page is first
written: while the page stays dirty (until the kernel writes it back, ~30 s by default; never on tmpfs), further
writes through the same mapping change the bytes and neither time. Someone who can write the bundle and holds such a
mapping across a night's verification can change it after the stamp unseen (the attacker review of issue 23 showed
it). So the stamps are for bundles only trusted users can write, on a disk filesystem; there a stamp is written only
for files whose times are older than the verification's start by :data:`RACY_NS` (60 s: past the default writeback
of a page dirtied when its times were last set, so a later write through a mapping meets a clean page and sets
them; and git's "racily clean" rule for a change within the clock's tick). A stamp is itself a hostile file: read
only when it is a regular file owned by the current user, of bounded size, never through a link; anything else is
no stamp. ``golden verify`` never reads a stamp (it always hashes everything).
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = "gapcheck-verified/1"
RACY_NS = 60_000_000_000  # 60 s: past dirty-page writeback (30 s + 5 s by default) and any timestamp granularity
_MAX_STAMP_BYTES = 64 * 1024


def file_identity(fd: int) -> list[int]:
    """What the kernel says about the open file: device, inode, size, modification and change times (ns)."""
    info = os.fstat(fd)
    return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


@dataclass(frozen=True)
class Stamps:
    """Where the stamps live (one small JSON file each), and how old a file must be for its stamp to be kept."""

    folder: Path
    racy_ns: int = RACY_NS

    @classmethod
    def default(cls) -> Stamps | None:
        """Beside the export cache (``$GAPCHECK_CACHE_DIR/../verified``, else ``~/.cache/gapcheck/verified``) when
        ``GAPCHECK_VERIFY_STAMPS=1``; None (every file hashed every night) otherwise: see the module's docstring."""
        if os.environ.get("GAPCHECK_VERIFY_STAMPS", "0").strip() != "1":
            return None
        from gapcheck.model.cache import default_cache_dir

        return cls(default_cache_dir().parent / "verified")

    def _path(self, bundle: Path, bundle_hash: str) -> Path:
        key = hashlib.sha256(f"{FORMAT}\0{os.path.realpath(bundle)}\0{bundle_hash}".encode(
            "utf-8", "surrogateescape")).hexdigest()
        return self.folder / f"{key}.json"

    def holds(self, bundle: Path, bundle_hash: str, identities: dict[str, list[int]]) -> bool:
        """Whether a stamp says these very files (``identities``: name -> :func:`file_identity`) were verified."""
        from gapcheck.reading import ReadRefused, read_checked

        owners = {os.getuid()} if hasattr(os, "getuid") else None
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


def _write_private(folder: Path, path: Path, text: str) -> None:
    """``text`` into ``path`` atomically (written beside, then renamed), the folder private to the user."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with open(fd, "w", encoding="utf-8", closefd=True) as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise

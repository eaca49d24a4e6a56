"""Finding raw samples and screening them as hostile input before any stage sees them.

Screening is deliberately cheap (header only): the full decode is left to the stages,
and only when a stage fails do we decode fully to tell a corrupt file from a stage bug.
Samples that cannot be decoded safely (unreadable, not an image, corrupt, decompression
bomb) are counted and listed, never passed on; unusual but decodable images
(grayscale, alpha, 16-bit) are listed as warnings and still audited.
"""
from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
import re
import stat
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np

from gapcheck.codes import Code
from gapcheck.codes.preprocess import (
    ALPHA_INPUT,
    CORRUPT_IMAGE,
    DECOMPRESSION_BOMB,
    GRAYSCALE_INPUT,
    HIGH_BIT_DEPTH_INPUT,
    NOT_IMAGE,
    UNREADABLE,
)
from gapcheck.errors import InputError
from gapcheck.limits import MAX_SAMPLE_BYTES
from gapcheck.preprocess.sources import orientation_of
from gapcheck.reading import ReadRefused, Refusal, open_checked

logger = logging.getLogger(__name__)

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
# PIL's own default; also applied to PIL inside workers so stages that decode with PIL are guarded too.
DEFAULT_MAX_PIXELS = 89_478_485

# Codes for samples that are never passed to a stage.
SKIPPED_INPUT_CODES: tuple[Code, ...] = (UNREADABLE, NOT_IMAGE, CORRUPT_IMAGE, DECOMPRESSION_BOMB)
# Codes for samples that are audited but unusual enough to list.
UNUSUAL_INPUT_CODES: tuple[Code, ...] = (GRAYSCALE_INPUT, ALPHA_INPUT, HIGH_BIT_DEPTH_INPUT)


@dataclass(frozen=True)
class InputIssue:
    code: Code  # one of SKIPPED_INPUT_CODES or UNUSUAL_INPUT_CODES
    detail: str

    @property
    def skipped(self) -> bool:
        return self.code in SKIPPED_INPUT_CODES


@dataclass(frozen=True)
class Screening:
    """What the header says about one raw sample."""

    issue: InputIssue | None
    image_format: str = ""
    mode: str = ""
    width: int = 0
    height: int = 0
    orientation: int = 0  # the EXIF orientation tag (0: none); cv2.imread applies it, PIL's Image.open does not


@dataclass(frozen=True)
class SampleEntry:
    """A sample found on disk; ``issue`` is set for entries that are never opened (special files, loops, bad links)."""

    path: Path | str  # a str for an fsspec URL (memory://, s3://), read by the workers
    issue: InputIssue | None = None


def _special_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "not a regular file"


def classify_entry(path: Path) -> InputIssue | None:
    """None for a regular file (or a link to one); otherwise why it is never opened. Only stat, never open."""
    try:
        info = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return InputIssue(UNREADABLE, "a symlink loop (too many levels of symbolic links)")
        if os.path.islink(path):
            return InputIssue(UNREADABLE, f"a broken symlink (to {os.readlink(path)!r})")
        return InputIssue(UNREADABLE, f"cannot stat: {exc.strerror or exc}")
    if stat.S_ISREG(info.st_mode):
        return None
    return InputIssue(UNREADABLE, f"{_special_kind(info.st_mode)}, not a regular file: never opened")


def _walk(root: Path) -> list[SampleEntry]:
    """Every non-hidden entry under ``root``, recursively; directory links are followed once (a loop is listed)."""
    entries: list[SampleEntry] = []
    seen: set[tuple[int, int]] = set()
    pending = [root]
    while pending:
        folder = pending.pop()
        try:
            info = os.stat(folder)
        except OSError as exc:
            entries.append(SampleEntry(folder, classify_entry(folder) or InputIssue(UNREADABLE, str(exc))))
            continue
        if (info.st_dev, info.st_ino) in seen:
            entries.append(SampleEntry(folder, InputIssue(UNREADABLE, "a symlink loop (a folder already visited)")))
            continue
        seen.add((info.st_dev, info.st_ino))
        try:
            children = list(os.scandir(folder))
        except OSError as exc:
            entries.append(SampleEntry(folder, InputIssue(UNREADABLE, f"folder cannot be listed: {exc.strerror or exc}")))
            continue
        for child in children:
            if child.name.startswith("."):
                continue
            path = Path(child.path)
            try:
                is_dir = child.is_dir()  # follows links; a loop raises or is caught by ``seen``
            except OSError:
                is_dir = False
            if is_dir:
                pending.append(path)
            else:
                entries.append(SampleEntry(path, classify_entry(path)))
    return sorted(entries, key=lambda e: str(e.path))


def discover_samples(samples: str | Path | Iterable[str | Path], n: int) -> list[SampleEntry]:
    """The first ``n`` entries (sorted, recursive) of a directory, or the given files in order.

    Hidden files are ignored; nothing is filtered by extension or kind, because a non-image
    file, a FIFO or a broken link in a sample folder is exactly the kind of thing the audit
    must list. Special files are classified by ``stat`` only and never opened.
    """
    if n < 1:
        raise InputError(f"the number of samples must be at least 1 (got {n})")
    if isinstance(samples, str) and (is_url(samples) or samples.startswith("file://") or any(c in samples for c in "*?[")):
        return _discover_listed(samples)[:n]
    if isinstance(samples, (str, Path)):
        root = Path(samples)
        issue = classify_entry(root) if os.path.lexists(root) else None
        if root.is_dir():
            entries = _walk(root)
        elif os.path.lexists(root) and issue is None:
            entries = [SampleEntry(root)]
        elif issue is not None:
            raise InputError(f"samples path {root} is {issue.detail}", hint="give a folder of samples or an image file")
        else:
            raise InputError(f"samples path does not exist: {root}")
    else:
        paths = [Path(p) for p in samples]
        missing = [str(p) for p in paths if not os.path.lexists(p)]
        if missing:
            raise InputError(f"{len(missing)} sample path(s) do not exist: {', '.join(missing[:5])}")
        entries = [SampleEntry(p, classify_entry(p)) for p in paths]
    if not entries:
        raise InputError(f"no sample files found in {samples}")
    return entries[:n]


def is_url(location: object) -> bool:
    """An fsspec URL other than file:// (read with fsspec on the workers)."""
    return isinstance(location, str) and bool(_URL.match(location)) and not location.startswith("file://")


def _discover_listed(location: str) -> list[SampleEntry]:
    """A glob (local or remote) or an fsspec URL: the listing of gapcheck.data.sources (leakage and drift use it)."""
    from gapcheck.data.sources import list_files

    protocol, files, odd = list_files(location)
    local = protocol in ("file", "local")
    entries: list[SampleEntry] = []
    for name in files:
        if PurePosixPath(name).name.startswith("."):
            continue
        if local:
            entries.append(SampleEntry(Path(name), classify_entry(Path(name))))
        else:  # the URL the workers open (memory paths are listed with a leading "/")
            entries.append(SampleEntry(f"{protocol}://{name.lstrip('/')}" if protocol == "memory" else f"{protocol}://{name}"))
    entries += [SampleEntry(item.item if not local else Path(item.item), InputIssue(UNREADABLE, item.reason))
                for item in odd]
    if not entries:
        raise InputError(f"no sample files found in {location}")
    return sorted(entries, key=lambda e: str(e.path))


class SampleTooLarge(OSError):
    """A sample larger than :data:`~gapcheck.limits.MAX_SAMPLE_BYTES` (local or remote), refused before it is read.

    An OSError, so every reader that lists an unreadable sample lists this one; its text is the reason alone
    ("too large: N bytes, more than the limit of M bytes (512 MiB): not read"), without an errno."""

    def __init__(self, size: int | None, limit: int) -> None:
        said = f"{size:,} bytes" if size is not None else "more than that read"
        super().__init__(errno.EFBIG, f"too large: {said}, more than the limit of {limit:,} bytes "
                                      f"({limit / 2**20:g} MiB): not read")
        self.size, self.limit = size, limit

    def __str__(self) -> str:
        return str(self.strerror)


def _read_url(url: str) -> bytes:
    import fsspec

    try:
        with fsspec.open(url, "rb") as handle:
            size = getattr(handle, "size", None)
            if size is not None and size > MAX_SAMPLE_BYTES:
                raise SampleTooLarge(size, MAX_SAMPLE_BYTES)
            data = handle.read(MAX_SAMPLE_BYTES + 1)
    except (ImportError, ValueError) as exc:  # no backend for the protocol, or a malformed URL
        raise OSError(errno.EINVAL, f"cannot open {url}: {exc}") from exc
    if len(data) > MAX_SAMPLE_BYTES:
        raise SampleTooLarge(None, MAX_SAMPLE_BYTES)
    return data


@contextlib.contextmanager
def local_path(path: str, data: bytes) -> Iterator[str]:
    """A path a stage can open: the sample's own path, or (for a URL) a private temporary copy of ``data``."""
    if not is_url(path):
        yield path
        return
    suffix = PurePosixPath(path).suffix[:16]
    handle, name = tempfile.mkstemp(prefix="gapcheck-sample-", suffix=suffix)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        yield name
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


def read_regular_file(path: str) -> bytes:
    """Read a sample that discovery found to be a regular file, without ever blocking on a FIFO and never more
    than :data:`~gapcheck.limits.MAX_SAMPLE_BYTES`.

    :func:`~gapcheck.reading.open_checked` opens non-blocking (a FIFO swapped in since discovery returns at once)
    and checks the open descriptor, so nothing can be swapped between the check and the read: not a regular file
    is refused (OSError), larger than the limit is :class:`SampleTooLarge`, before a byte is read. Links are
    followed (discovery lists a link to a regular file as a sample). An fsspec URL is read with fsspec, with the
    same limit.
    """
    if is_url(path):
        return _read_url(path)
    try:
        fd, size = open_checked(path, follow_links=True, max_bytes=MAX_SAMPLE_BYTES)
    except ReadRefused as refused:
        if refused.reason is Refusal.TOO_LARGE:
            raise SampleTooLarge(refused.size, MAX_SAMPLE_BYTES) from None
        raise OSError(errno.EINVAL, f"{_special_kind(refused.mode)}, not a regular file: not read") from None
    return _read_sized(fd, size)


def _read_sized(fd: int, size: int) -> bytes:
    """The ``size`` bytes of ``fd`` (closed after) as immutable ``bytes``: a stage may not change what the next
    stage is given (``reading.read_exact``'s bytearray could be, through ``np.frombuffer``), and one ``os.read``
    of a regular file fills one bytes object, no copy. One byte more is asked for: a file that grew past the size
    checked is refused, never read further."""
    chunks: list[bytes] = []
    wanted = size + 1
    try:
        while wanted > 0:
            block = os.read(fd, wanted)
            if not block:
                break
            chunks.append(block)
            wanted -= len(block)
    finally:
        os.close(fd)
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if len(data) > size:
        raise OSError(errno.EFBIG, f"grew while read (past the {size:,} bytes it had when opened): not read")
    return data


def _png_bit_depth(data: bytes) -> int | None:
    # IHDR is always the first chunk: 8-byte signature, 4 length, 4 type, 4 width, 4 height, 1 bit depth.
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 24 and data[12:16] == b"IHDR":
        return data[24]
    return None


def screen_bytes(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> Screening:
    """Classify a raw sample from its header (no full decode)."""
    from PIL import Image, UnidentifiedImageError

    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
                fmt, mode = image.format or "", image.mode
                orientation = orientation_of(image)
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            return Screening(InputIssue(DECOMPRESSION_BOMB, str(exc)))
        except UnidentifiedImageError:
            return Screening(InputIssue(NOT_IMAGE, "not a recognised image format"))
        except Exception as exc:  # noqa: BLE001 - a hostile header can make a decoder raise anything
            return Screening(InputIssue(CORRUPT_IMAGE, f"{type(exc).__name__}: {exc}"))
    if width * height > max_pixels or width <= 0 or height <= 0:
        detail = f"{width}x{height} = {width * height} pixels exceeds the limit of {max_pixels}"
        return Screening(InputIssue(DECOMPRESSION_BOMB, detail), fmt, mode, width, height)
    issue = None
    bit_depth = _png_bit_depth(data)
    if mode in ("I;16", "I;16B", "I;16L", "I", "F") or (bit_depth is not None and bit_depth > 8):
        issue = InputIssue(HIGH_BIT_DEPTH_INPUT, f"{fmt} mode {mode}" + (f", {bit_depth}-bit" if bit_depth else ""))
    elif mode in ("L", "1", "LA", "La"):
        issue = InputIssue(GRAYSCALE_INPUT, f"{fmt} mode {mode}")
    elif mode in ("RGBA", "RGBa", "PA") or (mode == "P" and "transparency" in getattr(image, "info", {})):
        issue = InputIssue(ALPHA_INPUT, f"{fmt} mode {mode}")
    return Screening(issue, fmt, mode, width, height, orientation)


def full_decode_issue(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> InputIssue | None:
    """Decode fully to tell a corrupt/truncated file from a stage bug; None when the file decodes."""
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            with Image.open(io.BytesIO(data)) as image:
                if image.size[0] * image.size[1] > max_pixels:
                    return InputIssue(DECOMPRESSION_BOMB, f"{image.size[0]}x{image.size[1]} pixels")
                image.load()
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            return InputIssue(DECOMPRESSION_BOMB, str(exc))
        except Exception as exc:  # noqa: BLE001 - any decoder failure means the file is corrupt
            return InputIssue(CORRUPT_IMAGE, f"{type(exc).__name__}: {exc}")
    return None


def decode_rgb(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """The reference decode used to replay hypotheses: PIL, converted to 8-bit RGB, HWC uint8."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        if image.size[0] * image.size[1] > max_pixels:
            raise InputError(f"image of {image.size[0]}x{image.size[1]} pixels exceeds the limit of {max_pixels}")
        return np.asarray(image.convert("RGB"))


def guard_decoders(max_pixels: int) -> None:
    """Apply the pixel limit to PIL and OpenCV in this (worker) process, for stages that decode themselves."""
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = max_pixels
    # OpenCV reads this when it first decodes; the header screen above already rejects larger images.
    os.environ.setdefault("OPENCV_IO_MAX_IMAGE_PIXELS", str(max_pixels))

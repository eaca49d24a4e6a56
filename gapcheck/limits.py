"""The one place for size and bomb limits: what gapcheck refuses to allocate or decompress.

Inputs are hostile until proven otherwise: a 40-byte .npz can declare a terabyte array, a PNG can
declare a billion pixels, a zip entry can expand ten-thousand-fold. Every reader checks against
these values *before* allocating. :data:`MAX_ELEMENTS` is configurable through the environment
(``GAPCHECK_MAX_ELEMENTS``) because a big-memory machine may legitimately want more.
"""
from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gapcheck.errors import InputError

#: A zip (or .npz / torch zip checkpoint) entry may expand at most this many times its compressed size.
#: One ratio for every reader: real arrays compress 1-20x (all-zero masks up to ~1000x, deflate's ceiling);
#: bombs stack layers far beyond it.
MAX_COMPRESSION_RATIO = 1000

#: Largest image gapcheck decodes (Pillow's own decompression-bomb threshold).
MAX_IMAGE_PIXELS = 89_478_485

#: Largest file read whole into memory (inputs, checkpoints).
MAX_FILE_BYTES = 8 * 2**30

#: Largest raw sample (an image file given to preprocessing stages) read whole into memory, local or remote:
#: a photo is a few MB, and every worker holds one sample (more while stages copy it) at a time.
MAX_SAMPLE_BYTES = 512 * 2**20

_DEFAULT_MAX_ELEMENTS = 2**31  # 8 GiB of float32


def max_elements() -> int:
    """Most elements one array may have before gapcheck allocates it (``GAPCHECK_MAX_ELEMENTS`` overrides)."""
    text = os.environ.get("GAPCHECK_MAX_ELEMENTS", "").strip()
    if not text:
        return _DEFAULT_MAX_ELEMENTS
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:  # a typo must not silently fall back to the default: the user meant another limit
        from gapcheck.errors import ConfigError

        raise ConfigError(f"environment GAPCHECK_MAX_ELEMENTS must be a positive whole number of elements, got "
                          f"{text[:40]!r}")
    return value


def check_elements(count: int, what: str) -> None:
    """Raise :class:`~gapcheck.errors.InputError` when ``what`` would need more than :func:`max_elements` elements."""
    limit = max_elements()
    if count > limit:
        from gapcheck.errors import InputError

        raise InputError(f"{what} has {count:,} elements, more than the limit of {limit:,}",
                         hint="raise GAPCHECK_MAX_ELEMENTS if this machine has the memory")


def bomb_ratio_exceeded(expanded_bytes: int, compressed_bytes: int) -> bool:
    """True when an archive entry expands more than :data:`MAX_COMPRESSION_RATIO` times."""
    return expanded_bytes > MAX_COMPRESSION_RATIO * max(compressed_bytes, 1)


def check_zip_entry(info: zipfile.ZipInfo, archive_bytes: int, what: str,
                    error: type[InputError] | None = None) -> None:
    """Refuse a zip entry (of an .npz, a torch zip checkpoint) whose declared size cannot be true or is a bomb, before
    anything allocates memory for it: a stored entry larger than the whole archive, or an entry expanding more than
    :data:`MAX_COMPRESSION_RATIO` times. ``what`` names the archive ("checkpoint archive x.pt"); ``error`` is the
    :class:`~gapcheck.errors.InputError` subclass to raise."""
    from gapcheck.errors import InputError

    error = error or InputError
    if info.compress_type == zipfile.ZIP_STORED and info.file_size > archive_bytes:
        raise error(f"corrupt {what}: entry '{info.filename}' declares {info.file_size} bytes "
                    f"but the whole file has {archive_bytes}")
    if bomb_ratio_exceeded(info.file_size, info.compress_size):
        raise error(f"refusing {what}: entry '{info.filename}' declares {info.file_size} bytes "
                    f"from {info.compress_size} compressed (a zip bomb?)")


def check_input_file(path: Path, what: str, error: type[InputError] | None = None) -> Path:
    """``path`` when it is a non-empty file; otherwise ``error`` (default :class:`~gapcheck.errors.InputError`)
    saying "{what} not found", "is not a file" or "is empty", before any reader opens it."""
    from gapcheck.errors import InputError

    error = error or InputError
    if not path.exists():
        raise error(f"{what} not found: {path}")
    if not path.is_file():
        raise error(f"{what} is not a file: {path}")
    if path.stat().st_size == 0:
        raise error(f"{what} is empty (0 bytes): {path}")
    return path

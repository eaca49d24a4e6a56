"""The golden bundle on disk: a directory with ``manifest.json`` and safetensors files, verified on every load.

Layout::

    golden/
      manifest.json                 versions, hashes, factory, input specs, tolerances, preprocessing, files
      model.onnx                    the export recorded beside the reference (the deployment audit reads it)
      inputs.safetensors            one array per model input, samples stacked on axis 0
      reference_torch.safetensors   the released checkpoint's outputs (what endpoints are judged against)
      reference_onnxruntime.safetensors   ONNX Runtime's outputs for the same inputs, kept beside them

Tensors are never pickled. ``manifest.json`` lists every other file with its SHA256 and size, and every
sample's fingerprint, and :func:`load_bundle` checks all of them before anything is judged on the bundle: a
tampered, truncated or missing file or a changed sample is an :class:`~gapcheck.errors.InputError` (exit 2) that
names it. The inputs file is hashed once: where the manifest also records its safetensors header's SHA256, the
header's hash and the per-sample fingerprints are its byte-for-byte check (see :meth:`PendingBundle._check_inputs`).
The bundle's identity (``bundle_hash``) is the SHA256 of ``manifest.json``, which covers every file through their
hashes.
"""
from __future__ import annotations

import _thread
import dataclasses
import hashlib
import json
import logging
import math
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from gapcheck.errors import InputError
from gapcheck.golden.manifest import (  # noqa: F401 - the bundle format's names, re-exported
    FORMAT_VERSION,
    INPUTS_FILE,
    KIND,
    MANIFEST,
    MAX_MEMBER_BYTES,
    ONNX_FILE,
    ORT_FILE,
    TORCH_FILE,
    Manifest,
    validate_manifest,
)
from gapcheck.golden.stamps import Stamps, file_identity
from gapcheck.reading import ReadRefused, Refusal, open_checked, read_exact_unfilled

logger = logging.getLogger(__name__)

# A manifest is small; anything larger is not ours (checked before parsing).
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
MAX_ONNX_BYTES = MAX_MEMBER_BYTES


@dataclass(frozen=True)
class TensorInfo:
    """An input or output of the bundle: name, dtype and the shape of one sample (batch axis of 1 included)."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}


@dataclass(frozen=True)
class OutputTolerance:
    """The tolerance recorded for one output (``assert_close`` semantics: |err| <= atol + rtol * |golden|)."""

    rtol: float
    atol: float


@dataclass(frozen=True)
class GoldenBundle:
    """A verified bundle, loaded: the manifest plus the arrays (samples stacked on axis 0)."""

    path: Path
    manifest: dict[str, Any]
    bundle_hash: str
    inputs: dict[str, np.ndarray]
    reference: dict[str, np.ndarray]  # torch outputs
    onnxruntime: dict[str, np.ndarray]
    tolerances: dict[str, OutputTolerance] = field(default_factory=dict)
    onnx_bytes: bytes = field(default=b"", repr=False, compare=False)  # as verified: parsed without a second read
    # samples.fingerprints, every one checked against its sample when the bundle was verified (None: none recorded)
    fingerprints: list[dict[str, str]] | None = field(default=None, repr=False, compare=False)
    # how the files were verified: "sha256" (hashed now) or "stamp" (the very files hashed before: golden/stamps.py)
    verified_by: str = field(default="sha256", compare=False)
    # why no stamp may stand for these files, when stamps were asked for (a file others may write, tmpfs, ...)
    stamp_refused: str | None = field(default=None, compare=False)

    @property
    def num_samples(self) -> int:
        return int(self.manifest["samples"]["count"])

    @property
    def onnx_path(self) -> Path:
        return self.path / ONNX_FILE

    def onnx_model(self) -> Any:
        """The recorded export, parsed and checked (without importing torch: nightly never needs it)."""
        data = self.onnx_bytes
        if not data:  # a bundle built by hand: read and check it now
            entry = self.manifest["files"][ONNX_FILE]
            data = _read_member(self.path, ONNX_FILE, MAX_ONNX_BYTES, entry["bytes"])
            if hashlib.sha256(data).hexdigest() != entry["sha256"]:
                raise InputError(f"golden bundle {self.path}: file {ONNX_FILE} does not match its SHA256")
        return _parse_onnx(self.path, data)

    @property
    def input_infos(self) -> tuple[TensorInfo, ...]:
        return tuple(_info(e) for e in self.manifest["inputs"])

    @property
    def output_infos(self) -> tuple[TensorInfo, ...]:
        return tuple(_info(e) for e in self.manifest["outputs"])

    def summary(self) -> dict[str, Any]:
        """What reports show about the bundle (no arrays)."""
        m = self.manifest
        return {"path": str(self.path), "bundle_hash": self.bundle_hash, "created_at": m["created_at"],
                "samples": self.num_samples, "factory": m["model"].get("factory"),
                "checkpoint_sha256": (m["model"].get("checkpoint") or {}).get("sha256"),
                "onnx_sha256": m["onnx"]["sha256"],
                "inputs": [i.as_dict() for i in self.input_infos], "outputs": [o.as_dict() for o in self.output_infos],
                "tolerances": {k: {"rtol": v.rtol, "atol": v.atol} for k, v in self.tolerances.items()},
                "versions": m["versions"], "verified_by": self.verified_by,
                **({"stamp_refused": self.stamp_refused} if self.stamp_refused else {})}


def verified_fingerprints(manifest: dict[str, Any], inputs: dict[str, np.ndarray], count: int, where: str,
                          error: type[InputError] = InputError) -> list[dict[str, str]] | None:
    """The manifest's per-sample fingerprints (``samples.fingerprints``) once EVERY one matches its sample; None when
    none were recorded (a hand-built bundle). A file whose values were changed and its SHA256 re-hashed in the
    manifest passes the file hashes alone: a fingerprint that differs is ``error`` (exit 2) naming the first sample
    and how many differ. One SHA256 pass over the arrays already read (:func:`sample_fingerprints`); every bundle
    load runs it (``golden verify`` and nightly alike), before anything is judged on the samples."""
    recorded = (manifest.get("samples") or {}).get("fingerprints")
    if recorded is None:
        return None
    if not isinstance(recorded, list) or len(recorded) != count:
        raise error(f"{where}: the manifest records {len(recorded) if isinstance(recorded, list) else 0} sample "
                    f"fingerprints for {count} samples")
    names = sorted(inputs)
    actual = {n: sample_fingerprints(inputs[n]) for n in names}
    differ = [i for i, entry in enumerate(recorded)
              if not isinstance(entry, dict) or sorted(entry) != names
              or any(entry[n] != actual[n][i] for n in names)]
    if differ:
        raise error(f"{where}: sample {differ[0]} of {INPUTS_FILE} does not match the fingerprint its manifest "
                    f"recorded ({len(differ)} of {count} samples differ): tampered or corrupt")
    return recorded


def sample_fingerprints(array: np.ndarray) -> list[str]:
    """``gapcheck.tensors.fingerprint(array[i:i + 1])`` for every sample ``i`` of ``array`` (stacked on axis 0).

    The same digests, for a fraction of the Python work: every sample of one array shares the fingerprint's header
    (dtype, shape of one sample), which is hashed once and copied, and each sample's bytes are a slice of one
    memoryview (no array made per sample). The first sample is checked against :func:`~gapcheck.tensors.fingerprint`
    itself: should that function's form ever change, every sample is fingerprinted by it instead."""
    from gapcheck.tensors import fingerprint

    count = int(array.shape[0]) if array.ndim else 0
    if count == 0:
        return []
    if array.dtype.byteorder == ">" or not array.flags.c_contiguous:
        return [fingerprint(array[i:i + 1]) for i in range(count)]
    header = f"{array.dtype.str}|{','.join(str(d) for d in (1, *array.shape[1:]))}|".encode()
    base = hashlib.sha256(header)
    row = array[0:1].nbytes
    flat = memoryview(array.reshape(-1).view(np.uint8))  # type: ignore[arg-type]  # numpy arrays are buffers
    digests = []
    for start in (range(0, count * row, row) if row else [0] * count):
        digest = base.copy()
        digest.update(flat[start:start + row])
        digests.append(digest.hexdigest())
    if digests[0] != fingerprint(array[0:1]):
        return [fingerprint(array[i:i + 1]) for i in range(count)]
    return digests


def safetensors_header_sha256(data: bytes | bytearray | memoryview) -> str | None:
    """The SHA256 of a safetensors file's header (its 8-byte length and the JSON it counts), or None when ``data``
    is too short to hold the header its length claims."""
    if len(data) < 8:
        return None
    end = 8 + int.from_bytes(bytes(data[:8]), "little")
    if end > len(data):
        return None
    return hashlib.sha256(memoryview(data)[:end]).hexdigest()


def _parse_onnx(folder: Path, data: bytes) -> Any:
    """A verified ``model.onnx``'s bytes parsed and checked; InputError (exit 2) when they are no valid model."""
    import onnx

    try:
        model = onnx.load_model_from_string(data)
        onnx.checker.check_model(model)
    except Exception as exc:  # noqa: BLE001 - protobuf DecodeError, checker ValidationError, external data
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        raise InputError(f"golden bundle {folder}: file {ONNX_FILE} is not a valid ONNX model "
                         f"({type(exc).__name__}: {first})") from None
    return model


def _info(entry: dict[str, Any]) -> TensorInfo:
    return TensorInfo(str(entry["name"]), str(entry["dtype"]), tuple(int(d) for d in entry["shape"]))


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def text_samples_sha256(spec: str | Path) -> str:
    """SHA256 of the text samples ``spec`` names (``FILE[:field]``, or a folder of ``.txt``): a file's bytes; for a
    folder, one ``relative/path NUL sha256`` line per ``*.txt`` regular file in the order the folder reader reads
    them (sorted). The field is not part of it: the manifest names the spec beside the digest."""
    from gapcheck.text.samples import parse_source

    source = parse_source(spec)  # InputError for a missing file, a FIFO or a device: never opened
    if not source.path.is_dir():
        return _stream_sha256(source.path)
    lines = hashlib.sha256()
    for path in sorted(source.path.rglob("*.txt")):
        if path.is_file():  # what the reader opens (links followed); special files are never opened
            lines.update(f"{path.relative_to(source.path).as_posix()}\0{_stream_sha256(path)}\n"
                         .encode("utf-8", "surrogateescape"))
    return lines.hexdigest()


def _stream_sha256(path: Path) -> str:
    from gapcheck.text.samples import open_regular

    digest = hashlib.sha256()
    with open_regular(path, f"text samples {path.name}") as handle:  # a FIFO swapped in since is refused here too
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_member(folder: Path, name: str, max_bytes: int, expected_bytes: int | None = None) -> bytes:
    """A bundle file's bytes, read once: a regular file in the folder itself, never through a symbolic link.

    A link could point anywhere (another user's file, a device, a file that changes between the hash and
    the parse); the bytes hashed are the bytes parsed. The kind and size are checked before anything is read.
    """
    fd, size = _open_member(folder, name, max_bytes, expected_bytes)
    return bytes(_read_opened(folder, name, fd, size))


def _open_member(folder: Path, name: str, max_bytes: int, expected_bytes: int | None = None) -> tuple[int, int]:
    """A bundle file opened for :func:`_read_opened` (no symbolic link followed) and its size, its kind and size
    checked on the descriptor (:func:`gapcheck.reading.open_checked`): InputError naming the file otherwise (nothing
    is left open then)."""
    try:
        return open_checked(folder / name, max_bytes=max_bytes, expected_bytes=expected_bytes)
    except FileNotFoundError:
        raise InputError(f"golden bundle {folder}: file {name} is missing") from None
    except ReadRefused as exc:
        raise _refused(folder, name, exc) from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the name (the schema refuses it first)
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise InputError(f"golden bundle {folder}: file {ascii(name)} cannot be read ({reason})") from None


def _refused(folder: Path, name: str, exc: ReadRefused) -> InputError:
    """The bundle's words for a file :mod:`gapcheck.reading` refused."""
    where = f"golden bundle {folder}: file {name}"
    if exc.reason is Refusal.LINK:
        return InputError(f"{where} is a symbolic link; a bundle holds its files itself")
    if exc.reason is Refusal.NOT_REGULAR:
        return InputError(f"{where} is {'a folder' if stat.S_ISDIR(exc.mode) else 'not a regular file'}")
    if exc.reason is Refusal.SIZE:
        return InputError(f"{where} has {exc.size} bytes, the manifest says {exc.expected} (truncated or replaced)")
    if exc.reason is Refusal.TOO_LARGE:
        return InputError(f"{where} is larger than {exc.limit} bytes")
    return InputError(f"{where} changed while it was read")  # GREW, SHRANK (no owners are asked for)


def _read_opened(folder: Path, name: str, fd: int, size: int) -> memoryview:
    """The bytes of a file :func:`_open_member` opened (the descriptor is closed), read straight into one buffer
    (:func:`gapcheck.reading.read_exact_unfilled`: not zero-filled under the GIL first, as a night's readiness and
    first requests run beside this read). The tensors parsed from it are views of it (no copy), writable as a
    loader's arrays always were."""
    try:
        return read_exact_unfilled(fd, size)
    except ReadRefused as exc:
        raise _refused(folder, name, exc) from None
    except OSError as exc:
        raise InputError(f"golden bundle {folder}: file {name} cannot be read ({exc.strerror or exc})") from None


def _parse_manifest(folder: Path) -> tuple[dict[str, Any], Manifest, str]:
    """The manifest as read, as validated, and its SHA256 — before any other file is opened."""
    if not folder.is_dir():
        raise InputError(f"golden bundle {folder} is not a directory")
    data = _read_member(folder, MANIFEST, MAX_MANIFEST_BYTES)
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"golden bundle {folder}: {MANIFEST} is not valid JSON ({exc})") from None
    except RecursionError:
        raise InputError(f"golden bundle {folder}: {MANIFEST} is nested too deeply to be a golden manifest") from None
    return raw, validate_manifest(folder, raw), hashlib.sha256(data).hexdigest()


def read_manifest(folder: Path) -> tuple[dict[str, Any], str]:
    """The parsed manifest (checked against the schema) and its SHA256; InputError saying what is wrong."""
    raw, _, digest = _parse_manifest(folder)
    return raw, digest


def verify_files(folder: Path, manifest: dict[str, Any] | Manifest) -> dict[str, memoryview]:
    """Check every listed file's size and SHA256; InputError naming the first bad file. Returns the files' bytes
    (what was hashed is what gets parsed)."""
    checked = manifest if isinstance(manifest, Manifest) else validate_manifest(folder, manifest)
    return {name: _verified_member(folder, name, entry.bytes, entry.sha256)
            for name, entry in sorted(checked.files.items())}


def _verified_member(folder: Path, name: str, size: int, sha256: str) -> memoryview:
    fd, read_size = _open_member(folder, name, MAX_MEMBER_BYTES, size)
    data = _read_opened(folder, name, fd, read_size)
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise InputError(f"golden bundle {folder}: file {name} does not match its SHA256 in {MANIFEST} "
                         f"(tampered or corrupt): expected {sha256}, got {actual}")
    return data


# safetensors' dtype names: the numpy dtype (little-endian, as the format stores them), or the item size of those
# numpy cannot hold (a file may carry them beside ours: their extent is still checked).
_SAFETENSORS_DTYPES: dict[str, np.dtype] = {name: np.dtype(code) for name, code in (
    ("BOOL", "?"), ("U8", "u1"), ("I8", "i1"), ("U16", "<u2"), ("I16", "<i2"), ("U32", "<u4"), ("I32", "<i4"),
    ("U64", "<u8"), ("I64", "<i8"), ("F16", "<f2"), ("F32", "<f4"), ("F64", "<f8"), ("C64", "<c8"))}
_OTHER_ITEM_SIZES = {"BF16": 2, "F8_E5M2": 1, "F8_E4M3": 1}
MAX_SAFETENSORS_HEADER = 100_000_000  # safetensors' own limit


def _safetensors_header(data: bytes | bytearray | memoryview) -> tuple[dict[str, Any], int]:
    """The header of a safetensors file and where its data starts; ValueError saying what is wrong.

    The format's own rules, as its reader checks them: an 8-byte little-endian header length within the file
    (and at most 100 MB), a JSON object, every tensor's ``data_offsets`` inside the data, no gap nor overlap
    between tensors, and the data ending exactly where the file does."""
    if len(data) < 8:
        raise ValueError("the file is shorter than a safetensors header")
    length = int.from_bytes(data[:8], "little")
    if length > MAX_SAFETENSORS_HEADER or 8 + length > len(data):
        raise ValueError(f"its header claims {length} bytes, the file holds {len(data)}")
    try:
        header = json.loads(bytes(data[8:8 + length]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"its header is not JSON ({type(exc).__name__})") from None
    if not isinstance(header, dict):
        raise ValueError("its header is not a JSON object")
    return header, 8 + length


def _tensor_extents(header: dict[str, Any], size: int) -> dict[str, tuple[str, tuple[int, ...], int, int]]:
    """Every tensor's (dtype, shape, begin, end) from a safetensors header, checked against ``size`` data bytes."""
    extents = {}
    for key, entry in header.items():
        if key == "__metadata__":
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                raise ValueError("its __metadata__ is not an object of strings")
            continue
        if not isinstance(entry, dict):
            raise ValueError(f"tensor {key!r} is not described by an object")
        dtype, shape, offsets = str(entry.get("dtype")), entry.get("shape"), entry.get("data_offsets")
        item = _SAFETENSORS_DTYPES[dtype].itemsize if dtype in _SAFETENSORS_DTYPES else _OTHER_ITEM_SIZES.get(dtype)
        if item is None or not isinstance(entry.get("dtype"), str):
            raise ValueError(f"tensor {key!r} has an unknown dtype {dtype!r}")
        if (not isinstance(shape, list) or len(shape) > 64
                or not all(type(d) is int and 0 <= d < 2**62 for d in shape)):
            raise ValueError(f"tensor {key!r} has no valid shape")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(type(o) is int and 0 <= o <= size for o in offsets) or offsets[0] > offsets[1]):
            raise ValueError(f"tensor {key!r} has offsets outside the file's {size} data bytes")
        if math.prod(shape) * item != offsets[1] - offsets[0]:
            raise ValueError(f"tensor {key!r}: {dtype} {shape} is not {offsets[1] - offsets[0]} bytes")
        extents[key] = (dtype, tuple(shape), offsets[0], offsets[1])
    end = 0
    for key, (_, _, begin, stop) in sorted(extents.items(), key=lambda kv: (kv[1][2], kv[1][3])):
        if begin != end:
            raise ValueError(f"tensor {key!r} does not start where the one before it ends (a gap or an overlap)")
        end = stop
    if end != size:
        raise ValueError(f"its tensors hold {end} bytes, the file {size}")
    return extents


def _load_tensors(folder: Path, name: str, data: bytes | bytearray | memoryview, expected: tuple[TensorInfo, ...],
                  count: int) -> dict[str, np.ndarray]:
    """The tensors ``expected`` from a safetensors file's bytes, checked against the manifest; InputError otherwise.

    The arrays are read-only views of ``data`` (the bytes that were hashed), not copies: at 12 MB of golden inputs
    a copy costs as much as a few requests. ``safetensors.numpy.load`` copies every tensor first; the checks are
    the format's own (:func:`_safetensors_header`, :func:`_tensor_extents`)."""
    try:
        header, start = _safetensors_header(data)
        extents = _tensor_extents(header, len(data) - start)
    except ValueError as exc:
        raise InputError(f"golden bundle {folder}: file {name} cannot be read: {exc}") from None
    arrays = {}
    for info in expected:
        extent = extents.get(info.name)
        want = (count, *info.shape[1:]) if info.shape else (count,)
        if extent is None:
            raise InputError(f"golden bundle {folder}: file {name} has no tensor {info.name!r}")
        dtype, shape, begin, _ = extent
        stored = _SAFETENSORS_DTYPES.get(dtype)
        if shape != want or stored is None or stored.name != info.dtype:
            raise InputError(f"golden bundle {folder}: file {name}: tensor {info.name!r} is "
                             f"{stored.name if stored is not None else dtype} {list(shape)}, the manifest says "
                             f"{info.dtype} {list(want)}")
        arrays[info.name] = np.frombuffer(data, dtype=stored, count=math.prod(shape),
                                          offset=start + begin).reshape(shape)
    return arrays


def load_bundle(path: str | Path) -> GoldenBundle:
    """Verify every file of the bundle at ``path`` and load it (InputError, exit 2, naming the file otherwise).

    The manifest is checked against its schema before any other file is opened; every file is read once,
    its size checked first; the SHA256 of the files (hashlib runs without the GIL) is computed beside the
    parsing of the tensors. See :func:`open_bundle` to use the time the hashing takes.
    """
    return open_bundle(path).result()


def open_bundle(path: str | Path, *, stamps: Stamps | None = None) -> "PendingBundle":
    """The bundle at ``path`` with its manifest checked and every listed file opened and its size checked
    (InputError now); the files are read, the inputs parsed and every SHA256 checked on a thread: see
    :class:`PendingBundle`. With ``stamps`` (:mod:`gapcheck.golden.stamps`; the nightly run's), a bundle whose open
    files are the very files verified before is not hashed again, and a bundle verified in full is stamped."""
    started_ns = time.time_ns()  # before any file is looked at: what changes after it is never stamped
    folder = Path(path)
    raw, manifest, bundle_hash = _parse_manifest(folder)
    opened: dict[str, tuple[int, int]] = {}
    try:
        for name, entry in sorted(manifest.files.items()):
            opened[name] = _open_member(folder, name, MAX_MEMBER_BYTES, entry.bytes)
        refused = _stamp_refusal(folder, opened) if stamps is not None else None
        stamping = _Stamping(stamps, folder, bundle_hash, {n: file_identity(fd) for n, (fd, _) in opened.items()},
                             started_ns) if stamps is not None and refused is None else None
    except BaseException:
        for fd, _ in opened.values():
            os.close(fd)
        raise
    return PendingBundle(folder, raw, manifest, bundle_hash, opened, stamping, refused)


def _stamp_refusal(folder: Path, opened: dict[str, tuple[int, int]]) -> str | None:
    """Why a stamp may not stand for the open files (the first file :meth:`Stamps.refusal` refuses), or None; said
    in the reports (``golden.stamp_refused``) and logged: a user sees why every night hashes the bundle."""
    for name, (fd, _) in sorted(opened.items()):
        refusal = Stamps.refusal(fd)
        if refusal is not None:
            logger.info("golden bundle %s: every file is hashed, no verification stamp: file %s: %s", folder, name,
                        refusal)
            return f"file {name}: {refusal}"
    return None


@dataclass(frozen=True)
class _Stamping:
    """A bundle's stamp: looked for once its files are open, kept once they are verified in full."""

    stamps: Stamps
    folder: Path
    bundle_hash: str
    identities: dict[str, list[int]]
    started_ns: int

    def holds(self) -> bool:
        return self.stamps.holds(self.folder, self.bundle_hash, self.identities)

    def record(self) -> None:
        self.stamps.record(self.folder, self.bundle_hash, self.identities, self.started_ns)


class PendingBundle:
    """A bundle whose manifest passed its schema and whose files are open, being read and checked on a thread.

    Until :meth:`result` returns, it offers what the manifest says (hash, samples, names, tolerances),
    :attr:`unverified_inputs`, parsed from the very bytes being hashed (for *sending* while the hashes run,
    never for judging), and :meth:`onnx_model`, the export once its own file matched its SHA256 (what the
    deployment audit reads; its findings are reported only with the verified bundle). Every comparison,
    record or report waits on :meth:`result`, which returns the verified :class:`GoldenBundle` or raises the
    InputError naming the bad file (a wrong hash is reported as such even when the file also fails to parse).

    The thread reads the small files first (the export and the references: their hashes are quick), then
    the inputs, which it parses before hashing them, so that readiness and the first requests do not wait
    for the reads, the parse or the hashes.
    """

    def __init__(self, folder: Path, raw: dict[str, Any], manifest: Manifest, bundle_hash: str,
                 opened: dict[str, tuple[int, int]], stamping: _Stamping | None = None,
                 stamp_refused: str | None = None) -> None:
        import threading

        self.path, self.manifest, self.bundle_hash = folder, raw, bundle_hash
        self._checked = manifest
        self._done = threading.Event()
        self._inputs_read = threading.Event()
        self._onnx_read = threading.Event()
        self._once = threading.Lock()  # the audit's thread and the inference's may ask at once
        self._bundle: GoldenBundle | None = None
        self._error: InputError | None = None
        self._contents: dict[str, memoryview] = {}
        self._hashes: dict[str, str] = {}
        self._failure: InputError | None = None  # a file that could not be read
        self._inputs: dict[str, np.ndarray] | None = None
        self._inputs_error: InputError | None = None  # the inputs file does not parse
        self._header_error: InputError | None = None  # the inputs file's header is not the recorded one
        self._samples_error: InputError | None = None  # a sample does not match its recorded fingerprint
        self._fingerprints: list[dict[str, str]] | None = None  # as recorded, every one checked
        self._onnx_bytes = b""
        self._stamping = stamping
        self.verified_by = "sha256"  # "stamp": these very files were verified before (gapcheck.golden.stamps)
        self.stamp_refused = stamp_refused  # why no stamp may stand for these files (gapcheck.golden.stamps)
        self._callbacks: list[Callable[[], None]] = []
        self._callbacks_lock = threading.Lock()
        self._finished = False
        # Started without waiting for it to run (threading.Thread.start blocks until the new thread has been
        # scheduled: milliseconds on a busy machine, on the caller's path). Like a daemon thread, nothing joins it:
        # every waiter waits on its events, which _work always sets, and its errors are kept for them.
        _thread.start_new_thread(self._work, (opened,))

    def _work(self, opened: dict[str, tuple[int, int]]) -> None:
        # The inputs last: the sends need them parsed; everything else is small.
        order = sorted(opened, key=lambda name: (name == INPUTS_FILE, name))
        try:
            stamped = self._stamping is not None and self._stamping.holds()
            taken = []  # the files taken on the stamp
            for name in order:
                fd, size = opened.pop(name)
                data, after = self._read_watched(name, fd, size, stamped)
                self._contents[name] = data
                # The stamp stands for a file only if the file is still the one stamped once its bytes are in: a
                # write between the open and the end of the read (a watcher that rewrites it then) changed its
                # change time, and its bytes are hashed instead.
                if stamped and after == cast(_Stamping, self._stamping).identities[name]:
                    self._take_stamped(name, data)
                    taken.append(name)
                elif name == INPUTS_FILE:
                    self._check_inputs(data)
                else:
                    self._hashes[name] = hashlib.sha256(data).hexdigest()  # hashlib runs without the GIL
                if name == ONNX_FILE:
                    self._onnx_bytes = bytes(data)
                    self._onnx_read.set()
            if taken:
                self.verified_by = "stamp"
            elif self._stamping is not None and self._verified_in_full():
                self._stamping.record()
        except BaseException as exc:  # noqa: BLE001 - every waiter must wake up with an answer
            self._failure = exc if isinstance(exc, InputError) else InputError(
                f"golden bundle {self.path}: its files cannot be read ({type(exc).__name__}: {exc})")
        finally:
            for fd, _ in opened.values():
                os.close(fd)
            self._inputs_read.set()
            self._onnx_read.set()
            self._done.set()
        with self._callbacks_lock:
            self._finished = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def _read_watched(self, name: str, fd: int, size: int, stamped: bool) -> tuple[memoryview, list[int] | None]:
        """The file's bytes (its descriptor closed), and, when a stamp may stand for it, its identity once they are
        read (on a second descriptor of the same open file)."""
        watch = os.dup(fd) if stamped else None
        try:
            data = _read_opened(self.path, name, fd, size)
            return data, file_identity(watch) if watch is not None else None
        finally:
            if watch is not None:
                os.close(watch)

    def _take_stamped(self, name: str, data: memoryview) -> None:
        """A file of a stamped bundle: the very file verified before, so its recorded hashes stand for it."""
        self._hashes[name] = self._checked.files[name].sha256
        if name == INPUTS_FILE:
            self._parse_inputs(data)
            self._fingerprints = (self.manifest.get("samples") or {}).get("fingerprints")

    def _verified_in_full(self) -> bool:
        """Every file read and matching its hashes, the inputs parsed and every sample's fingerprint checked."""
        return (self._problem() is None and self._inputs is not None and self._inputs_error is None
                and self._samples_error is None)

    def when_checked(self, callback: Callable[[], None]) -> None:
        """``callback()`` once every file is read and hashed (passed or not: it asks :meth:`result`), on the thread
        that checked them, or on a new one when that is already over. It must not raise (it is nobody's caller):
        keep its outcome, e.g. in a Future."""
        import threading

        with self._callbacks_lock:
            if not self._finished:
                self._callbacks.append(callback)
                return
        threading.Thread(target=callback, name="golden-checked", daemon=True).start()

    def _parse_inputs(self, data: memoryview) -> None:
        try:
            self._inputs = _load_tensors(self.path, INPUTS_FILE, data, self.input_infos, self.num_samples)
        except InputError as exc:
            self._inputs_error = exc
        finally:
            self._inputs_read.set()

    def _check_inputs(self, data: memoryview) -> None:
        """The inputs file parsed (the sends may start), then checked byte for byte, and every sample against its
        recorded fingerprint.

        Where the manifest records the file's header SHA256 (``files[inputs].header_sha256``) and a fingerprint for
        every sample, those cover every byte of the file: the header (tensor names, dtypes, shapes, offsets and
        metadata) by its hash, the data by the fingerprints, once the parse has shown that the data region is
        exactly the inputs' samples end to end (no gap, nothing before, between or after them, no other tensor).
        The whole file is then not hashed as well: its bytes are hashed once, not twice. Otherwise (an older
        bundle, a tensor beyond the inputs) the whole file's SHA256 is checked, then the fingerprints."""
        entry = self._checked.files[INPUTS_FILE]
        self._parse_inputs(data)
        if entry.header_sha256 is None or self._checked.samples.fingerprints is None or not self._only_inputs(data):
            self._hashes[INPUTS_FILE] = hashlib.sha256(data).hexdigest()
            if self._hashes[INPUTS_FILE] != entry.sha256:
                return  # said as a wrong SHA256; the samples are not looked at
        else:
            actual = safetensors_header_sha256(data) or "(no complete header)"
            if actual != entry.header_sha256:
                self._header_error = InputError(
                    f"golden bundle {self.path}: file {INPUTS_FILE} does not match its header SHA256 in {MANIFEST} "
                    f"(tampered or corrupt): expected {entry.header_sha256}, got {actual}")
                return
        if self._inputs is not None:
            try:
                self._fingerprints = verified_fingerprints(self.manifest, self._inputs, self.num_samples,
                                                           f"golden bundle {self.path}")
            except InputError as exc:
                self._samples_error = exc

    def _only_inputs(self, data: memoryview) -> bool:
        """The parsed file holds the manifest's inputs and no other tensor (whose bytes no fingerprint covers)."""
        if self._inputs is None:
            return True  # unparseable: the header's hash is checked, the parse error said after it
        header, _ = _safetensors_header(data)
        return {k for k in header if k != "__metadata__"} == set(self._inputs)

    def _problem(self) -> InputError | None:
        """Once every file is done: the first file (in name order) whose SHA256 is wrong, else a failed read."""
        for name, entry in sorted(self._checked.files.items()):
            actual = self._hashes.get(name)
            if actual is not None and actual != entry.sha256:
                return InputError(f"golden bundle {self.path}: file {name} does not match its SHA256 in {MANIFEST} "
                                  f"(tampered or corrupt): expected {entry.sha256}, got {actual}")
            if name == INPUTS_FILE and self._header_error is not None:
                return self._header_error
        return self._failure

    @property
    def unverified_inputs(self) -> dict[str, np.ndarray]:
        """The inputs parsed from the bytes being hashed: to send, never to judge (waits for the read and parse;
        a file that cannot be read or parsed raises, a wrong hash first)."""
        self._inputs_read.wait()
        if self._inputs is None:
            self._done.wait()
            raise self._problem() or self._inputs_error or InputError(
                f"golden bundle {self.path}: file {INPUTS_FILE} cannot be read")
        return self._inputs

    def onnx_model(self) -> Any:
        """The recorded export once its own file matched its SHA256 in the manifest (the rest may still be
        verifying): InputError naming the file otherwise, or when it is no valid ONNX model."""
        self._onnx_read.wait()
        entry = self._checked.files[ONNX_FILE]
        actual = self._hashes.get(ONNX_FILE)
        if actual is None:  # its read failed
            self._done.wait()
            raise self._problem() or InputError(f"golden bundle {self.path}: file {ONNX_FILE} cannot be read")
        if actual != entry.sha256:
            raise InputError(f"golden bundle {self.path}: file {ONNX_FILE} does not match its SHA256 in {MANIFEST} "
                             f"(tampered or corrupt): expected {entry.sha256}, got {actual}")
        return _parse_onnx(self.path, self._onnx_bytes)

    @property
    def num_samples(self) -> int:
        return self._checked.samples.count

    @property
    def input_infos(self) -> tuple[TensorInfo, ...]:
        return tuple(TensorInfo(e.name, e.dtype, tuple(e.shape)) for e in self._checked.inputs)

    @property
    def output_infos(self) -> tuple[TensorInfo, ...]:
        return tuple(TensorInfo(e.name, e.dtype, tuple(e.shape)) for e in self._checked.outputs)

    @property
    def tolerances(self) -> dict[str, OutputTolerance]:
        return {k: OutputTolerance(v.rtol, v.atol) for k, v in self._checked.tolerances.outputs.items()}

    def result(self) -> GoldenBundle:
        """The verified bundle (waits for the hashes; the same InputError on every call when one is wrong)."""
        with self._once:
            if self._bundle is None and self._error is None:
                self._done.wait()
                try:
                    problem = self._problem() or self._inputs_error or self._samples_error
                    if problem is not None:
                        raise problem
                    assert self._inputs is not None
                    self._bundle = dataclasses.replace(
                        _assemble(self.path, self.manifest, self._checked, self.bundle_hash, self._contents,
                                  self._inputs, self._fingerprints), verified_by=self.verified_by,
                        stamp_refused=self.stamp_refused)
                except InputError as exc:
                    self._error = exc
                self._contents = {}
        if self._error is not None:
            raise self._error
        assert self._bundle is not None
        return self._bundle


def refuse_nan_reference(reference: dict[str, np.ndarray], where: str) -> None:
    """InputError when a reference output holds a NaN: a golden answer of NaN passes a deployment that answers NaN
    there (comparisons take NaN for NaN), so it can judge nothing (the attacker review: an all-NaN bundle passed a
    NaN-answering deployment every night). Infinities stay: -inf is a masked logit's honest answer."""
    for name, array in reference.items():
        if array.dtype.kind not in "fc":
            continue
        nan = np.isnan(array)
        if nan.any():
            samples = np.flatnonzero(nan.reshape(len(array), -1).any(axis=1)) if array.ndim else np.array([0])
            shown = ", ".join(str(int(i)) for i in samples[:5]) + (", ..." if len(samples) > 5 else "")
            raise InputError(f"{where}: the reference output {name!r} holds NaN ({int(nan.sum())} of {array.size} "
                             f"values, samples {shown}): a golden answer of NaN passes a deployment that answers NaN",
                             hint="record from inputs the checkpoint answers with numbers (are the inputs NaN or "
                                  "infinite? is the checkpoint itself broken?)")


def _assemble(folder: Path, raw: dict[str, Any], manifest: Manifest, bundle_hash: str,
              contents: dict[str, memoryview], parsed_inputs: dict[str, np.ndarray],
              fingerprints: list[dict[str, str]] | None) -> GoldenBundle:
    count = manifest.samples.count
    outputs = tuple(TensorInfo(e.name, e.dtype, tuple(e.shape)) for e in manifest.outputs)
    tolerances = {k: OutputTolerance(v.rtol, v.atol) for k, v in manifest.tolerances.outputs.items()}
    ort_reference = _load_tensors(folder, ORT_FILE, contents[ORT_FILE], outputs, count) if ORT_FILE in contents else {}
    reference = _load_tensors(folder, TORCH_FILE, contents[TORCH_FILE], outputs, count)
    refuse_nan_reference(reference, f"golden bundle {folder}: file {TORCH_FILE}")
    return GoldenBundle(
        path=folder, manifest=raw, bundle_hash=bundle_hash,
        inputs=parsed_inputs,
        reference=reference,
        onnxruntime=ort_reference, tolerances=tolerances, onnx_bytes=bytes(contents[ONNX_FILE]),
        fingerprints=fingerprints,
    )

"""The golden bundle on disk: a directory with ``manifest.json`` and safetensors files, verified on every load.

Layout::

    golden/
      manifest.json                 versions, hashes, factory, input specs, tolerances, preprocessing, files
      model.onnx                    the export recorded beside the reference (the deployment audit reads it)
      inputs.safetensors            one array per model input, samples stacked on axis 0
      reference_torch.safetensors   the released checkpoint's outputs (what endpoints are judged against)
      reference_onnxruntime.safetensors   ONNX Runtime's outputs for the same inputs, kept beside them

Tensors are never pickled. ``manifest.json`` lists every other file with its SHA256 and size, and
:func:`load_bundle` checks all of them before parsing any: a tampered, truncated or missing file is an
:class:`~gapcheck.errors.InputError` (exit 2) that names the file. The bundle's identity (``bundle_hash``)
is the SHA256 of ``manifest.json``, which covers every file through their hashes.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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

    @property
    def num_samples(self) -> int:
        return int(self.manifest["samples"]["count"])

    @property
    def onnx_path(self) -> Path:
        return self.path / ONNX_FILE

    def onnx_model(self) -> Any:
        """The recorded export, parsed and checked (without importing torch: nightly never needs it)."""
        import onnx

        data = self.onnx_bytes
        if not data:  # a bundle built by hand: read and check it now
            entry = self.manifest["files"][ONNX_FILE]
            data = _read_member(self.path, ONNX_FILE, MAX_ONNX_BYTES, entry["bytes"])
            if hashlib.sha256(data).hexdigest() != entry["sha256"]:
                raise InputError(f"golden bundle {self.path}: file {ONNX_FILE} does not match its SHA256")
        try:
            model = onnx.load_model_from_string(data)
            onnx.checker.check_model(model)
        except Exception as exc:  # noqa: BLE001 - protobuf DecodeError, checker ValidationError, external data
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            raise InputError(f"golden bundle {self.path}: file {ONNX_FILE} is not a valid ONNX model "
                             f"({type(exc).__name__}: {first})") from None
        return model

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
                "versions": m["versions"]}


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
    path = folder / name
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise InputError(f"golden bundle {folder}: file {name} is missing") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the name (the schema refuses it first)
        if isinstance(exc, OSError) and os.path.islink(path):
            raise InputError(f"golden bundle {folder}: file {name} is a symbolic link; a bundle holds its "
                             "files itself") from None
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise InputError(f"golden bundle {folder}: file {ascii(name)} cannot be read ({reason})") from None
    try:
        info = os.fstat(fd)  # before fdopen: a folder in a file's place is refused here, not as IsADirectoryError
        if not stat.S_ISREG(info.st_mode):
            kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise InputError(f"golden bundle {folder}: file {name} is {kind}")
        if expected_bytes is not None and info.st_size != expected_bytes:
            raise InputError(f"golden bundle {folder}: file {name} has {info.st_size} bytes, the manifest says "
                             f"{expected_bytes} (truncated or replaced)")
        if info.st_size > max_bytes:
            raise InputError(f"golden bundle {folder}: file {name} is larger than {max_bytes} bytes")
        with os.fdopen(fd, "rb") as handle:
            fd = -1
            data = handle.read(info.st_size + 1)
    except OSError as exc:
        raise InputError(f"golden bundle {folder}: file {name} cannot be read ({exc.strerror or exc})") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) != info.st_size:
        raise InputError(f"golden bundle {folder}: file {name} changed while it was read")
    return data


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


def verify_files(folder: Path, manifest: dict[str, Any] | Manifest) -> dict[str, bytes]:
    """Check every listed file's size and SHA256; InputError naming the first bad file. Returns the files' bytes
    (what was hashed is what gets parsed)."""
    checked = manifest if isinstance(manifest, Manifest) else validate_manifest(folder, manifest)
    return {name: _verified_member(folder, name, entry.bytes, entry.sha256)
            for name, entry in sorted(checked.files.items())}


def _verified_member(folder: Path, name: str, size: int, sha256: str) -> bytes:
    data = _read_member(folder, name, MAX_MEMBER_BYTES, size)
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise InputError(f"golden bundle {folder}: file {name} does not match its SHA256 in {MANIFEST} "
                         f"(tampered or corrupt): expected {sha256}, got {actual}")
    return data


def _load_tensors(folder: Path, name: str, data: bytes, expected: tuple[TensorInfo, ...],
                  count: int) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load

    try:
        arrays = load(data)
    except (SafetensorError, OSError, ValueError) as exc:
        raise InputError(f"golden bundle {folder}: file {name} cannot be read: {exc}") from None
    for info in expected:
        array = arrays.get(info.name)
        want = (count, *info.shape[1:]) if info.shape else (count,)
        if array is None:
            raise InputError(f"golden bundle {folder}: file {name} has no tensor {info.name!r}")
        if tuple(array.shape) != want or str(array.dtype) != info.dtype:
            raise InputError(f"golden bundle {folder}: file {name}: tensor {info.name!r} is {array.dtype} "
                             f"{list(array.shape)}, the manifest says {info.dtype} {list(want)}")
    return {info.name: arrays[info.name] for info in expected}


def load_bundle(path: str | Path) -> GoldenBundle:
    """Verify every file of the bundle at ``path`` and load it (InputError, exit 2, naming the file otherwise).

    The manifest is checked against its schema before any other file is opened; every file is read once,
    its size checked first; the SHA256 of the files (hashlib runs without the GIL) is computed beside the
    parsing of the tensors. See :func:`open_bundle` to use the time the hashing takes.
    """
    return open_bundle(path).result()


def open_bundle(path: str | Path) -> "PendingBundle":
    """The bundle at ``path`` with its manifest checked (InputError now) and its files read, their SHA256 being
    checked on a thread: see :class:`PendingBundle`."""
    folder = Path(path)
    raw, manifest, bundle_hash = _parse_manifest(folder)
    contents = {name: _read_member(folder, name, MAX_MEMBER_BYTES, entry.bytes)
                for name, entry in sorted(manifest.files.items())}
    return PendingBundle(folder, raw, manifest, bundle_hash, contents)


class PendingBundle:
    """A bundle whose manifest passed its schema and whose files are read, their SHA256 checked on a thread.

    Until :meth:`result` returns, it offers what the manifest says (hash, samples, names, tolerances) and
    :attr:`unverified_inputs`, parsed from the very bytes being hashed: for *sending* while the hashes run,
    never for judging — every comparison, record or report waits on :meth:`result`, which returns the
    verified :class:`GoldenBundle` or raises the InputError naming the bad file (a wrong hash is reported
    as such even when the file also fails to parse).
    """

    def __init__(self, folder: Path, raw: dict[str, Any], manifest: Manifest, bundle_hash: str,
                 contents: dict[str, bytes]) -> None:
        import threading

        self.path, self.manifest, self.bundle_hash = folder, raw, bundle_hash
        self._checked, self._contents = manifest, contents
        self._done = threading.Event()
        self._once = threading.Lock()  # the audit's thread and the inference's may ask at once
        self._bundle: GoldenBundle | None = None
        self._error: InputError | None = None
        self._hashes: dict[str, str] = {}
        worker = threading.Thread(target=self._hash, name="golden-sha256", daemon=True)
        worker.start()
        try:
            self.unverified_inputs = _load_tensors(folder, INPUTS_FILE, contents[INPUTS_FILE], self.input_infos,
                                                   self.num_samples)
        except InputError:
            self._done.wait()
            self._raise_bad_hash()
            raise

    def _hash(self) -> None:
        self._hashes = {name: hashlib.sha256(data).hexdigest() for name, data in self._contents.items()}
        self._done.set()

    def _raise_bad_hash(self) -> None:
        for name, entry in sorted(self._checked.files.items()):
            if self._hashes[name] != entry.sha256:
                raise InputError(f"golden bundle {self.path}: file {name} does not match its SHA256 in {MANIFEST} "
                                 f"(tampered or corrupt): expected {entry.sha256}, got {self._hashes[name]}")

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
                    self._raise_bad_hash()
                    self._bundle = _assemble(self.path, self.manifest, self._checked, self.bundle_hash,
                                             self._contents, self.unverified_inputs)
                except InputError as exc:
                    self._error = exc
                self._contents = {}
        if self._error is not None:
            raise self._error
        assert self._bundle is not None
        return self._bundle


def _assemble(folder: Path, raw: dict[str, Any], manifest: Manifest, bundle_hash: str,
              contents: dict[str, bytes], parsed_inputs: dict[str, np.ndarray]) -> GoldenBundle:
    count = manifest.samples.count
    outputs = tuple(TensorInfo(e.name, e.dtype, tuple(e.shape)) for e in manifest.outputs)
    tolerances = {k: OutputTolerance(v.rtol, v.atol) for k, v in manifest.tolerances.outputs.items()}
    ort_reference = _load_tensors(folder, ORT_FILE, contents[ORT_FILE], outputs, count) if ORT_FILE in contents else {}
    return GoldenBundle(
        path=folder, manifest=raw, bundle_hash=bundle_hash,
        inputs=parsed_inputs,
        reference=_load_tensors(folder, TORCH_FILE, contents[TORCH_FILE], outputs, count),
        onnxruntime=ort_reference, tolerances=tolerances, onnx_bytes=contents[ONNX_FILE],
    )

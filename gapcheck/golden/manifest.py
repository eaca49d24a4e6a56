"""The schema of a golden bundle's ``manifest.json``, checked before any other file of the bundle is touched.

A manifest comes from disk and may have been edited by hand or by an attacker: every field a loader
reads is typed here (pydantic, strict), so a wrong type, a missing key, a non-finite number, a NUL or
control character in a name, an empty bundle or a file size beyond what a bundle may hold is an
:class:`~gapcheck.errors.InputError` (exit 2) that names the field — never an ``AttributeError``,
``OverflowError`` or ``RecursionError`` deep in the loader (exit 3). Keys this version does not read
are allowed (a newer recorder may add some); the ones it reads are not optional.
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError, field_validator

from gapcheck.errors import InputError
from gapcheck.inputs import MAX_NAME_CHARS, NAME_RULE, is_valid_name

MANIFEST = "manifest.json"
KIND = "gapcheck-golden"
FORMAT_VERSION = 1
INPUTS_FILE = "inputs.safetensors"
TORCH_FILE = "reference_torch.safetensors"
ORT_FILE = "reference_onnxruntime.safetensors"
ONNX_FILE = "model.onnx"
REQUIRED_FILES = (INPUTS_FILE, TORCH_FILE, ONNX_FILE)
MAX_MEMBER_BYTES = 2 * 1024**3  # protobuf's own limit for one message; no bundle file may be larger
MAX_SAMPLES = 10**8
MAX_DIMS = 32
# The dtypes safetensors' numpy loader reads (and a Triton endpoint serves).
DTYPES = frozenset({"bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64", "float16",
                    "float32", "float64"})
_HEX64 = r"^[0-9a-f]{64}$"
_MAX_PROBLEMS = 3


def _printable_name(value: str) -> str:
    # the input specs' rule (gapcheck.inputs), so that a name a command took is one the manifest takes
    if not is_valid_name(value):
        raise ValueError(f"must be {NAME_RULE}")
    return value


Name = Annotated[StrictStr, Field(min_length=1, max_length=MAX_NAME_CHARS)]
NonNegative = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, strict=True)


class FileEntry(_Part):
    sha256: Annotated[StrictStr, Field(pattern=_HEX64)]
    bytes: Annotated[StrictInt, Field(ge=0, le=MAX_MEMBER_BYTES)]
    # inputs.safetensors only (recorded since issue 23): the SHA256 of its safetensors header (the length prefix and
    # the JSON). With every sample fingerprinted (samples.fingerprints), the header and the fingerprints cover every
    # byte of the file, so a reader checks those instead of hashing the whole file as well (see
    # gapcheck.golden.bundle). ``sha256`` stays: a reader without this field checks the whole file.
    header_sha256: Optional[Annotated[StrictStr, Field(pattern=_HEX64)]] = None


class TensorEntry(_Part):
    name: Name
    dtype: StrictStr
    shape: Annotated[list[Annotated[StrictInt, Field(ge=0, le=2**31)]], Field(max_length=MAX_DIMS)]

    _name = field_validator("name")(_printable_name)

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, value: str) -> str:
        if value not in DTYPES:
            raise ValueError(f"must be one of {', '.join(sorted(DTYPES))}")
        return value


class Samples(_Part):
    count: Annotated[StrictInt, Field(ge=1, le=MAX_SAMPLES)]  # an empty bundle checks nothing: refused
    # every sample's input SHA256 at record time (nightly reports request digests from them)
    fingerprints: Optional[list[dict[StrictStr, Annotated[StrictStr, Field(pattern=_HEX64)]]]] = None
    source: Optional[StrictStr] = None  # random, file, samples or text
    # text bundles (golden record --text-samples FILE[:field] --tokenizer ...): the file's name, the SHA256 of what
    # was read (absent in bundles recorded before it was kept: nightly then cannot tell a changed file) and the recipe
    text_samples: Optional[Annotated[StrictStr, Field(min_length=1, max_length=4096)]] = None
    text_samples_sha256: Optional[Annotated[StrictStr, Field(pattern=_HEX64)]] = None
    tokenizer: Optional[Annotated[StrictStr, Field(min_length=1, max_length=4096)]] = None


class OutputTolerance(_Part):
    rtol: NonNegative
    atol: NonNegative


class Tolerances(_Part):
    outputs: dict[Name, OutputTolerance]


class Checkpoint(_Part):
    file: Optional[StrictStr] = None
    sha256: Optional[StrictStr] = None


class ModelInfo(_Part):
    factory: Optional[StrictStr] = None
    checkpoint: Optional[Checkpoint] = None
    exporter: Optional[StrictStr] = None
    export_cached: Optional[StrictBool] = None


class OnnxInfo(_Part):
    file: StrictStr
    sha256: Annotated[StrictStr, Field(pattern=_HEX64)]


class Manifest(_Part):
    kind: StrictStr
    format_version: StrictInt
    created_at: StrictStr
    versions: dict[StrictStr, Optional[StrictStr]]
    model: ModelInfo
    onnx: OnnxInfo
    inputs: Annotated[list[TensorEntry], Field(min_length=1, max_length=1024)]
    outputs: Annotated[list[TensorEntry], Field(min_length=1, max_length=1024)]
    samples: Samples
    tolerances: Tolerances
    files: Annotated[dict[StrictStr, FileEntry], Field(min_length=1, max_length=64)]

    @field_validator("files")
    @classmethod
    def _safe_file_names(cls, files: dict[str, FileEntry]) -> dict[str, FileEntry]:
        for name in files:
            if (not name.isprintable() or Path(name).name != name or name.startswith(".") or name == MANIFEST
                    or "\\" in name or len(name) > 255):
                raise ValueError(f"unsafe file name {ascii(name)}: a bundle file is a plain name in the bundle folder")
        missing = [f for f in REQUIRED_FILES if f not in files]
        if missing:
            raise ValueError(f"does not list {', '.join(missing)}")
        return files


def _where(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) if not isinstance(p, str) or re.fullmatch(r"[\w.\-]{1,80}", p) else ascii(p) for p in loc)


def validate_manifest(folder: Path, data: Any) -> Manifest:
    """The parsed ``manifest.json`` checked against the schema and against itself; InputError saying what is wrong."""
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise InputError(f"golden bundle {folder}: {MANIFEST} is not a gapcheck golden manifest")
    if data.get("format_version") != FORMAT_VERSION or isinstance(data.get("format_version"), bool):
        shown = data.get("format_version")
        raise InputError(f"golden bundle {folder}: format version {shown if isinstance(shown, int) else '?'} is not "
                         f"supported (this gapcheck reads version {FORMAT_VERSION})")
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        problems = [f"{_where(e['loc']) or 'manifest'}: {e['msg']}" for e in exc.errors(include_input=False)]
        more = f" (and {len(problems) - _MAX_PROBLEMS} more)" if len(problems) > _MAX_PROBLEMS else ""
        raise InputError(f"golden bundle {folder}: {MANIFEST} is malformed: "
                         f"{'; '.join(problems[:_MAX_PROBLEMS])}{more}") from None
    _check_consistent(folder, manifest)
    return manifest


def _check_consistent(folder: Path, m: Manifest) -> None:
    """What no single field says: names unique, every output toleranced, the ONNX entry the file listed."""
    for side, entries in (("input", m.inputs), ("output", m.outputs)):
        names = [e.name for e in entries]
        if len(set(names)) != len(names):
            raise InputError(f"golden bundle {folder}: {MANIFEST} names an {side} twice")
    missing = sorted(ascii(o.name)[1:-1] for o in m.outputs if o.name not in m.tolerances.outputs)
    if missing:
        raise InputError(f"golden bundle {folder}: {MANIFEST} has no tolerance for output(s) {', '.join(missing)}")
    if m.onnx.file != ONNX_FILE or m.onnx.sha256 != m.files[ONNX_FILE].sha256:
        raise InputError(f"golden bundle {folder}: {MANIFEST}: its onnx entry does not name the listed "
                         f"{ONNX_FILE} and its SHA256")
    for entry in (*m.inputs, *m.outputs):
        per_sample = math.prod(entry.shape[1:]) * np.dtype(entry.dtype).itemsize
        if per_sample * m.samples.count > MAX_MEMBER_BYTES:
            raise InputError(f"golden bundle {folder}: {MANIFEST}: tensor {ascii(entry.name)} would need "
                             f"{per_sample * m.samples.count} bytes for {m.samples.count} samples (at most "
                             f"{MAX_MEMBER_BYTES})")

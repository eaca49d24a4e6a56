"""Model inputs: ``--input name:shape:dtype[:low,high]`` specs, seeded random draws, and sample files.

Every backend is fed ``dict[str, np.ndarray]``; this module produces those dicts, either
drawn reproducibly from specs or read from a user's ``.npz``/``.pt`` file (treated as hostile:
no pickles, declared sizes checked before anything is allocated).
"""
from __future__ import annotations

import logging
import math
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gapcheck.errors import InputError, UsageError, one_line
from gapcheck.limits import MAX_FILE_BYTES, check_input_file, check_zip_entry

logger = logging.getLogger(__name__)

SPEC_FORMAT = ("name:shape:dtype[:low,high], e.g. x:1x3x224x224:float32 or ids:1x16:int64:0,1000; "
               "an empty shape is a scalar (rank 0): sr::int64:8000,48001")
FLOAT_DTYPES = ("float32", "float16", "float64")
INT_DTYPES = ("int64", "int32", "int8", "uint8")
SUPPORTED_DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",)
_DTYPE_ALIASES = {"fp32": "float32", "fp16": "float16", "half": "float16", "fp64": "float64", "double": "float64"}
# Without a range, integer inputs are drawn from [0, 10): small enough to be a valid index for
# most embeddings, but give a range ("ids:1x16:int64:0,30522") for real vocabularies.
DEFAULT_INT_RANGE = (0, 10)
DEFAULT_MAX_FILE_BYTES = MAX_FILE_BYTES
# Largest input drawn at random, in elements (2**28 float32 = 1 GiB): a shape that asks for more is refused
# before anything is allocated (a typo like 1000000x1000000, or an ONNX graph declaring a dim of 1e12).
DEFAULT_MAX_ELEMENTS = 2**28


@dataclass(frozen=True)
class InputSpec:
    """One model input: its name, shape (batch dim included), dtype and optional value range [low, high)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    low: float | None = None
    high: float | None = None

    def __str__(self) -> str:
        text = f"{self.name}:{'x'.join(str(d) for d in self.shape)}:{self.dtype}"
        if self.low is not None and self.high is not None:
            text += f":{_number(self.low)},{_number(self.high)}"
        return text


#: the one rule for a tensor's name, wherever it is given (an input spec, a golden manifest): it is shown in reports
#: and used as a key, so a NUL, an escape or a line break in it is never right
MAX_NAME_CHARS = 256
NAME_RULE = f"1-{MAX_NAME_CHARS} printable characters (no NUL, escape or line break)"


def is_valid_name(value: str) -> bool:
    return 0 < len(value) <= MAX_NAME_CHARS and value.isprintable()


def parse_input_spec(text: str) -> InputSpec:
    """Parse ``name:shape:dtype[:low,high]``; every problem is a UsageError naming it."""
    parts = text.split(":") if isinstance(text, str) else []
    if len(parts) not in (3, 4):
        raise UsageError(f"input spec {text!r} must have 3 or 4 ':'-separated parts: {SPEC_FORMAT}")
    name, shape_text, dtype_text = (part.strip() for part in parts[:3])
    if not is_valid_name(name) or any(ch.isspace() for ch in name):
        # refused here, before any export: the golden manifest refuses the same names only after the work
        raise UsageError(f"input spec {text[:300]!r}: the name must be non-empty and contain no spaces: {NAME_RULE}",
                         parameter="input_specs")
    shape = _parse_shape(shape_text, text)
    dtype = _parse_dtype(dtype_text, text)
    low = high = None
    if len(parts) == 4:
        low, high = _parse_range(parts[3], dtype, text)
    return InputSpec(name, shape, dtype, low, high)


def _parse_shape(shape_text: str, text: str) -> tuple[int, ...]:
    if not shape_text:
        return ()  # a scalar (rank-0) input: "sr::int64"
    dims = []
    for piece in shape_text.lower().split("x"):
        try:
            dim = int(piece)
        except ValueError:
            raise UsageError(
                f"input spec {text!r}: shape '{shape_text}' has a non-integer dimension {piece!r} "
                "(dimensions are separated by 'x', e.g. 1x3x224x224)"
            ) from None
        if dim < 1:
            raise UsageError(f"input spec {text!r}: shape '{shape_text}' has dimension {dim}; each must be >= 1")
        dims.append(dim)
    return tuple(dims)


def _parse_dtype(dtype_text: str, text: str) -> str:
    dtype = _DTYPE_ALIASES.get(dtype_text.lower(), dtype_text.lower())
    if dtype in ("bfloat16", "bf16"):
        raise UsageError(
            f"input spec {text!r}: bfloat16 inputs are not supported (numpy has no bfloat16); "
            "feed float32 and cast inside the model, or check reduced precision with precision bf16",
            parameter="input_specs",
        )
    if dtype not in SUPPORTED_DTYPES:
        raise UsageError(f"input spec {text!r}: unknown dtype '{dtype_text}'; supported: {', '.join(SUPPORTED_DTYPES)}")
    return dtype


def _parse_range(range_text: str, dtype: str, text: str) -> tuple[float, float]:
    pieces = range_text.split(",")
    if len(pieces) != 2:
        raise UsageError(f"input spec {text!r}: the range must be 'low,high', got '{range_text}'")
    try:
        low, high = (float(piece) for piece in pieces)
    except ValueError:
        raise UsageError(f"input spec {text!r}: the range '{range_text}' is not two numbers") from None
    if not (np.isfinite(low) and np.isfinite(high)):
        raise UsageError(f"input spec {text!r}: the range '{range_text}' must be finite")
    if not low < high:
        raise UsageError(f"input spec {text!r}: the range needs low < high (values are drawn from [low, high))")
    if dtype == "bool":
        raise UsageError(f"input spec {text!r}: a bool input takes no range (values are drawn from {{False, True}})")
    if dtype in INT_DTYPES:
        if not (low.is_integer() and high.is_integer()):
            raise UsageError(f"input spec {text!r}: an {dtype} range needs whole numbers, got '{range_text}'")
        info = np.iinfo(dtype)
        if low < info.min or high > info.max + 1:
            raise UsageError(f"input spec {text!r}: range [{_number(low)}, {_number(high)}) does not fit {dtype}")
    elif dtype == "float16" and max(abs(low), abs(high)) > float(np.finfo(np.float16).max):
        raise UsageError(f"input spec {text!r}: range '{range_text}' exceeds the float16 maximum 65504")
    return low, high


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


# --- random draws --------------------------------------------------------------------------------


def check_elements(spec: InputSpec, max_elements: int = DEFAULT_MAX_ELEMENTS) -> None:
    """Refuse a shape whose element count exceeds ``max_elements``, before anything is allocated."""
    count = 1
    for dim in spec.shape:
        count *= int(dim)  # Python ints: no overflow on absurd claims
    if count > max_elements:
        raise UsageError(
            f"input {spec.name!r} of shape {'x'.join(map(str, spec.shape))} has {count:,} elements, more than the "
            f"limit of {max_elements:,}; give a smaller shape, or raise the limit (max_input_elements) if this is meant"
        )


def random_samples(
    specs: list[InputSpec], num_samples: int = 1, seed: int = 0, *, max_elements: int = DEFAULT_MAX_ELEMENTS,
) -> list[dict[str, np.ndarray]]:
    """``num_samples`` reproducible draws; sample k (and each input in it) depends only on (seed, k, input index).

    Each input's element count is checked against ``max_elements`` before any drawing.
    """
    for spec in specs:
        check_elements(spec, max_elements)
    if num_samples < 1:
        raise UsageError(f"the number of samples must be at least 1, got {num_samples}")
    # Every draw is kept: the whole set must fit the limit too, before the first one is made.
    per_sample = sum(math.prod(int(d) for d in spec.shape) for spec in specs)
    if per_sample * num_samples > max_elements:
        raise UsageError(f"{num_samples:,} samples of {per_sample:,} elements each are more than the limit of "
                         f"{max_elements:,} elements; ask for fewer samples (or smaller batch sizes)")
    if not specs:
        raise UsageError("no inputs given: give input specs (name:shape:dtype) or an inputs file (.npz or .pt)",
                         parameter="input_specs")
    names = [spec.name for spec in specs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise UsageError(f"input names must be unique; repeated: {', '.join(duplicates)}")
    samples = []
    for k in range(num_samples):
        sample = {}
        for index, spec in enumerate(specs):
            # One child stream per (sample, input): asking for more samples or adding an input
            # never changes the values already drawn for the others.
            rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(k, index)))
            sample[spec.name] = _draw(rng, spec)
        samples.append(sample)
    return samples


def _draw(rng: np.random.Generator, spec: InputSpec) -> np.ndarray:
    if spec.dtype == "bool":
        return rng.integers(0, 2, size=spec.shape).astype(np.bool_)
    if spec.dtype in INT_DTYPES:
        low, high = (DEFAULT_INT_RANGE if spec.low is None or spec.high is None else (int(spec.low), int(spec.high)))
        return rng.integers(low, high, size=spec.shape, dtype=np.dtype(spec.dtype))
    if spec.dtype in FLOAT_DTYPES:
        if spec.low is None or spec.high is None:
            values = rng.standard_normal(size=spec.shape)
        else:
            values = rng.uniform(spec.low, spec.high, size=spec.shape)
        return values.astype(spec.dtype)
    raise UsageError(f"input '{spec.name}': unsupported dtype '{spec.dtype}'; supported: {', '.join(SUPPORTED_DTYPES)}")


def specs_from_samples(samples: Sequence[Mapping[str, np.ndarray]]) -> list[InputSpec]:
    """Specs describing the first sample (name, shape, dtype); names and dtypes must agree across samples."""
    if not samples:
        raise InputError("no samples to describe")
    first = samples[0]
    for index, sample in enumerate(samples[1:], start=1):
        if list(sample) != list(first):
            raise InputError(f"sample {index} has inputs {list(sample)}, sample 0 has {list(first)}")
        for name, array in sample.items():
            if np.asarray(array).dtype != np.asarray(first[name]).dtype:
                raise InputError(
                    f"input '{name}' is {np.asarray(array).dtype} in sample {index} "
                    f"but {np.asarray(first[name]).dtype} in sample 0"
                )
    return [
        InputSpec(name, tuple(int(d) for d in np.asarray(array).shape), np.asarray(array).dtype.name)
        for name, array in first.items()
    ]


# --- sample files --------------------------------------------------------------------------------


def load_samples_file(
    path: str | Path,
    expected_names: list[str] | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_FILE_BYTES,
) -> list[dict[str, np.ndarray]]:
    """Samples from ``.npz`` (or ``.npy``) or ``.pt``; axis 0 of each array is the sample axis.

    Sample i of a batched file is ``arr[i:i+1]`` (the batch dim is kept). A ``.pt`` may also
    hold a list of dicts, one per sample, used as they are.
    """
    path = Path(path)
    check_input_file(path, "inputs file")
    suffix = path.suffix.lower()
    if suffix in (".npz", ".npy"):
        samples = _load_numpy(path, expected_names, max_bytes)
    elif suffix in (".pt", ".pth"):
        samples = _load_torch(path, expected_names)
    else:
        raise InputError(f"inputs file {path}: unsupported extension '{path.suffix}'; use .npz, .npy, .pt or .pth")
    if not samples:
        raise InputError(f"inputs file {path} holds no samples")
    _check_names(samples, expected_names, path)
    if expected_names:
        samples = [{name: sample[name] for name in expected_names} for sample in samples]
    logger.debug("loaded %d samples from %s", len(samples), path)
    return samples


def _load_numpy(path: Path, expected_names: list[str] | None, max_bytes: int) -> list[dict[str, np.ndarray]]:
    if path.suffix.lower() == ".npy":
        return _split_batched({_single_name(expected_names, path): _read_npy(path, max_bytes)}, path)
    _check_npz_sizes(path, max_bytes)
    try:
        with np.load(path, allow_pickle=False) as loaded:
            arrays = {name: loaded[name] for name in loaded.files}
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise InputError(f"inputs file {path} holds pickled Python objects; refusing to load them") from None
        raise InputError(f"cannot read inputs file {path}: {one_line(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - BadZipFile, EOFError, OSError, zlib.error, ...
        raise InputError(f"cannot read inputs file {path} (corrupt or not an npz archive): {one_line(exc)}") from None
    return _split_batched(arrays, path)


def _read_npy(path: Path, max_bytes: int) -> np.ndarray:
    try:
        with path.open("rb") as handle:
            declared = _declared_npy_bytes(handle)
        size = path.stat().st_size
        if declared is not None and (declared > size or declared > max_bytes):
            raise InputError(f"corrupt inputs file {path}: the array declares {declared} bytes but the file has {size}")
        return np.load(path, allow_pickle=False)
    except InputError:
        raise
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise InputError(f"inputs file {path} holds pickled Python objects; refusing to load them") from None
        raise InputError(f"cannot read inputs file {path}: {one_line(exc)}") from None
    except Exception as exc:  # noqa: BLE001
        raise InputError(f"cannot read inputs file {path}: {one_line(exc)}") from None


def _check_npz_sizes(path: Path, max_bytes: int) -> None:
    """Refuse impossible or enormous declared sizes before numpy allocates them."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            total = 0
            for info in infos:
                check_zip_entry(info, path.stat().st_size, f"inputs file {path}")
                with archive.open(info) as member:
                    declared = _declared_npy_bytes(member)
                if declared is not None and declared > info.file_size:
                    raise InputError(
                        f"corrupt inputs file {path}: array '{info.filename}' declares {declared} bytes "
                        f"but holds {info.file_size}"
                    )
                total += info.file_size
            if total > max_bytes:
                raise InputError(f"inputs file {path} expands to {total} bytes, more than the limit {max_bytes}")
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - BadZipFile, truncated archives, ...
        raise InputError(f"cannot read inputs file {path} (corrupt or not an npz archive): {one_line(exc)}") from None


def _declared_npy_bytes(member: Any) -> int | None:
    """Bytes an .npy header claims (None for object arrays, whose size is not declared)."""
    version = np.lib.format.read_magic(member)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(member)
    else:
        shape, _, dtype = np.lib.format.read_array_header_2_0(member)
    if dtype.hasobject:
        return None
    return int(np.prod(shape, dtype=np.float64)) * dtype.itemsize


def _load_torch(path: Path, expected_names: list[str] | None) -> list[dict[str, np.ndarray]]:
    import pickle
    import warnings

    import torch

    with path.open("rb") as handle:
        starts_like_zip = handle.read(4) == b"PK\x03\x04"
    if starts_like_zip and not zipfile.is_zipfile(path):
        raise InputError(f"inputs file {path} is a corrupt or truncated archive")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise InputError(
            f"inputs file {path} holds pickled Python objects, not just tensors; refusing to unpickle it "
            "(that would run code from the file). Save a tensor, a dict of tensors or a list of such dicts."
        ) from None
    except EOFError:
        raise InputError(f"inputs file {path} is truncated (unexpected end of file)") from None
    except Exception as exc:  # noqa: BLE001 - corrupt archives raise RuntimeError, ValueError, ...
        raise InputError(f"cannot read inputs file {path}: {one_line(exc)}") from None

    if isinstance(obj, torch.Tensor):
        return _split_batched({_single_name(expected_names, path): _tensor_to_numpy(obj, "input", path)}, path)
    if isinstance(obj, Mapping):
        return _split_batched(_mapping_to_numpy(obj, path, "the file"), path)
    if isinstance(obj, (list, tuple)):
        if not obj:
            raise InputError(f"inputs file {path} holds an empty list")
        samples = []
        for index, item in enumerate(obj):
            if not isinstance(item, Mapping):
                raise InputError(f"inputs file {path}: item {index} is a {type(item).__name__}, expected a dict of tensors")
            samples.append(_mapping_to_numpy(item, path, f"item {index}"))
        return samples
    raise InputError(
        f"inputs file {path} holds a {type(obj).__name__}; expected a tensor, a dict name -> tensor, "
        "or a list of such dicts"
    )


def _mapping_to_numpy(mapping: Mapping[Any, Any], path: Path, where: str) -> dict[str, np.ndarray]:
    arrays = {}
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise InputError(f"inputs file {path}: {where} has a non-string key {key!r}")
        arrays[key] = _tensor_to_numpy(value, key, path)
    if not arrays:
        raise InputError(f"inputs file {path}: {where} is an empty dict")
    return arrays


def _tensor_to_numpy(value: Any, name: str, path: Path) -> np.ndarray:
    import torch

    if not isinstance(value, torch.Tensor):
        raise InputError(f"inputs file {path}: input '{name}' is a {type(value).__name__}, expected a tensor")
    if value.layout != torch.strided:
        raise InputError(
            f"inputs file {path}: input '{name}' is a sparse tensor ({str(value.layout).replace('torch.', '')}); "
            "models are fed dense tensors: save it with .to_dense()"
        )
    if value.dtype == torch.bfloat16:
        raise InputError(
            f"inputs file {path}: input '{name}' is bfloat16, which numpy cannot hold; save it as float32"
        )
    if value.dtype not in _numpy_compatible_torch_dtypes():
        raise InputError(f"inputs file {path}: input '{name}' has unsupported dtype {value.dtype}")
    return value.detach().cpu().contiguous().numpy()


def _split_batched(arrays: dict[str, np.ndarray], path: Path) -> list[dict[str, np.ndarray]]:
    """Axis 0 of every array is the sample axis: sample i is ``arr[i:i+1]`` (the batch dim is kept).

    A rank-0 array (a scalar input such as a sample rate) has no sample axis: every sample gets it as it is.
    """
    if not arrays:
        raise InputError(f"inputs file {path} holds no arrays")
    for name, array in arrays.items():
        if array.dtype.hasobject:
            raise InputError(f"inputs file {path}: input '{name}' holds Python objects")
    scalars = {name: array for name, array in arrays.items() if array.ndim == 0}
    if len(scalars) == len(arrays):
        return [dict(arrays)]
    counts = {name: int(array.shape[0]) for name, array in arrays.items() if array.ndim > 0}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{name}: {count}" for name, count in counts.items())
        raise InputError(f"inputs file {path}: inputs disagree on the number of samples along axis 0 ({listed})")
    count = next(iter(counts.values()))
    if count == 0:
        raise InputError(f"inputs file {path} holds 0 samples (axis 0 is empty)")
    return [
        {name: array if array.ndim == 0 else np.ascontiguousarray(array[i : i + 1]) for name, array in arrays.items()}
        for i in range(count)
    ]


def _single_name(expected_names: list[str] | None, path: Path) -> str:
    if not expected_names:
        return "input"
    if len(expected_names) == 1:
        return expected_names[0]
    raise InputError(
        f"inputs file {path} holds a single array, but the model takes {len(expected_names)} inputs "
        f"({', '.join(expected_names)}); save a dict name -> array"
    )


def _check_names(samples: list[dict[str, np.ndarray]], expected_names: list[str] | None, path: Path) -> None:
    first = sorted(samples[0])
    for index, sample in enumerate(samples[1:], start=1):
        if sorted(sample) != first:
            raise InputError(
                f"inputs file {path}: sample {index} has inputs {', '.join(sorted(sample))}, "
                f"sample 0 has {', '.join(first)}"
            )
    if expected_names is not None and sorted(expected_names) != first:
        raise InputError(
            f"inputs file {path} names inputs {', '.join(first)}, "
            f"but the model expects {', '.join(expected_names)}"
        )


def _numpy_compatible_torch_dtypes() -> frozenset:
    import torch

    return frozenset(
        {torch.float16, torch.float32, torch.float64, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8,
         torch.bool}
    )

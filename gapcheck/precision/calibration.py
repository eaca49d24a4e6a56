"""Calibration samples for INT8: an ``.npz``/``.pt`` of tensors, a golden bundle, or a folder of raw samples run
through a declared preprocessing stage (``NAME=module:callable``, the stage of preprocess-audit and golden record).

Samples are checked against the ONNX graph's inputs (names, ranks, static dims) before any quantization, so a
sample that does not fit is one input error (exit 2), never a runtime failure deep in the calibrator.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx

from gapcheck.errors import InputError, UsageError

MAX_CALIBRATION_SAMPLES = 256


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    initializers = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in initializers]


def check_fit(model: onnx.ModelProto, samples: Sequence[dict[str, np.ndarray]], what: str) -> None:
    """Refuse samples whose names, ranks or static dims do not fit the graph's inputs (InputError, exit 2)."""
    inputs = graph_inputs(model)
    names = sorted(i.name for i in inputs)
    for position, sample in enumerate(samples):
        if sorted(sample) != names:
            raise InputError(f"{what} sample {position}: inputs {', '.join(sorted(sample))} do not fit the model's "
                             f"inputs {', '.join(names)}")
        for info in inputs:
            array, dims = sample[info.name], info.type.tensor_type.shape.dim
            if array.ndim != len(dims) or any(d.HasField("dim_value") and d.dim_value != array.shape[axis]
                                              for axis, d in enumerate(dims)):
                shape = tuple(d.dim_value if d.HasField("dim_value") else d.dim_param or "?" for d in dims)
                raise InputError(f"{what} sample {position}: input {info.name!r} has shape {tuple(array.shape)}; "
                                 f"the model expects {shape}")


def load_calibration(path: str | Path, names: list[str], *, stage: str | None = None,
                     limit: int = MAX_CALIBRATION_SAMPLES) -> list[dict[str, np.ndarray]]:
    """The usable calibration samples of :func:`load_calibration_set` (the skipped ones dropped silently)."""
    return load_calibration_set(path, names, stage=stage, limit=limit)[0]


def load_calibration_set(path: str | Path, names: list[str], *, stage: str | None = None,
                         limit: int = MAX_CALIBRATION_SAMPLES) -> tuple[list[dict[str, np.ndarray]], list[str]]:
    """(samples, skipped) from ``path`` (see the module docstring), at most ``limit``; ``names`` are the graph's
    inputs in order. A sample that cannot be read or holds NaN/inf is skipped and named in ``skipped`` (house rule:
    bad input counted, reported, skipped); InputError only when no usable sample remains."""
    path = Path(path)
    if path.is_dir() and (path / "manifest.json").is_file():
        labelled = [(f"sample {i}", s) for i, s in enumerate(_from_bundle(path, names)[:limit])]
        skipped: list[str] = []
    elif path.is_dir():
        if stage is None:
            raise UsageError(f"calibration folder {path} holds raw samples: declare their preprocessing "
                             "(a stage NAME=module:callable)", parameter="calibration_stage")
        labelled, skipped = _from_folder(path, names, stage, limit)
    else:
        if stage is not None:
            raise UsageError("a calibration stage preprocesses a folder of raw samples; the calibration file holds "
                             "tensors already", parameter="calibration_stage")
        from gapcheck.inputs import load_samples_file

        labelled, skipped = [(f"sample {i}", s) for i, s in enumerate(load_samples_file(path, names)[:limit])], []
    finite = [(label, s) for label, s in labelled if not _nonfinite(s)]
    bad = [f"{label} ({_nonfinite(s)})" for label, s in labelled if _nonfinite(s)]
    if bad and not finite:
        raise InputError(f"calibration samples hold NaN/inf: {len(bad)} of {len(labelled)} samples in {path}, e.g. "
                         f"{'; '.join(bad[:3])}; no usable calibration sample remains")
    skipped += [f"{b}: holds NaN/inf" for b in bad]
    if skipped and not finite:
        raise InputError(f"no usable calibration sample in {path}: {len(skipped)} skipped, e.g. {skipped[0]}")
    return [s for _, s in finite], skipped


def _nonfinite(sample: dict[str, np.ndarray]) -> str:
    """'' when every float value is finite, else which input holds how many NaN/inf."""
    parts = []
    for name, array in sample.items():
        if np.issubdtype(array.dtype, np.floating):
            nan, inf = int(np.isnan(array).sum()), int(np.isinf(array).sum())
            if nan or inf:
                parts.append(f"input {name!r}: {nan} NaN, {inf} inf")
    return ", ".join(parts)


def _from_bundle(folder: Path, names: list[str]) -> list[dict[str, np.ndarray]]:
    from gapcheck.golden.bundle import load_bundle

    bundle = load_bundle(folder)
    missing = [n for n in names if n not in bundle.inputs]
    if missing:
        raise InputError(f"golden bundle {folder} has no input {', '.join(missing)} (it has "
                         f"{', '.join(bundle.inputs)})")
    count = bundle.num_samples
    return [{n: np.ascontiguousarray(bundle.inputs[n][i:i + 1]) for n in names} for i in range(count)]


def _from_folder(folder: Path, names: list[str], stage: str,
                 limit: int) -> tuple[list[tuple[str, dict[str, np.ndarray]]], list[str]]:
    """Raw files through the stage; the stage's array is the one input (a batch axis added when it lacks one).
    A file that cannot be read or that the stage fails on is skipped and named."""
    from gapcheck.preprocess.samples import discover_samples
    from gapcheck.preprocess.stages import parse_stage_option, resolve
    from gapcheck.tensors import to_numpy

    if len(names) != 1:
        raise UsageError(f"a stage makes one tensor; the model has {len(names)} inputs ({', '.join(names)}): give "
                         "the calibration samples as an .npz/.pt file", parameter="calibration_stage")
    spec = parse_stage_option(stage)
    fn = resolve(spec)
    samples, skipped = [], []
    for entry in discover_samples(folder, limit):
        path = Path(entry.path)
        if entry.issue is not None or not path.is_file():
            skipped.append(f"{path.name}: {getattr(entry.issue, 'detail', 'not a regular file')}")
            continue
        try:
            array = np.asarray(to_numpy(fn(path.read_bytes() if spec.accepts == "bytes" else str(path))))
        except Exception as exc:  # noqa: BLE001 - the user's stage failing on a sample is an input problem
            skipped.append(f"{path.name}: stage {spec.name!r} failed: {type(exc).__name__}: {exc}")
            continue
        samples.append((path.name, {names[0]: np.ascontiguousarray(array)}))
    return samples, skipped


def add_batch_axis(samples: list[dict[str, np.ndarray]], model: onnx.ModelProto) -> list[dict[str, np.ndarray]]:
    """A stage that returns one sample (C,H,W) for a model that takes a batch (N,C,H,W): add the batch axis."""
    ranks = {i.name: len(i.type.tensor_type.shape.dim) for i in graph_inputs(model)}
    return [{k: v[None] if v.ndim == ranks.get(k, v.ndim) - 1 else v for k, v in s.items()} for s in samples]


def fingerprint(sample: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for name in sorted(sample):
        array = np.ascontiguousarray(sample[name])
        digest.update(name.encode() + str(array.dtype).encode() + str(array.shape).encode() + array.tobytes())
    return digest.hexdigest()


def shared_samples(calibration: Sequence[dict[str, np.ndarray]], verification: Sequence[dict[str, np.ndarray]]) -> int:
    """How many verification samples are calibration samples too."""
    seen = {fingerprint(s) for s in calibration}
    return sum(fingerprint(s) in seen for s in verification)

"""Record a golden bundle: the released checkpoint's answers to a fixed set of inputs, frozen with their hashes.

The inputs come from one of three places: seeded random draws from the input specs, a user's
``.npz``/``.pt`` file, or raw samples run through the inference preprocessing stage (then the raw
files' SHA256 and the per-channel statistics of the preprocessed tensors are recorded too). The
model is run in torch (the reference nightly runs are judged against) and, exported, in ONNX Runtime
(kept beside it, and compared at record time so a bundle that an exact deployment of the export
could not pass is flagged). The bundle is written into a temporary folder next to ``out`` and
renamed into place, so a crash never leaves half a bundle behind.
"""
from __future__ import annotations

import json
import logging
import platform
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from gapcheck.atomic import write_atomic
from gapcheck.errors import InputError, UsageError
from gapcheck.findings import Finding, Subject
from gapcheck.golden import bundle as fmt
from gapcheck.groups import ExportSpec, InputSource, ModelSource, ToleranceSpec
from gapcheck.groups.inputs import RECORD_SAMPLES
from gapcheck.groups.keywords import fill_request
from gapcheck.progress import NullProgress, ProgressReporter
from gapcheck.tensors import fingerprint, sha256_bytes, summarize

logger = logging.getLogger(__name__)

RECORD_BATCH = 32  # samples per torch / ONNX Runtime call while recording
MAX_RAW_SAMPLE_BYTES = 256 * 1024 * 1024  # checked before a raw sample is read into memory


@dataclass(frozen=True, init=False)
class RecordRequest:
    """What ``gapcheck golden record`` needs, as the groups it is made of plus golden's own options.

    Python callers may pass the groups, or the library keywords they are built from
    (``RecordRequest(out, "pkg:build", input_specs=("x:1x3x8x8:float32",), num_samples=4)``; see
    :mod:`gapcheck.groups.keywords`).
    """

    out: Path
    model: ModelSource
    inputs: InputSource
    tolerance: ToleranceSpec
    export: ExportSpec
    samples: Path | None = None  # raw samples (a folder or a file) for the preprocessing stage
    stage: str | None = None  # "infer=module:callable" turning one raw sample into the model input
    overwrite: bool = False

    def __init__(self, out: Path, factory: str | None = None, **values: Any) -> None:
        if factory is not None:
            values["factory"] = factory
        fill_request(self, {"out": Path(out), **values}, {
            "model": ModelSource(), "inputs": InputSource(num_samples=RECORD_SAMPLES), "tolerance": ToleranceSpec(),
            "export": ExportSpec()})


@dataclass(frozen=True)
class RecordOutcome:
    path: Path
    manifest: dict[str, Any]
    bundle_hash: str
    findings: tuple[Finding, ...]
    seconds: dict[str, float]


def _versions() -> dict[str, str]:
    import onnx
    import onnxruntime
    import torch

    from gapcheck.version import __version__

    return {"gapcheck": __version__, "torch": torch.__version__, "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__, "numpy": np.__version__, "python": platform.python_version()}


def is_bundle(folder: Path) -> bool:
    """Whether ``folder`` holds a gapcheck golden bundle (its manifest says so): the only folder --overwrite replaces."""
    manifest = folder / fmt.MANIFEST
    try:
        if manifest.is_symlink() or not manifest.is_file() or manifest.stat().st_size > fmt.MAX_MANIFEST_BYTES:
            return False
        document = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(document, dict) and document.get("kind") == fmt.KIND


def check_out(out: Path, overwrite: bool) -> None:
    """Where the bundle goes, checked before any work (UsageError, exit 2): a new or empty folder, or with
    ``overwrite`` a folder that already holds a gapcheck bundle — never a symbolic link, never any other folder."""
    out = Path(out)
    if out.is_symlink():
        raise UsageError(f"golden bundle path {out} is a symbolic link; give the folder's real path")
    if out.exists() and not out.is_dir():
        raise UsageError(f"golden bundle path {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise UsageError(f"golden bundle folder {out} is not empty", hint="choose a new folder or allow overwriting")
        if not is_bundle(out):
            raise UsageError(f"golden bundle folder {out} is not empty and is not a golden bundle (no gapcheck "
                             "manifest): --overwrite only replaces a bundle", hint="choose a new folder")
    parent = out.parent if str(out.parent) else Path(".")
    from gapcheck.atomic import check_folder

    check_folder(parent, f"golden bundle path {out}")
    parent.mkdir(parents=True, exist_ok=True)


def _preprocessed(request: RecordRequest, name: str, want_ndim: int) -> tuple[list[dict[str, np.ndarray]], dict]:
    """Raw samples through the inference stage; also the raw SHA256s and per-channel statistics."""
    from gapcheck.preprocess.samples import discover_samples
    from gapcheck.preprocess.stages import parse_stage_option, resolve
    from gapcheck.tensors import to_numpy

    spec = parse_stage_option(request.stage or "")
    fn = resolve(spec)
    assert request.samples is not None  # checked by the caller
    paths = discover_samples(request.samples, request.inputs.num_samples)
    samples, raw = [], []
    for entry in paths:
        path = Path(getattr(entry, "path", None) or str(entry))  # entries (path + issue), or plain paths
        issue = getattr(entry, "issue", None)
        if issue is not None or not path.is_file():
            raise InputError(f"raw sample {path} cannot be used: {getattr(issue, 'detail', 'not a regular file')}")
        if path.stat().st_size > MAX_RAW_SAMPLE_BYTES:
            raise InputError(f"raw sample {path} is larger than {MAX_RAW_SAMPLE_BYTES} bytes")
        data = path.read_bytes()
        try:
            array = np.asarray(to_numpy(fn(data if spec.accepts == "bytes" else str(path))))
        except Exception as exc:  # noqa: BLE001 - the user's stage failing on a sample is an input problem
            raise InputError(f"stage {spec.name!r} failed on sample {path}: {type(exc).__name__}: {exc}") from exc
        if array.ndim == want_ndim - 1:
            array = array[None]  # the stage returns one sample; the model takes a batch of one
        samples.append({name: np.ascontiguousarray(array)})
        raw.append({"file": path.name, "sha256": sha256_bytes(data), "bytes": len(data)})
    stacked = np.concatenate([s[name] for s in samples])
    stats = summarize(stacked, channel_axis=1 if stacked.ndim >= 3 else None)
    return samples, {
        "stage": {"name": spec.name, "target": spec.description, "accepts": spec.accepts},
        "raw_samples": raw,
        "tensor_stats": {"min": stats.min, "max": stats.max, "nonfinite": stats.nonfinite,
                         "channels": [{"mean": c.mean, "std": c.std, "min": c.min, "max": c.max} for c in stats.channels]},
    }


def _inputs(request: RecordRequest) -> tuple[list[dict[str, np.ndarray]], dict, dict | None]:
    specs = request.inputs.parsed()
    if request.samples is not None or request.stage is not None:
        if request.samples is None or request.stage is None:
            raise UsageError("raw samples and an inference stage go together")
        if len(specs) != 1:
            raise UsageError("with raw samples, give exactly one input spec (the tensor the stage produces)")
        samples, pre = _preprocessed(request, specs[0].name, len(specs[0].shape))
        return samples, {"source": "samples", "samples": str(request.samples)}, pre
    file = request.inputs.file
    if file is not None:
        return request.inputs.samples(), {"source": "file", "file": Path(file).name,
                                          "file_sha256": fmt.file_sha256(Path(file))}, None
    if request.inputs.text_samples is not None:  # real sentences through the --tokenizer stage, not random ids
        text = request.inputs.text_samples
        digest = fmt.text_samples_sha256(text)  # before the samples are read: nightly tells a changed file by it
        return request.inputs.samples(), {"source": "text", "text_samples": Path(text).name,
                                          "text_samples_sha256": digest, "tokenizer": request.inputs.tokenizer}, None
    return request.inputs.samples(), {"source": "random", "seed": request.inputs.seed}, None


def _run_batches(run: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]], stacked: dict[str, np.ndarray],
                 count: int, progress: ProgressReporter) -> dict[str, np.ndarray]:
    parts: dict[str, list[np.ndarray]] = {}
    for start in range(0, count, RECORD_BATCH):
        feeds = {k: v[start:start + RECORD_BATCH] for k, v in stacked.items()}
        for name, value in run(feeds).items():
            parts.setdefault(name, []).append(np.asarray(value))
        progress.advance(min(RECORD_BATCH, count - start))
    return {name: np.concatenate(values) for name, values in parts.items()}


def _tolerances(request: RecordRequest, outputs: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    policy = request.tolerance.policy("fp32")
    return {name: {"rtol": t.rtol, "atol": t.atol}
            for name, t in ((n, policy.for_name(n, a.dtype)) for n, a in outputs.items())}


def _infinite_outputs(reference: dict[str, np.ndarray]) -> list[Finding]:
    """Outputs holding +-inf: only the same infinity matches one, so a deployment overflowing there passes."""
    from gapcheck.codes.nightly import INFINITE_REFERENCE

    findings = []
    for name, values in reference.items():
        if values.dtype.kind not in "fc":
            continue
        count = int(np.isinf(values).sum())
        if count:
            findings.append(INFINITE_REFERENCE.finding(
                f"output {name}: {count} of {values.size} golden values are infinite: a deployment answering the same "
                "infinity there passes (an overflow, or a masked score?)",
                subject=Subject(output=name), evidence={"infinite": count, "values": int(values.size)}))
    return findings


def _insensitive_outputs(reference: dict[str, np.ndarray], tolerances: dict[str, dict[str, float]]) -> list[Finding]:
    """Outputs on which every sample agrees with sample 0 within the tolerance: a check they cannot fail on inputs."""
    from gapcheck.codes.nightly import INSENSITIVE
    from gapcheck.compare import Tolerance, compare_arrays

    findings = []
    for name, values in reference.items():
        if values.ndim == 0 or values.shape[0] < 2 or values.dtype.kind != "f":
            continue
        tol = Tolerance(rtol=tolerances[name]["rtol"], atol=tolerances[name]["atol"])
        first = np.broadcast_to(values[:1], values.shape)
        stats = compare_arrays(values, first, tol)
        if stats.passed:
            findings.append(INSENSITIVE.finding(
                f"output {name}: all {values.shape[0]} golden samples agree with the first within the tolerance "
                f"(max spread {stats.max_abs:.3g}): a deployment fed wrong inputs would still pass",
                subject=Subject(output=name), evidence={"max_spread": stats.max_abs, "samples": int(values.shape[0]),
                                                        **tolerances[name]}))
    return findings


def _check_same_batching(samples: Sequence[dict[str, np.ndarray]]) -> None:
    first = samples[0]
    for index, sample in enumerate(samples):
        if sorted(sample) != sorted(first):
            raise InputError(f"sample {index} has inputs {sorted(sample)}, sample 0 has {sorted(first)}")
        for name, array in sample.items():
            if array.ndim == 0 or array.shape[0] != 1 or array.shape[1:] != first[name].shape[1:]:
                raise InputError(f"golden samples must each be a batch of one with the same shape: sample {index} "
                                 f"input {name!r} is {list(array.shape)}, sample 0 is {list(first[name].shape)}")


@contextmanager
def _timed(timings: dict[str, float], phase: str) -> Iterator[None]:
    tick = time.perf_counter()
    yield
    timings[phase] = time.perf_counter() - tick


def _golden_samples(request: RecordRequest) -> tuple[list[dict[str, np.ndarray]], dict, dict | None]:
    """The samples to record (never none: an empty bundle would pass any deployment), each a batch of one."""
    samples, source, preprocess = _inputs(request)
    if not samples:
        raise InputError("no golden samples: an empty bundle would pass any deployment",
                         hint="give --num-samples >= 1, an --inputs file with samples, or a --samples folder with files")
    _check_same_batching(samples)
    return samples, source, preprocess


def _stacked(exported: Any, samples: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Every sample's inputs stacked along the batch axis, in the exported graph's input order."""
    input_names = [i.name for i in exported.model.graph.input]
    if sorted(input_names) != sorted(samples[0]):
        raise InputError(f"the exported model takes inputs {input_names}, the samples have {sorted(samples[0])}")
    return {name: np.concatenate([s[name] for s in samples]) for name in input_names}


def _references(module: Any, exported: Any, stacked: dict[str, np.ndarray], count: int,
                timings: dict[str, float], progress: ProgressReporter,
                ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The torch outputs (the reference) and ONNX Runtime's on the same batches, each step a progress bar."""
    from gapcheck.backends.onnxruntime import OnnxRuntimeBackend
    from gapcheck.backends.torch_eager import TorchBackend

    output_names = [o.name for o in exported.model.graph.output]
    with _timed(timings, "torch"):
        progress.start("golden record: torch reference (samples)", count)
        reference = _run_batches(TorchBackend(module, list(stacked), output_names).infer, stacked, count, progress)
    with _timed(timings, "onnxruntime"):
        progress.start("golden record: ONNX Runtime (samples)", count)
        ort = _run_batches(OnnxRuntimeBackend(exported.model).infer, stacked, count, progress)
    return reference, ort


def record_bundle(request: RecordRequest, progress: ProgressReporter | None = None) -> RecordOutcome:
    """Record the bundle described by ``request`` into ``request.out`` (see the module docstring). ``progress`` (a
    :class:`~gapcheck.progress.ProgressReporter`) is told each step: load and export, torch, ONNX Runtime, write."""
    out = Path(request.out)
    check_out(out, request.overwrite)
    request.model.require()
    reporter = progress or NullProgress()
    timings: dict[str, float] = {}
    reporter.start("golden record: load the model and samples, export", None)
    with _timed(timings, "load"):
        samples, source, preprocess = _golden_samples(request)
        loaded = request.model.load()
        module = loaded.module.eval()
    with _timed(timings, "export"):
        exported, _ = request.export.obtain(module, samples[0], cache=request.export.cache(request.model))
    stacked = _stacked(exported, samples)
    reference, ort = _references(module, exported, stacked, len(samples), timings, reporter)
    fmt.refuse_nan_reference(reference, "golden record")  # before anything is written
    tolerances = _tolerances(request, reference)
    findings = (_reference_findings(list(reference), reference, ort, tolerances)
                + _insensitive_outputs(reference, tolerances) + _infinite_outputs(reference))
    onnx_bytes = exported.model.SerializeToString()
    manifest = _manifest(request, loaded, exported, onnx_bytes, stacked, reference, samples, source, preprocess,
                         tolerances, findings)
    reporter.start("golden record: write and verify the bundle", None)
    with _timed(timings, "write"):
        bundle_hash = _write(out, manifest, onnx_bytes, stacked, reference, ort, request.overwrite)
    return RecordOutcome(out, manifest, bundle_hash, tuple(findings), timings)


def _save_tensors(path: Path, arrays: dict[str, np.ndarray], mode: int) -> None:
    from safetensors.numpy import save_file

    save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()}, str(path))
    # safetensors creates its files private (0600): a nightly job running as another user (a read-only
    # volume in a pod) could not read them. They get the mode every other bundle file has.
    path.chmod(mode)


def _reference_findings(output_names: list[str], reference: dict[str, np.ndarray], ort: dict[str, np.ndarray],
                        tolerances: dict[str, dict[str, float]]) -> list[Finding]:
    """Outputs on which ONNX Runtime already disagrees with torch at record time (no deployment could pass them)."""
    from gapcheck.codes.nightly import REFERENCE_DISAGREES
    from gapcheck.compare import Tolerance, compare_arrays

    findings = []
    for name in output_names:
        tol = Tolerance(rtol=tolerances[name]["rtol"], atol=tolerances[name]["atol"])
        stats = compare_arrays(ort[name], reference[name], tol)
        if not stats.passed:
            findings.append(REFERENCE_DISAGREES.finding(
                f"output {name}: ONNX Runtime differs from torch by max |err| {stats.max_abs:.3g} at record time",
                subject=Subject(output=name), evidence={"max_abs": stats.max_abs, "max_rel": stats.max_rel,
                                                        "mismatch_fraction": stats.mismatch_fraction, **tolerances[name]}))
    return findings


def _manifest(request: RecordRequest, loaded: Any, exported: Any, onnx_bytes: bytes, stacked: dict[str, np.ndarray],
              reference: dict[str, np.ndarray], samples: Sequence[dict[str, np.ndarray]], source: dict,
              preprocess: dict | None, tolerances: dict[str, dict[str, float]], findings: list[Finding]) -> dict[str, Any]:
    input_names, output_names = list(stacked), list(reference)
    checkpoint = None
    if request.model.checkpoint is not None:
        path = Path(request.model.checkpoint)
        checkpoint = {"file": path.name, "sha256": fmt.file_sha256(path), "kind": loaded.kind}
        # which weights of the file the answers are (timm's state_dict vs state_dict_ema): null for a plain state dict
        checkpoint.update(state_dict_key=loaded.state_dict_key, weights=loaded.describe_weights())
    return {
        "kind": fmt.KIND, "format_version": fmt.FORMAT_VERSION,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": _versions(),
        "model": {"factory": request.model.factory, "checkpoint": checkpoint, "exporter": exported.exporter,
                  "fallback_reason": exported.fallback_reason, "export_cached": exported.cached},
        "onnx": {"file": fmt.ONNX_FILE, "sha256": sha256_bytes(onnx_bytes)},
        "inputs": [fmt.TensorInfo(n, str(stacked[n].dtype), (1, *stacked[n].shape[1:])).as_dict() for n in input_names],
        "input_specs": list(request.inputs.specs),
        "outputs": [fmt.TensorInfo(n, str(reference[n].dtype), (1, *reference[n].shape[1:])).as_dict()
                    for n in output_names],
        "samples": {"count": len(samples), **source,
                    "fingerprints": [{n: fingerprint(s[n]) for n in input_names} for s in samples]},
        "tolerances": {**request.tolerance.as_dict(), "outputs": tolerances},
        "preprocess": preprocess,
        "record_findings": [{"code": f.code, "message": f.message} for f in findings],
    }


def _swap_in(staging: Path, out: Path, overwrite: bool) -> None:
    """Move the finished bundle into place. An existing bundle (checked again: it may have changed while recording)
    is first renamed aside, then removed: a crash leaves the old bundle or the new one, never a half-deleted one."""
    if out.is_symlink():
        raise UsageError(f"golden bundle path {out} became a symbolic link while recording")
    if not out.exists():
        staging.rename(out)
        return
    if out.is_dir() and not any(out.iterdir()):
        out.rmdir()
        staging.rename(out)
        return
    if not overwrite or not is_bundle(out):
        raise UsageError(f"golden bundle folder {out} filled up while recording")
    aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent if str(out.parent) else "."))
    aside.rmdir()
    out.rename(aside)
    try:
        staging.rename(out)
    except BaseException:
        aside.rename(out)  # put the old bundle back
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _write(out: Path, manifest: dict[str, Any], onnx_bytes: bytes, inputs: dict[str, np.ndarray],
           reference: dict[str, np.ndarray], ort: dict[str, np.ndarray], overwrite: bool) -> str:
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent if str(out.parent) else "."))
    try:
        staging.chmod(0o755)  # mkdtemp makes it private; a bundle is shared read-only data
        (staging / fmt.ONNX_FILE).write_bytes(onnx_bytes)
        mode = (staging / fmt.ONNX_FILE).stat().st_mode & 0o777  # 0666 less the umask
        _save_tensors(staging / fmt.INPUTS_FILE, inputs, mode)
        _save_tensors(staging / fmt.TORCH_FILE, reference, mode)
        _save_tensors(staging / fmt.ORT_FILE, ort, mode)
        manifest["files"] = {name: {"sha256": fmt.file_sha256(staging / name), "bytes": (staging / name).stat().st_size}
                             for name in (fmt.ONNX_FILE, fmt.INPUTS_FILE, fmt.TORCH_FILE, fmt.ORT_FILE)}
        # With every sample fingerprinted, the header's hash completes the record of every byte of the inputs file:
        # readers check the two instead of hashing the whole file as well (gapcheck.golden.bundle).
        manifest["files"][fmt.INPUTS_FILE]["header_sha256"] = fmt.safetensors_header_sha256(
            (staging / fmt.INPUTS_FILE).read_bytes())
        data = (json.dumps(manifest, indent=2, sort_keys=True, allow_nan=False) + "\n").encode()
        write_atomic(staging / fmt.MANIFEST, data, what="golden bundle file")
        _swap_in(staging, out, overwrite)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    from hashlib import sha256

    return sha256(data).hexdigest()

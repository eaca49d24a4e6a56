"""Per-sample work, run inside worker processes: screen the raw sample, run every stage, observe.

Only small values travel back to the parent (summaries, fingerprints, a fixed subsample
of values per channel for the KS test, pairwise deltas); full stage outputs come back
only for the few evidence samples the diagnoses replay hypotheses on.
"""
from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import combinations
from types import CodeType, FunctionType, MethodType
from typing import Any

import numpy as np

from gapcheck.codes.preprocess import UNREADABLE
from gapcheck.model.factory import shown_names
from gapcheck.preprocess.layout import LayoutInfo, chw_view, detect_layout, to_chw, without_lone_channel
from gapcheck.preprocess.replay import StageProfile, fit_profile
from gapcheck.preprocess.samples import (
    InputIssue,
    SampleTooLarge,
    Screening,
    decode_rgb,
    full_decode_issue,
    guard_decoders,
    local_path,
    read_regular_file,
    screen_bytes,
)
from gapcheck.preprocess.stages import StageSpec, given_text, opencv_given_text, resolve
from gapcheck.preprocess.summary import summarize_output
from gapcheck.report.text import safe_line
from gapcheck.tensors import ArraySummary, contiguous, fingerprint, sha256_bytes, to_numpy

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerOptions:
    max_pixels: int
    repeats: int  # extra runs per stage on probe samples (nondeterminism)
    ks_points: int  # values per channel per sample kept for the KS test and histograms


@dataclass(frozen=True)
class WorkItem:
    index: int
    path: str
    keep_arrays: bool  # an evidence sample: send the full outputs back
    probe: bool  # run the stages again to check determinism
    profile: bool = False  # replay the first stage's resize method here, in parallel with the other samples
    dead: tuple[tuple[str, str], ...] = ()  # (stage, cause): stages that killed a worker on this sample; not run again


@dataclass(frozen=True)
class StageObservation:
    stage: str
    ok: bool
    error: str = ""
    summary: ArraySummary | None = None
    layout: LayoutInfo | None = None
    repeat_fingerprints: tuple[str, ...] = ()
    ks_values: np.ndarray | None = None  # (channels, ks_points) float32 of the canonical CHW view
    array: np.ndarray | None = None

    @property
    def stats(self) -> ArraySummary:
        """The summary of an ok observation (set whenever ``ok``)."""
        assert self.summary is not None, f"stage {self.stage} failed: no summary"
        return self.summary


@dataclass(frozen=True)
class PairDelta:
    a: str
    b: str
    comparable: bool  # same shape
    max_abs: float
    psnr_db: float


@dataclass(frozen=True)
class SampleRecord:
    index: int
    path: str
    raw_sha256: str
    size_bytes: int
    screening: Screening
    issue: InputIssue | None
    stages: tuple[StageObservation, ...]
    deltas: tuple[PairDelta, ...]
    first_stage_profile: StageProfile | None = None  # only on the item asked to profile


def init_worker(max_pixels: int) -> None:
    """Worker-process initializer: decoder guards, and one thread per process (the pool is the parallelism)."""
    guard_decoders(max_pixels)
    try:
        import cv2

        cv2.setNumThreads(1)
    except ImportError:  # pragma: no cover - cv2 is a dependency
        pass
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # pragma: no cover
        pass


Mark = Callable[[int, int], None]
ANALYSING = -2  # the stage slot of a marker while gapcheck's own analysis (not a stage) runs on a sample


def _no_mark(index: int, stage: int) -> None:
    return None


def run_chunk(specs: tuple[StageSpec, ...], items: tuple[WorkItem, ...], options: WorkerOptions) -> list[SampleRecord]:
    """A batch of samples in this process; stages are resolved once per batch (imports are cached per process)."""
    stages = [(spec, resolve(spec)) for spec in specs]
    return [process_sample(stages, item, options) for item in items]


# OpenCV's cv2.imread and cv2.imdecode return None for what they cannot read (bytes given to imread, a path to
# imdecode) instead of raising, so a wrongly declared OpenCV stage often ends so; said apart from other outputs.
RETURNED_NONE = "stage returned None, not an array"


def _call(spec: StageSpec, fn: Callable[..., Any], path: str, data: bytes) -> np.ndarray:
    value = fn(data if spec.accepts == "bytes" else path)
    if value is None:
        raise TypeError(RETURNED_NONE)
    output = to_numpy(value)
    if output.dtype == object or not (np.issubdtype(output.dtype, np.number) or output.dtype == np.bool_):
        raise TypeError(f"stage returned {type(output).__name__} of dtype {output.dtype}, not a numeric array")
    # One C-order copy of a strided output (a permuted torch tensor is channels-last in memory) serves the
    # fingerprint, the statistics, the twin check, the deltas and the KS sample; each would gather it again.
    return contiguous(output)


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")


def _error_text(exc: BaseException) -> str:
    """``Type: message``, reproducible (no object addresses) and naming a stage file loaded by path as the user gave
    it, not by gapcheck's internal module name (``<stages.py:Thing object>``). A file name that is bytes (the
    file's bytes given to a stage that opens a path: "File name too long: b'\\x89PNG...'") is said, not dumped."""
    said = str(exc)
    if isinstance(exc, OSError) and isinstance(exc.filename, (bytes, bytearray)):
        said = f"[Errno {exc.errno}] {exc.strerror}: a file name of {len(exc.filename):,} bytes (the file's bytes?)"
    kind = type(exc).__name__
    if type(exc).__module__ == "cv2":  # "cv2.error: OpenCV(5.1.0) error: ...", not a bare "error: ..."
        kind, said = "cv2.error", said.replace(" :-1: ", " ")  # OpenCV's "no source line" marker says nothing
    return shown_names(_ADDRESS.sub(">", f"{kind}: {_one_line(said)}"))[:500]


def _one_line(text: str) -> str:
    """A stage's error text on one line: its lines joined (OpenCV's span several, the fact on a later one, each
    overload's complaint repeated), control characters shown as escapes (``\\x1b``): a stage's text must not move
    the cursor or start a line of its own in the console."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return safe_line(" ".join(line for i, line in enumerate(lines) if i == 0 or line != lines[i - 1]))


def _stage_error_text(spec: StageSpec, exc: BaseException, fn: Callable[..., Any] | None = None) -> str:
    """The stage's error; when it says the stage was given the other kind of argument, also what it was given and
    how to declare it (``def pre(data: bytes)`` called with a path raised only "a bytes-like object is required,
    not 'str'"; ``Image.open(data)`` given the bytes only "embedded null byte"). ``fn``: the stage's callable, whose
    code says whether a None it returned can come from a read given the wrong kind of input."""
    text = _error_text(exc)
    symptom = _opencv_symptom(exc)
    if symptom == "empty" and not _empty_from_wrong_kind(spec, exc):
        symptom = "empty_unexplained"  # a crop outside the image is no reason to declare ,bytes
    if symptom == "none" and not _reads_wrong_kind(spec, _callable_names(fn)):
        symptom = "none_unexplained"  # a function that forgot its return statement neither
    if symptom is not None:
        text = f"{text[:300]} ({opencv_given_text(spec, symptom)})"
    elif _wrong_argument(spec, exc):
        text = f"{text[:300]} ({given_text(spec)})"
    return text


# OpenCV's complaints about an argument of the wrong kind (5.x and 4.x bindings; 4.1-4.4 raised them as TypeError),
# each naming the argument: only the image arguments say the stage was given the wrong kind of input
# ("Can't parse 'dsize'" is a wrong size, not a wrong input).
_OPENCV_WRONG_ARGUMENT = re.compile(
    r"Expected '(?P<a>\w+)' to be a str or path-like|Can't parse '(?P<b>\w+)'"
    r"|Can't convert object of type '\w+' to '\w+' for '(?P<c>\w+)'"
    r"|Expected (?:Ptr<)?cv::UMat>? for argument '(?P<d>\w+)'|(?P<e>\w+) is not a numpy array, neither a scalar")
_OPENCV_IMAGE_ARGUMENTS = {"filename": "filename", "buf": "array", "src": "array", "src1": "array", "img": "array",
                           "image": "array"}
_OPENCV_EMPTY = re.compile(r"!\s*\w+\.empty\(\)")  # "(-215:Assertion failed) !_src.empty() in function 'cvtColor'"


def _opencv_symptom(exc: BaseException) -> str | None:
    """How a stage's error says OpenCV got the wrong kind of input (a key of ``stages.OPENCV_SYMPTOMS``), or None:
    the stage returned None, an OpenCV call got an empty image, or one refused its image argument."""
    said = str(exc)
    if isinstance(exc, TypeError) and said == RETURNED_NONE:
        return "none"
    opencv = type(exc).__module__ == "cv2"
    if opencv and _OPENCV_EMPTY.search(said):
        return "empty"
    if not (opencv or isinstance(exc, TypeError)):
        return None
    for match in _OPENCV_WRONG_ARGUMENT.finditer(said):
        argument = next(name for name in match.groups() if name)
        if argument in _OPENCV_IMAGE_ARGUMENTS:
            return _OPENCV_IMAGE_ARGUMENTS[argument]
    return None


def _empty_from_wrong_kind(spec: StageSpec, exc: BaseException) -> bool:
    """Whether an OpenCV empty-image assertion points at the stage's input kind: a stage given the file's bytes whose
    code calls cv2.imread (it returns None for bytes, so the image after it is empty whatever else the stage does), or a
    stage given a path whose code calls cv2.imdecode, one of whose own variables is None when it failed (a decode
    that returned None). Any other empty image (a crop or ROI outside the image, a read of a file OpenCV cannot decode)
    says nothing about the input kind."""
    names, none_assigned = _stage_frames(exc)
    return _reads_wrong_kind(spec, names) and (spec.accepts == "bytes" or none_assigned)


def _reads_wrong_kind(spec: StageSpec, names: frozenset[str]) -> bool:
    """Whether code using ``names`` calls the OpenCV read that returns None for the input kind the stage was given:
    cv2.imread for the file's bytes, cv2.imdecode for a path."""
    return ("imread" if spec.accepts == "bytes" else "imdecode") in names


def _callable_names(fn: Callable[..., Any] | None) -> frozenset[str]:
    """The names a stage's code uses, and those of the module functions it calls by name (one level: a stage that
    returns ``load(path)`` where ``load`` calls cv2.imread); nothing for a callable without Python code."""
    target = getattr(fn, "func", fn)  # a functools.partial's function
    if not isinstance(target, (FunctionType, MethodType)):
        # a callable object's __call__ method, found on its class as Python calls it
        target = next((vars(cls)["__call__"] for cls in type(target).__mro__ if "__call__" in vars(cls)), None)
    code, module = getattr(target, "__code__", None), getattr(target, "__globals__", {})
    if not isinstance(code, CodeType):
        return frozenset()
    names = _code_names(code)
    for name in list(names):
        helper = getattr(module.get(name), "__code__", None)
        if isinstance(helper, CodeType):
            names |= _code_names(helper)
    return frozenset(names)


_GAPCHECK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _stage_frames(exc: BaseException) -> tuple[frozenset[str], bool]:
    """What the frames ``exc`` passed through in the stage's own code (gapcheck's left out: a declared step list is
    not the user's code) say: the names their code uses (``cv2.imread`` is the attribute name ``imread``; functions
    and comprehensions defined inside them included), and whether a variable they assign, not an argument, is None."""
    names: set[str] = set()
    none_assigned = False
    tb = exc.__traceback__
    while tb is not None:
        frame, tb = tb.tb_frame, tb.tb_next
        code = frame.f_code
        if code.co_filename.startswith(_GAPCHECK_DIR):
            continue
        names |= _code_names(code)
        assigned = code.co_varnames[code.co_argcount + code.co_kwonlyargcount :]
        none_assigned |= any(name in frame.f_locals and frame.f_locals[name] is None for name in assigned)
    return frozenset(names), none_assigned


def _code_names(code: CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, CodeType):
            names |= _code_names(const)
    return names


def _wrong_argument(spec: StageSpec, exc: BaseException) -> bool:
    """Whether ``exc`` looks like a stage given a path (str) when it takes bytes, or the file's bytes when it takes a
    path: a TypeError about str or bytes either way; for bytes used as a file name, what ``open()`` raises on
    them: "embedded null byte" (every image format's header has a NUL), or an OSError naming a bytes file (none
    found, or the name too long)."""
    said = str(exc)
    if isinstance(exc, TypeError):
        return not said.startswith("stage returned") and ("bytes" in said or "str" in said)
    if spec.accepts != "bytes":
        return False
    if isinstance(exc, ValueError) and "null byte" in said:
        return True
    return isinstance(exc, OSError) and isinstance(exc.filename, (bytes, bytearray))


def ks_subsample(chw: np.ndarray, points: int) -> np.ndarray:
    """``points`` evenly spaced values per channel, as float32 (only those values are converted)."""
    channels = chw.shape[0]
    per_channel = chw.size // channels if channels else 0
    if per_channel == 0:
        return np.zeros((channels, 0), np.float32)
    rows, cols = _ks_positions(chw.shape[1:], points)
    return chw[:, rows, cols].astype(np.float32)


@lru_cache(maxsize=32)
def _ks_positions(plane: tuple[int, ...], points: int) -> tuple[np.ndarray, ...]:
    """Evenly spaced flat positions in one channel plane, unravelled (so a strided view, HWC seen as CHW, is
    indexed without a copy); the same for every output of that shape, so computed once per shape."""
    per_channel = math.prod(plane)
    idx = np.linspace(0, per_channel - 1, min(points, per_channel)).astype(np.int64)
    positions = np.unravel_index(idx, plane)
    for array in positions:
        array.flags.writeable = False  # shared by every later call
    return positions


def pair_delta(a_name: str, a: np.ndarray, a_summary: ArraySummary, b_name: str, b: np.ndarray,
               b_summary: ArraySummary | None = None) -> PairDelta:
    if a.shape != b.shape:
        a, b = unbatched(a), unbatched(b)  # a leading batch axis of 1 added (or dropped) by one stage: serving code
        if a.shape != b.shape and {a.ndim, b.ndim} == {2, 3}:
            # a grayscale image as (H, W) on one side, (1, H, W) or (H, W, 1) on the other: the same picture
            a, b = without_lone_channel(a), without_lone_channel(b)
        if a.shape != b.shape:
            return PairDelta(a_name, b_name, False, math.inf, -math.inf)
    if b_summary is not None and a_summary.sha256 == b_summary.sha256 and a_summary.nonfinite == 0:
        # Equal canonical fingerprints mean equal dtype, shape and bytes: |Δ| is exactly 0 everywhere.
        return PairDelta(a_name, b_name, True, 0.0, math.inf)
    if a_summary.nonfinite or (b_summary is not None and b_summary.nonfinite):
        # NaN/inf never agree within a tolerance; the nonfinite_output finding names the stage.
        return PairDelta(a_name, b_name, True, math.inf, -math.inf)
    # float32 unless an input needs more (float64, large ints): 8-bit and float32 outputs differ exactly in float32.
    diff = np.subtract(a, b, dtype=np.result_type(a.dtype, b.dtype, np.float32))
    np.abs(diff, out=diff)
    max_abs = float(diff.max()) if diff.size else 0.0
    np.square(diff, out=diff)
    # Summed in the difference's own dtype (numpy sums pairwise: ~1e-7 relative in float32, a PSNR off by
    # ~1e-6 dB); in float64 only when float32 overflows.
    total = float(diff.sum()) if diff.size else 0.0
    mse = total / diff.size if math.isfinite(total) and diff.size else \
        float(np.mean(diff, dtype=np.float64)) if diff.size else 0.0
    peak = a_summary.max - a_summary.min if math.isfinite(a_summary.max - a_summary.min) else 1.0
    peak = peak if peak > 0 else 1.0
    psnr = math.inf if mse == 0 else 10.0 * math.log10(peak * peak / mse) if math.isfinite(mse) else -math.inf
    return PairDelta(a_name, b_name, True, max_abs if math.isfinite(max_abs) else math.inf, psnr)


def unbatched(array: np.ndarray) -> np.ndarray:
    """``array`` without its leading batch axes of size 1 (as :func:`~gapcheck.preprocess.layout.detect_layout` counts
    them: only past three dimensions, so a one-channel CHW image keeps its channel axis); a view, no copy."""
    batch = detect_layout(array.shape).batch_dims
    return array.reshape(array.shape[batch:]) if batch else array


def process_sample(stages: list[tuple[StageSpec, Callable[..., Any]]], item: WorkItem, options: WorkerOptions,
                   mark: Mark = _no_mark) -> SampleRecord:
    """Screen one sample and run every stage on it; ``mark(index, stage)`` is called before each stage runs
    (the supervising parent reads it when a stage kills this process)."""
    try:
        data = read_regular_file(item.path)  # never more than MAX_SAMPLE_BYTES, for byte and path stages alike
    except OSError as exc:
        issue = InputIssue(UNREADABLE, str(exc) if isinstance(exc, SampleTooLarge) else _error_text(exc))
        return SampleRecord(item.index, item.path, "", 0, Screening(issue), issue, (), ())
    raw_sha = sha256_bytes(data)
    screening = screen_bytes(data, options.max_pixels)
    if screening.issue is not None and screening.issue.skipped:
        return SampleRecord(item.index, item.path, raw_sha, len(data), screening, screening.issue, (), ())

    observations: list[StageObservation] = []
    outputs: dict[str, tuple[np.ndarray, ArraySummary]] = {}
    observed: dict[str, StageObservation] = {}
    dead = dict(item.dead)
    with local_path(item.path, data) as path:  # a URL's bytes in a private temporary file, for stages that take a path
        for position, (spec, fn) in enumerate(stages):
            if spec.name in dead:
                observations.append(StageObservation(spec.name, False, dead[spec.name]))
                continue
            mark(item.index, position)
            observation, output = _observe(spec, fn, item, path, data, options, _twin(outputs, observed))
            observations.append(observation)
            if output is not None:
                outputs[spec.name] = (output, observation.stats)
                observed[spec.name] = observation

    mark(item.index, ANALYSING)
    issue = screening.issue
    if len(outputs) < len(stages):
        # Tell a corrupt or truncated file (an input problem) from a stage bug.
        decode_issue = full_decode_issue(data, options.max_pixels)
        if decode_issue is not None:
            issue = decode_issue
    deltas = _deltas([s.name for s, _ in stages], outputs)
    profile = None
    first = stages[0][0].name if stages else None
    if item.profile and first in outputs and stages[0][0].recipe is None:
        profile = _first_stage_profile(data, outputs[first][0], options.max_pixels)
    return SampleRecord(item.index, item.path, raw_sha, len(data), screening, issue, tuple(observations), deltas,
                        profile)


TwinFn = Callable[[np.ndarray], "StageObservation | None"]


def _twin(outputs: dict[str, tuple[np.ndarray, ArraySummary]], observed: dict[str, StageObservation]) -> TwinFn:
    """Finds an earlier stage whose output on this sample is the very same array (dtype, shape, every value).

    Stages that agree usually agree bit for bit (train and val without augmentation): the second one's fingerprint,
    statistics and KS values are then the first one's, and are not computed again (the hashing and statistics of a
    stage output are most of the audit's own per-sample cost). NaN never compares equal, so such outputs are
    always summarized on their own.
    """
    def find(output: np.ndarray) -> StageObservation | None:
        compared: set[int] = set()
        for name, (array, summary) in outputs.items():
            if id(summary) in compared:
                continue  # a twin of a stage already compared with
            compared.add(id(summary))
            if array.shape == output.shape and array.dtype == output.dtype and _same_values(array, output):
                return observed[name]
        return None

    return find


def _same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Every value equal; a strided sample first, so outputs that differ (almost always in many places) cost little."""
    if a.flags.c_contiguous and b.flags.c_contiguous and a.size > 4096:
        step = a.size // 1024
        if not np.array_equal(a.reshape(-1)[::step], b.reshape(-1)[::step]):
            return False
    return bool(np.array_equal(a, b))


def _deltas(names: list[str], outputs: dict[str, tuple[np.ndarray, ArraySummary]]) -> tuple[PairDelta, ...]:
    """Every pair's delta; a pair whose outputs are the same arrays as an already measured pair's reuses its numbers."""
    alias: dict[str, str] = {}
    for name in names:
        if name in outputs:
            alias[name] = next((a for a in alias if alias[a] == a and outputs[a][1].sha256 == outputs[name][1].sha256
                                and outputs[a][1].nonfinite == 0), name)
    measured: dict[tuple[str, str], PairDelta] = {}
    deltas = []
    for a, b in combinations(names, 2):
        if a not in outputs or b not in outputs:
            continue
        key = (alias[a], alias[b])
        if key not in measured:
            measured[key] = pair_delta(a, outputs[a][0], outputs[a][1], b, outputs[b][0], outputs[b][1])
        deltas.append(replace(measured[key], a=a, b=b))
    return tuple(deltas)


def _observe(spec: StageSpec, fn: Callable[..., Any], item: WorkItem, path: str, data: bytes,
             options: WorkerOptions, twin_of: TwinFn | None = None) -> tuple[StageObservation, np.ndarray | None]:
    """Run one stage on one sample: its observation (summary, layout, repeats, KS values) and its output."""
    try:
        output = _call(spec, fn, path, data)
    except Exception as exc:  # noqa: BLE001 - a stage's own error is reported with the sample
        return StageObservation(spec.name, False, _stage_error_text(spec, exc, fn)), None
    twin = twin_of(output) if twin_of is not None else None
    repeats = _repeats(spec, fn, item, path, data, options)
    kept = output if item.keep_arrays else None
    if twin is not None:
        return replace(twin, stage=spec.name, repeat_fingerprints=repeats, array=kept), output
    info = detect_layout(output.shape)
    summary = summarize_output(output, info.channel_axis)
    chw = chw_view(output, info)
    ks_values = ks_subsample(chw, options.ks_points) if chw is not None else None
    return StageObservation(spec.name, True, "", summary, info, repeats, ks_values, kept), output


def _repeats(spec: StageSpec, fn: Callable[..., Any], item: WorkItem, path: str, data: bytes,
             options: WorkerOptions) -> tuple[str, ...]:
    """The fingerprints of ``options.repeats`` more runs on a probe sample (nondeterminism); () elsewhere."""
    repeats: tuple[str, ...] = ()
    if item.probe:
        repeat_list = []
        for _ in range(options.repeats):
            try:
                repeat_list.append(fingerprint(_call(spec, fn, path, data)))
            except Exception as exc:  # noqa: BLE001 - a stage that fails only sometimes is nondeterministic too
                repeat_list.append(f"error: {_error_text(exc)}")
        repeats = tuple(repeat_list)
    return repeats


def _first_stage_profile(data: bytes, output: np.ndarray, max_pixels: int) -> StageProfile | None:
    """The reference stage's replayed geometry and resize method (the stage table's resize column)."""
    try:
        chw = to_chw(output)
        return fit_profile(decode_rgb(data, max_pixels), chw) if chw is not None else None
    except Exception as exc:  # noqa: BLE001 - the parent replays again if this cannot
        logger.debug("profile replay failed in the worker: %s", exc)
        return None

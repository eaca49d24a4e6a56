"""``gapcheck precision``'s entry point: load, export, analyse FP16 or INT8, fix, verify, return the result.

The request holds the option groups (:mod:`gapcheck.groups`): ``ModelSource.load()``, ``InputSource.samples()``,
``ToleranceSpec.policy("fp16")`` (the FP16 verdict) and ``ExportSpec.obtain()`` (the one export path and cache).
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gapcheck.atomic import check_not_input
from gapcheck.errors import UsageError
from gapcheck.groups import ExportSpec, InputSource, ModelSource, ToleranceSpec
from gapcheck.groups.base import check_output_file
from gapcheck.precision.graph import Graph, describe
from gapcheck.precision.outcome import DEFAULT_TARGET, write_fix  # noqa: F401 - their public home too
from gapcheck.precision.targets import Target
from gapcheck.progress import NullProgress, ProgressReporter

PRECISIONS = ("fp16", "int8")
# --text-samples: how many --input-shaped batches of sentences are read while --num-samples is left at its default
# (1, which means one random draw): the user's real sentences calibrate and verify, not only the file's first one.
TEXT_BATCHES = 16


@dataclass(frozen=True)
class PrecisionRequest:
    model: ModelSource
    inputs: InputSource = field(default_factory=InputSource)
    tolerance: ToleranceSpec = field(default_factory=ToleranceSpec)
    export: ExportSpec = field(default_factory=ExportSpec)
    precision: str = "fp16"
    fix_path: Path | None = None
    calibration: Path | None = None
    calibration_stage: str | None = None
    calibration_method: str = "minmax"
    int8_mode: str = "auto"  # auto | static | dynamic
    targets: tuple[Target, ...] = ()
    max_runs: int = 3  # FP16: verification runs at most
    sensitivity: str = "local"  # INT8's ranking: local (own error) or alone (outputs' error, only it quantized)
    # Where a verified model goes instead of ``fix_path`` (gapcheck export: a Triton model repository); returns the
    # path written. Nothing is written, here or there, unless the fix is verified.
    deploy: Callable[[Any], Path] | None = None

    @property
    def fixing(self) -> bool:
        return self.fix_path is not None or self.deploy is not None

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise UsageError(f"precision must be one of {', '.join(PRECISIONS)}, not {self.precision!r}",
                             parameter="precision")
        if self.int8_mode not in ("auto", "static", "dynamic"):
            raise UsageError(f"INT8 mode must be auto, static or dynamic, not {self.int8_mode!r}", parameter="int8_mode")
        if self.sensitivity not in ("local", "alone"):
            raise UsageError(f"sensitivity must be local or alone, not {self.sensitivity!r}", parameter="sensitivity")
        if self.precision == "fp16" and (self.calibration is not None or self.targets or self.sensitivity != "local"):
            raise UsageError("calibration, targets and --sensitivity are for INT8; FP16 is judged by the tolerance "
                             "(--rtol/--atol) and ranked by local error")
        if self.calibration is not None and not Path(self.calibration).exists():
            raise UsageError(f"calibration path {self.calibration} does not exist", parameter="calibration")
        check_output_file(self.fix_path, "fixed model")
        if self.fix_path is not None:
            fix = Path(self.fix_path).resolve()
            for other in (self.export.save_onnx, self.model.checkpoint):
                if other is not None and Path(other).resolve() == fix:
                    raise UsageError(f"the fixed model would overwrite {other}: give another path", parameter="fix_path")
            check_not_input(self.fix_path, "--fix", self._read())
            self._check_not_among_samples()

    def _check_not_among_samples(self) -> None:
        """A folder of raw calibration samples is read whole: a fixed model written into it (even a new file) would
        be the next run's calibration sample, and its stage fails on it. Compared by real path."""
        assert self.fix_path is not None
        folder = None if self.calibration is None else Path(self.calibration)
        if folder is not None and folder.is_dir() and Path(self.fix_path).resolve().is_relative_to(folder.resolve()):
            raise UsageError(f"--fix path {self.fix_path} lies inside the calibration folder {folder}: every file "
                             "there is read as a sample (the next run would calibrate on the model); give a path "
                             "outside it", parameter="fix_path")

    def _read(self) -> list[tuple[str, Path]]:
        """The files and folders the run reads: the fixed model never replaces one, nor lands among the samples."""
        text = self.inputs.text_samples
        text_path = None if text is None else Path(text) if Path(text).exists() else Path(text.rpartition(":")[0] or text)
        read = [("--checkpoint", self.model.checkpoint), ("--inputs", self.inputs.file),
                ("--calibration", self.calibration), ("--text-samples", text_path)]
        return [(flag, Path(path)) for flag, path in read if path is not None]


@dataclass
class Context:
    """What both precisions start from: the model in eval mode, the inputs, the export, its graph."""

    request: PrecisionRequest
    module: Any
    samples: list[dict[str, np.ndarray]]
    graph: Graph
    output_names: list[str]
    timings: dict[str, float]


def text_batches(inputs: InputSource) -> int | None:
    """The sample count for ``InputSource.samples``: up to ``TEXT_BATCHES`` batches of real sentences unless
    ``--num-samples`` says otherwise (fewer when the file holds fewer); None: the group's own rule."""
    if inputs.text_samples is not None and inputs.num_samples == 1:
        return TEXT_BATCHES
    return None


def run_precision(request: PrecisionRequest, progress: ProgressReporter | None = None) -> Any:
    """Run the request (see the module docstring); returns a :class:`~gapcheck.precision.result.PrecisionResult`.
    ``progress`` (a :class:`~gapcheck.progress.ProgressReporter`) is told each stage: export, then the run."""
    from gapcheck.export_diff.runner import evaluation_mode
    from gapcheck.precision.calibration import check_fit
    reporter = progress or NullProgress()
    start = time.perf_counter()
    reporter.start("precision: load and export", None)
    loaded = request.model.require().load()
    with evaluation_mode(loaded.module, keep_train_mode=False):
        samples = request.inputs.samples(module=loaded.module, count=text_batches(request.inputs))
        exported, names = request.export.obtain(loaded.module, samples[0], cache=request.export.cache(request.model))
        request.export.save(exported.model)
        graph = describe(exported.model, [p for p, _ in loaded.module.named_modules() if p])
        check_fit(graph.model, samples, "input")
        context = Context(request, loaded.module, samples, graph, names, {"load_export_s": time.perf_counter() - start})
        fixing = " and fix" if request.fix_path is not None else ""
        reporter.start(f"precision: {request.precision} layer-wise run{fixing}", None)
        if request.precision == "fp16":
            from gapcheck.precision.run_fp16 import run_fp16

            result = run_fp16(context)
        else:
            from gapcheck.precision.run_int8 import run_int8

            result = run_int8(context)
    reporter.finish()
    return dataclasses.replace(result, run_timings={**context.timings, "total_s": time.perf_counter() - start})

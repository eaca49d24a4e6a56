"""`gapcheck export-diff`: parse, call :func:`gapcheck.export_diff.run_export_diff`, render, exit 0/1."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Optional

import typer
from rich.console import Console

from gapcheck.cli.choices import Precision
from gapcheck.cli.groups import Groups, declare, use
from gapcheck.cli.options import ProgressOpt
from gapcheck.cli.triton_options import triton_errors
from gapcheck.errors import UsageError
from gapcheck.groups import ExportSpec, Group, InputSource, ModelSource, Opt, ReportTargets, ToleranceSpec, TritonTarget
from gapcheck.precision.spec import PrecisionSpec


def parse_batch_sizes(text: str | None) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(f"--batch-sizes must be comma-separated integers, got {text!r}") from None
    if not sizes or any(size < 1 for size in sizes):
        raise UsageError(f"--batch-sizes must be positive integers, got {text!r}")
    return sizes


_PRECISIONS = frozenset({p.value for p in Precision} | {"int8"})


@dataclass(frozen=True)
class Comparison(Group):
    """export-diff's own comparison options, with their ``[export_diff]`` keys: a group like the shared ones, so
    :func:`gapcheck.cli.groups.resolve` merges them too (file < environment < flags)."""

    # None: not given, the file's own precision (FP16 for a file that computes in FP16 or a deployment that declares
    # FP16 tensors, else FP32); an explicit "fp32" compares with FP32 budgets even then
    precision: str | None = None
    batch_sizes: tuple[int, ...] = ()
    max_intermediate_mb: int = 1024
    keep_train_mode: bool = False

    OPTIONS: ClassVar[tuple[Opt, ...]] = (
        Opt("precision", "--precision", "Budgets to compare with: fp32, fp16 or bf16 (default: the deployment's own "
            "precision, FP16 for an FP16 file or deployment, else FP32); fp16 on an FP32 model checks what an FP16 "
            "deployment computes; int8, or fp16 with --fix OUT, finds the modules that break, writes the fixed model "
            "and verifies it (as gapcheck precision).", Optional[str], key="precision"),
        Opt("batch_sizes", "--batch-sizes", "Check batch consistency, e.g. 1,4.", Optional[str], key="batch_sizes"),
        Opt("max_intermediate_mb", "--max-intermediate-mb", "Memory for marked ONNX intermediates per run.", int,
            key="max_intermediate_mb", low=1, high=2**31),
        Opt("keep_train_mode", "--keep-train-mode", "Do not switch a training-mode model to eval().", bool),
    )

    def check(self) -> None:
        if self.precision is not None and (not isinstance(self.precision, str) or self.precision not in _PRECISIONS):
            raise UsageError(f"--precision must be fp32, fp16, bf16 or int8, not {self.precision!r}",
                             parameter="precision", hint="leave it out to compare in the deployment's own precision")

    @classmethod
    def from_cli(cls, values: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
        """``--batch-sizes 1,4`` from the command line, ``batch_sizes = [1, 4]`` from the config."""
        sizes = values.get("batch_sizes")
        values["batch_sizes"] = parse_batch_sizes(sizes) if isinstance(sizes, str) or sizes is None else tuple(sizes)
        precision = getattr(values.get("precision"), "value", values.get("precision"))
        # FP16 as the docs write it is fp16; anything else is refused by check() with the value as given
        values["precision"] = precision.lower() if isinstance(precision, str) and precision.lower() in _PRECISIONS \
            else precision
        return values


# export-diff's other own options (flags only)
_Onnx = Annotated[Optional[Path], typer.Option("--onnx", help="Compare this ONNX file instead of exporting.")]
_TritonLayers = Annotated[bool, typer.Option(
    "--triton-layers", help="Also compare layer by layer on the server (loads a temporary twin; needs explicit model control).")]
_TwinFile = Annotated[list[Path], typer.Option(
    "--twin-file", help="A file the twin needs besides model.onnx (e.g. a Python backend's model.py).")]

_PadCheck = Annotated[bool, typer.Option(
    "--pad-check", help="Check padding invariance: sequences padded to other lengths/sides must give the same outputs.")]
_PadSide = Annotated[str, typer.Option("--pad-side", help="Padding side(s) to check: right, left or both.")]
_PadLengths = Annotated[Optional[str], typer.Option(
    "--pad-lengths", help="Padded lengths, e.g. 64,96,128 (default: two lengths up to the input's length).")]
_PadId = Annotated[Optional[int], typer.Option(
    "--pad-id", min=0, help="Token id padding is filled with (default: the model's config.pad_token_id, else 0).")]
_PadInputs = Annotated[Optional[str], typer.Option(
    "--pad-inputs", help="TOKENS[,MASK] input names (default: the first integer input, and an input named *mask*).")]


def parse_pad_check(enabled: bool, side: str, lengths: str | None, inputs: str | None,
                    pad_id: int | None = None) -> Any:
    """The padding-check request from the --pad-* flags (None when --pad-check is not given)."""
    if not enabled:
        if lengths or inputs or side != "right" or pad_id is not None:
            raise UsageError("--pad-side, --pad-lengths, --pad-inputs and --pad-id need --pad-check")
        return None
    from gapcheck.export_diff.api import PadCheckRequest

    sides = {"right": ("right",), "left": ("left",), "both": ("right", "left")}.get(side)
    if sides is None:
        raise UsageError(f"--pad-side must be right, left or both, not {side!r}")
    try:
        parsed = tuple(int(part) for part in (lengths or "").split(",") if part.strip())
    except ValueError:
        raise UsageError(f"--pad-lengths must be comma-separated integers, got {lengths!r}") from None
    if lengths is not None and not parsed:
        raise UsageError(f"--pad-lengths must be comma-separated integers, got {lengths!r}")
    parsed = tuple(sorted(set(parsed)))  # each length runs once
    names = [part.strip() for part in inputs.split(",")] if inputs is not None else []
    if len(names) > 2 or any(not name for name in names):
        raise UsageError(f"--pad-inputs takes TOKENS[,MASK] (two non-empty input names), got {inputs!r}")
    if len(names) == 2 and names[0] == names[1]:
        raise UsageError(f"--pad-inputs names {names[0]!r} as both the token and the mask input")
    return PadCheckRequest(sides=sides, lengths=parsed, token_input=names[0] if names else None,
                           mask_input=names[1] if len(names) > 1 else None, pad_id=pad_id)


#: export-diff compares request by request: no total deadline per endpoint
EXPORT_DIFF_TRITON = use(TritonTarget, skip=("deadline_s",))


@declare(ModelSource, InputSource, ToleranceSpec, ExportSpec, Comparison, use(PrecisionSpec, skip=("precision",)),
         EXPORT_DIFF_TRITON, ReportTargets, section="export_diff")
def command(
    groups: Groups,
    onnx_file: _Onnx = None,
    triton_layers: _TritonLayers = False,
    twin_file: _TwinFile = [],  # noqa: B006 - typer reads the default; it is never mutated
    pad_check: _PadCheck = False,
    pad_side: _PadSide = "right",
    pad_lengths: _PadLengths = None,
    pad_inputs: _PadInputs = None,
    pad_id: _PadId = None,
    progress: ProgressOpt = True,
) -> None:
    """Export a checkpoint to ONNX and compare it with torch, module by module; name the first module that diverges."""
    from gapcheck.cli.rich_progress import RichProgress
    from gapcheck.export_diff.api import ExportDiffRequest, run_export_diff

    padding = parse_pad_check(pad_check, pad_side, pad_lengths, pad_inputs, pad_id)
    triton, comparison = groups[TritonTarget], groups[Comparison]
    if _precision_run(groups, onnx_file=onnx_file, triton_layers=triton_layers, twin_file=twin_file,
                      padding=padding):
        from gapcheck.precision import run_precision

        request = groups[PrecisionSpec].request(
            model=groups[ModelSource].require(), inputs=groups[InputSource], tolerance=groups[ToleranceSpec],
            export=groups[ExportSpec], precision=comparison.precision)
        with RichProgress(Console(emoji=False, stderr=True), enabled=progress) as bar:  # the stages, as `gapcheck precision`
            result = run_precision(request, progress=bar)
        raise typer.Exit(groups[ReportTargets].emit(result))
    request = ExportDiffRequest(
        model=groups[ModelSource].require(), inputs=groups[InputSource], tolerance=groups[ToleranceSpec],
        export=groups[ExportSpec], triton=triton if triton.given else None, onnx_file=onnx_file,
        batch_sizes=comparison.batch_sizes, precision=comparison.precision, keep_train_mode=comparison.keep_train_mode,
        max_intermediate_bytes=comparison.max_intermediate_mb * 1024 * 1024, deployment=_deployment(triton),
        server_layers=triton_layers, twin_files=tuple(twin_file), pad_check=padding)
    with RichProgress(Console(emoji=False, stderr=True), enabled=progress) as bar, triton_errors():
        result = run_export_diff(request, progress=bar)
    raise typer.Exit(groups[ReportTargets].emit(result))


def _precision_run(groups: Groups, **own: Any) -> bool:
    """Whether this is the reduced-precision run (``--precision int8``, or ``fp16`` with ``--fix`` or another
    precision option): the same request as ``gapcheck precision``. Its options without fp16/int8, and export-diff's
    comparison-only options with it, are usage errors (exit 2) before any work."""
    comparison, spec = groups[Comparison], groups[PrecisionSpec]
    spec.require_precision(comparison.precision, plain=f"export-diff --precision {comparison.precision}")
    if comparison.precision != "int8" and not spec.changed():
        return False  # fp32/bf16, or fp16's layer-wise comparison alone
    flags = {"--onnx": own["onnx_file"] is not None, "--triton-url": groups[TritonTarget].given,
             "--triton-layers": own["triton_layers"], "--twin-file": bool(own["twin_file"]),
             "--pad-check": own["padding"] is not None, "--batch-sizes": bool(comparison.batch_sizes),
             "--keep-train-mode": comparison.keep_train_mode}
    clash = [flag for flag, set_ in flags.items() if set_]
    if clash:
        raise UsageError(f"{', '.join(clash)} compare(s) an FP32 deployment; --precision {comparison.precision} "
                         f"{'--fix ' if spec.fix else ''}checks and fixes the reduced-precision model from the "
                         "checkpoint: run them separately", parameter="precision")
    return True


def _deployment(triton: TritonTarget) -> Any:
    """The Triton deployment to compare, or None; the URL may name the model itself (grpc://host:8001/MODEL?version=N)."""
    from gapcheck.export_diff.api import DeploymentTarget

    if triton.url is None and triton.model is not None:
        raise UsageError("--triton-url and --triton-model go together")
    if triton.url is None:
        return None
    with triton_errors():
        endpoint, served_model, served_version = triton.target()
    return DeploymentTarget(endpoint, model=served_model, version=served_version)

"""CLI option groups, declared once and reused by every command with the same names.

Each group is a set of ``typing.Annotated`` aliases (the flag, its help, its type) and a small
frozen dataclass that gathers the parsed values, so a command's signature reads::

    def command(checkpoint: CheckpointOpt = None, model: ModelOpt = None, ..., json_path: JsonOpt = None, ...):
        reports = prepare_reports(json=json_path, junit=junit_path, html=html_path)   # paths checked: exit 2 now
        ...work...
        emit_reports(result, reports)                                                  # atomic writes
        raise typer.Exit(ExitCode.for_verdict(result.verdict))

Groups: model loading, inputs, tolerances, reports, progress, config. The Triton endpoint group
lives in :mod:`gapcheck.cli.triton_options`. Nothing here imports torch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from gapcheck.errors import UsageError
from gapcheck.report.formats import ReportFormat, check_writable, write_report

if TYPE_CHECKING:
    from gapcheck.report.contract import CommandResult

# --- model loading ------------------------------------------------------------------------------
CheckpointOpt = Annotated[Optional[Path], typer.Option(
    "--checkpoint", help="State dict (.pt/.pth/.safetensors) or TorchScript archive.")]
ModelOpt = Annotated[Optional[str], typer.Option(
    "--model", help="Factory building the model: 'pkg.module:callable' or 'path/file.py:callable'.")]
UnsafePickleOpt = Annotated[bool, typer.Option(
    "--unsafe-pickle", help="Allow loading a full pickled module (runs code from the file!).")]
NonStrictOpt = Annotated[bool, typer.Option(
    "--non-strict", help="Load a checkpoint whose keys do not all match (the mismatch is reported).")]


@dataclass(frozen=True)
class ModelOptions:
    checkpoint: Path | None = None
    factory: str | None = None
    unsafe_pickle: bool = False
    strict: bool = True

    def fields(self) -> dict[str, Any]:
        """As the library's keyword parameters (checkpoint, factory, unsafe_pickle, strict)."""
        return {"checkpoint": self.checkpoint, "factory": self.factory, "unsafe_pickle": self.unsafe_pickle,
                "strict": self.strict}


# --- inputs -------------------------------------------------------------------------------------
InputSpecOpt = Annotated[list[str], typer.Option(
    "--input", help="name:shape:dtype[:low,high], e.g. x:1x3x224x224:float32 (repeatable).")]
InputsFileOpt = Annotated[Optional[Path], typer.Option("--inputs", help="Real inputs: .npz or .pt, axis 0 = samples.")]
NumSamplesOpt = Annotated[int, typer.Option("--num-samples", min=1, help="Random input draws (ignored with --inputs).")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for random inputs.")]


@dataclass(frozen=True)
class InputOptions:
    specs: tuple[str, ...] = ()
    file: Path | None = None
    num_samples: int = 1
    seed: int = 0

    def fields(self) -> dict[str, Any]:
        """As the library's keyword parameters (input_specs, inputs_file, num_samples, seed)."""
        return {"input_specs": self.specs, "inputs_file": self.file, "num_samples": self.num_samples, "seed": self.seed}


# --- tolerances ---------------------------------------------------------------------------------
RtolOpt = Annotated[Optional[float], typer.Option("--rtol", help="Relative tolerance (default: per dtype).")]
AtolOpt = Annotated[Optional[float], typer.Option("--atol", help="Absolute tolerance (default: per dtype).")]
ToleranceOverrideOpt = Annotated[list[str], typer.Option(
    "--tolerance", help="Per-module/output override PATTERN=RTOL,ATOL (glob; repeatable).")]


@dataclass(frozen=True)
class ToleranceOptions:
    rtol: float | None = None
    atol: float | None = None
    overrides: dict[str, tuple[float, float]] = field(default_factory=dict)

    @classmethod
    def parse(cls, rtol: float | None, atol: float | None, items: list[str]) -> ToleranceOptions:
        return cls(rtol=rtol, atol=atol, overrides=parse_overrides(items))


def parse_overrides(items: list[str]) -> dict[str, tuple[float, float]]:
    """``--tolerance 'layer1.*=1e-3,1e-4'`` -> {pattern: (rtol, atol)}."""
    overrides = {}
    for item in items:
        pattern, _, numbers = item.partition("=")
        try:
            rtol, atol = (float(x) for x in numbers.split(","))
        except ValueError:
            raise UsageError(f"--tolerance expects PATTERN=RTOL,ATOL, got {item!r}") from None
        if not pattern.strip():
            raise UsageError(f"--tolerance expects PATTERN=RTOL,ATOL, got {item!r}")
        overrides[pattern.strip()] = (rtol, atol)
    return overrides


# --- reports ------------------------------------------------------------------------------------
JsonOpt = Annotated[Optional[Path], typer.Option("--json", help="Write the JSON report here.")]
JunitOpt = Annotated[Optional[Path], typer.Option("--junit", help="Write a JUnit XML report here.")]
HtmlOpt = Annotated[Optional[Path], typer.Option("--html", help="Write a self-contained HTML report here.")]
SarifOpt = Annotated[Optional[Path], typer.Option("--sarif", help="Write a SARIF 2.1.0 report here.")]
MaxRowsOpt = Annotated[int, typer.Option("--max-rows", min=0, help="Rows of each console table to print (0: all).")]

_FLAG = {ReportFormat.JSON: "--json", ReportFormat.JUNIT: "--junit", ReportFormat.HTML: "--html",
         ReportFormat.SARIF: "--sarif"}


@dataclass(frozen=True)
class ReportOptions:
    """Report paths by format; build it with :func:`prepare_reports` so the paths are checked before any work."""

    paths: dict[ReportFormat, Path] = field(default_factory=dict)


def prepare_reports(*, json: Path | None = None, junit: Path | None = None, html: Path | None = None,
                    sarif: Path | None = None) -> ReportOptions:
    """Check every report path now (UsageError, exit 2, before any work); two formats may not share a file."""
    given = {ReportFormat.JSON: json, ReportFormat.JUNIT: junit, ReportFormat.HTML: html, ReportFormat.SARIF: sarif}
    paths = {fmt: path for fmt, path in given.items() if path is not None}
    seen: dict[Path, ReportFormat] = {}
    for fmt, path in paths.items():
        check_writable(path, what=f"{_FLAG[fmt]} report")
        key = path.resolve()
        if key in seen:
            raise UsageError(f"{_FLAG[seen[key]]} and {_FLAG[fmt]} name the same file {path}")
        seen[key] = fmt
    return ReportOptions(paths=paths)


def emit_reports(result: CommandResult, reports: ReportOptions) -> list[Path]:
    """Write every asked-for report atomically (after the work; paths were checked by :func:`prepare_reports`)."""
    return [write_report(fmt, path, result) for fmt, path in reports.paths.items()]


# --- library parameters -> flags -----------------------------------------------------------------
#: The flag of each library parameter a GapcheckError may name (``parameter=``); the CLI boundary adds it.
PARAMETER_FLAGS: dict[str, str] = {
    "checkpoint": "--checkpoint", "factory": "--model", "unsafe_pickle": "--unsafe-pickle", "strict": "--non-strict",
    "input_specs": "--input", "inputs_file": "--inputs", "num_samples": "--num-samples", "seed": "--seed",
    "rtol": "--rtol", "atol": "--atol", "overrides": "--tolerance", "batch_sizes": "--batch-sizes",
    "onnx_file": "--onnx", "exporter": "--exporter", "opset": "--opset", "precision": "--precision",
    "keep_train_mode": "--keep-train-mode", "max_intermediate_bytes": "--max-intermediate-mb",
    "save_onnx": "--save-onnx", "samples": "--samples", "stages": "--stage", "config": "--config",
    "pad_inputs": "--pad-inputs", "pad_lengths": "--pad-lengths",
}


def flag_for(parameter: str | None) -> str | None:
    return PARAMETER_FLAGS.get(parameter) if parameter else None


# --- progress and config ------------------------------------------------------------------------
ProgressOpt = Annotated[bool, typer.Option("--progress/--no-progress", help="Show progress bars on stderr.")]
ConfigOpt = Annotated[Optional[Path], typer.Option(
    "--config", help="gapcheck.toml or pyproject.toml (default: discovered from the current directory).")]


def configured(ctx: typer.Context, section: Any, names: dict[str, str]) -> dict[str, Any]:
    """File < environment < flags: for each ``parameter -> section field``, the section's value when the flag was not given.

    Only values the user left at their default are taken from the config (click knows where each value came from).
    """
    if section is None:
        return {}
    out = {}
    for parameter, key in names.items():
        value = getattr(section, key, None)
        source = ctx.get_parameter_source(parameter)  # typer may vendor click: compare the enum by name
        given = source is not None and getattr(source, "name", "") not in ("DEFAULT", "DEFAULT_MAP")
        if value is not None and not given:
            out[parameter] = value
    return out

"""CLI pieces outside the option groups: the report flags as ``Annotated`` aliases (for commands that are not
declared from :mod:`gapcheck.groups` yet), the library parameter -> flag table, and progress.
The shared options are the groups', derived by :mod:`gapcheck.cli.groups`.
Nothing here imports torch.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from gapcheck.groups import ReportTargets
from gapcheck.groups.tolerance import parse_overrides  # noqa: F401 - its old home, re-exported

if TYPE_CHECKING:
    from gapcheck.report.contract import CommandResult

# --- reports ------------------------------------------------------------------------------------
JsonOpt = Annotated[Optional[Path], typer.Option("--json", help="Write the JSON report here.")]
JunitOpt = Annotated[Optional[Path], typer.Option("--junit", help="Write a JUnit XML report here.")]
HtmlOpt = Annotated[Optional[Path], typer.Option("--html", help="Write a self-contained HTML report here.")]
SarifOpt = Annotated[Optional[Path], typer.Option("--sarif", help="Write a SARIF 2.1.0 report here.")]
MaxRowsOpt = Annotated[int, typer.Option("--max-rows", min=0, help="Rows of each console table to print (0: all).")]

def prepare_reports(*, json: Path | None = None, junit: Path | None = None, html: Path | None = None,
                    sarif: Path | None = None) -> ReportTargets:
    """The report group, its paths checked now (UsageError, exit 2, before any work); for commands not yet
    declared from the groups (lint)."""
    return ReportTargets(json=json, junit=junit, html=html, sarif=sarif)


def emit_reports(result: CommandResult, reports: ReportTargets) -> list[Path]:
    """Write every asked-for report atomically (after the work)."""
    return reports.write(result)


# --- library parameters -> flags -----------------------------------------------------------------
#: The flag of each library parameter a GapcheckError may name (``parameter=``); the CLI boundary adds it.
PARAMETER_FLAGS: dict[str, str] = {
    "checkpoint": "--checkpoint", "factory": "--model", "unsafe_pickle": "--unsafe-pickle", "strict": "--non-strict",
    "input_specs": "--input", "inputs_file": "--inputs", "num_samples": "--num-samples", "seed": "--seed",
    "rtol": "--rtol", "atol": "--atol", "overrides": "--tolerance", "batch_sizes": "--batch-sizes",
    "onnx_file": "--onnx", "exporter": "--exporter", "opset": "--opset", "precision": "--precision",
    "keep_train_mode": "--keep-train-mode", "max_intermediate_bytes": "--max-intermediate-mb",
    "save_onnx": "--save-onnx", "samples": "--samples", "stages": "--stage", "config": "--config",
    "pad_inputs": "--pad-inputs", "pad_lengths": "--pad-lengths", "server_layers": "--triton-layers",
}


def flag_for(parameter: str | None) -> str | None:
    return PARAMETER_FLAGS.get(parameter) if parameter else None


# --- progress and config ------------------------------------------------------------------------
ProgressOpt = Annotated[bool, typer.Option("--progress/--no-progress", help="Show progress bars on stderr.")]
ConfigOpt = Annotated[Optional[Path], typer.Option(
    "--config", help="gapcheck.toml or pyproject.toml (default: discovered from the current directory).")]

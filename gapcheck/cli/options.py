"""CLI pieces outside the option groups: the library parameter -> flag table, progress and --config.
The shared options (reports included) are the groups', derived by :mod:`gapcheck.cli.groups`.
Nothing here imports torch.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from gapcheck.groups.tolerance import parse_overrides  # noqa: F401 - its old home, re-exported

# --- library parameters -> flags -----------------------------------------------------------------
#: The flag of each library parameter a GapcheckError may name (``parameter=``); the CLI boundary adds it.
PARAMETER_FLAGS: dict[str, str] = {
    "checkpoint": "--checkpoint", "factory": "--model", "unsafe_pickle": "--unsafe-pickle", "strict": "--non-strict",
    "state_dict_key": "--state-dict-key",
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

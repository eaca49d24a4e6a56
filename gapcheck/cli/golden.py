"""`gapcheck golden record` / `gapcheck golden verify`: parse, call :mod:`gapcheck.golden`, render, exit.

A bundle that fails verification is an InputError (exit 2) naming the file; a recorded or verified
bundle exits 0.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from gapcheck.cli.options import HtmlOpt, JsonOpt, JunitOpt, ReportOptions, emit_reports, parse_overrides, prepare_reports
from gapcheck.errors import ExitCode, UsageError

app = typer.Typer(name="golden", help="Record and verify golden bundles (the released checkpoint's answers).",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


def _emit(result, reports: ReportOptions) -> None:
    from gapcheck.report.formats.console_format import print_result

    print_result(Console(highlight=False), result)
    emit_reports(result, reports)


@app.command("record", no_args_is_help=True)
def record(
    out: Path = typer.Option(..., "--out", help="Folder to write the bundle into (new or empty)."),
    checkpoint: Optional[Path] = typer.Option(None, "--checkpoint",
        help="The released checkpoint (state dict, safetensors, TorchScript)."),
    model: Optional[str] = typer.Option(None, "--model",
        help="Factory building the model: 'pkg.module:callable' or 'path/file.py:callable'."),
    input_specs: list[str] = typer.Option([], "--input", help="name:shape:dtype[:low,high], batch of 1 (repeatable)."),
    inputs_file: Optional[Path] = typer.Option(None, "--inputs", help="Real golden inputs: .npz or .pt, axis 0 = samples."),
    num_samples: int = typer.Option(64, "--num-samples", min=1, help="Random draws, or raw samples to take from --samples."),
    seed: int = typer.Option(0, "--seed", help="Seed for random inputs."),
    samples: Optional[Path] = typer.Option(None, "--samples", help="Raw samples (folder or file) run through --stage."),
    stage: Optional[str] = typer.Option(None, "--stage", help="The inference preprocessing: NAME=module:callable."),
    rtol: Optional[float] = typer.Option(None, "--rtol", help="Relative tolerance (default: per dtype)."),
    atol: Optional[float] = typer.Option(None, "--atol", help="Absolute tolerance (default: per dtype)."),
    tolerance: list[str] = typer.Option([], "--tolerance", help="Per-output override OUTPUT=RTOL,ATOL (glob; repeatable)."),
    exporter: str = typer.Option("dynamo", "--exporter", help="ONNX exporter: dynamo (falls back) or torchscript."),
    opset: Optional[int] = typer.Option(None, "--opset", help="ONNX opset version."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing bundle in --out."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir",
                                             help="Export cache folder (default ~/.cache/gapcheck/exports)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Always export; neither read nor write the export cache."),
    unsafe_pickle: bool = typer.Option(False, "--unsafe-pickle", help="Allow a full pickled module (runs code from the file!)."),
    json_path: JsonOpt = None,
    junit_path: JunitOpt = None,
    html_path: HtmlOpt = None,
) -> None:
    """Record a golden bundle: inputs, torch and ONNX Runtime outputs, hashes, versions, tolerances."""
    from gapcheck.golden import RecordRequest, record_bundle, recorded_result

    reports = prepare_reports(json=json_path, junit=junit_path, html=html_path)
    if inputs_file is not None and samples is not None:
        raise UsageError("--inputs and --samples are alternatives: give one")
    request = RecordRequest(out=out, factory=model, checkpoint=checkpoint, input_specs=tuple(input_specs),
                            inputs_file=inputs_file, num_samples=num_samples, seed=seed, samples=samples, stage=stage,
                            rtol=rtol, atol=atol, overrides=parse_overrides(tolerance), exporter=exporter, opset=opset,
                            overwrite=overwrite, unsafe_pickle=unsafe_pickle, cache_dir=cache_dir, no_cache=no_cache)
    _emit(recorded_result(record_bundle(request)), reports)
    raise typer.Exit(ExitCode.NO_GAP)


@app.command("verify", no_args_is_help=True)
def verify(
    bundle: Path = typer.Argument(..., help="The golden bundle folder."),
    json_path: JsonOpt = None,
    junit_path: JunitOpt = None,
    html_path: HtmlOpt = None,
) -> None:
    """Verify every file of a golden bundle against the SHA256 in its manifest (exit 2 naming a bad file)."""
    from gapcheck.golden import verify_bundle

    reports = prepare_reports(json=json_path, junit=junit_path, html=html_path)
    _emit(verify_bundle(bundle), reports)
    raise typer.Exit(ExitCode.NO_GAP)

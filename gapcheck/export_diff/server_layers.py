"""Layer-wise comparison on the Triton server's own runtime, through a temporary twin of the served model.

The twin's ONNX marks the mapped module values as extra outputs; it is loaded with
Triton's repository API, run once on one sample, and unloaded whatever happens
(see :func:`gapcheck.triton.twin.compare_intermediates_on_server`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from gapcheck.backends.torch_eager import TorchBackend
from gapcheck.codes.export_diff import SERVER_LAYER_DIVERGENCE
from gapcheck.compare import ErrorStats, TolerancePolicy, compare_arrays
from gapcheck.export_diff.result import FAIL, PASS, ExportDiffResult
from gapcheck.findings import Finding, Severity
from gapcheck.triton.client import TritonEndpoint
from gapcheck.triton.twin import compare_intermediates_on_server


@dataclass(frozen=True)
class ServerLayer:
    module: str
    onnx_value: str
    status: str  # PASS or FAIL
    stats: ErrorStats


def compare_on_server(
    result: ExportDiffResult,
    module: torch.nn.Module,
    sample: dict[str, np.ndarray],
    policy: TolerancePolicy,
    *,
    endpoint: TritonEndpoint,
    model: str,
    version: str | None,
    twin_files: tuple[Path, ...] = (),
) -> tuple[tuple[ServerLayer, ...], list[Finding]]:
    """Compare every mapped module on the server with torch, on ``sample``; findings for server-only divergence."""
    comparable = [layer for layer in result.layers if layer.onnx_value and layer.status in (PASS, FAIL)]
    values = compare_intermediates_on_server(
        endpoint, model, result.onnx_model, [layer.onnx_value for layer in comparable], sample, version=version,
        extra_files={path.name: path.read_bytes() for path in twin_files},
    )
    # torch names all of the model's outputs; the file may hold only some of them
    output_names = list(result.model_outputs) or [o.name for o in result.onnx_model.graph.output]
    capture = TorchBackend(module, list(sample), output_names).capture(sample, modules=[x.module for x in comparable])
    rows = []
    for layer in comparable:
        reference = capture.modules[layer.module].output
        served = values.get(layer.onnx_value)
        if reference is None or served is None:
            continue
        stats = compare_arrays(served, reference, policy.for_name(layer.module, reference.dtype))
        rows.append(ServerLayer(layer.module, layer.onnx_value, PASS if stats.passed else FAIL, stats))
    findings = []
    local_status = {layer.module: layer.status for layer in comparable}
    first = next((row for row in rows if row.status == FAIL), None)
    if first is not None:
        only_server = local_status.get(first.module) == PASS
        findings.append(Finding(
            SERVER_LAYER_DIVERGENCE.code, Severity.GAP,
            f"on the Triton server, {first.module} is the first module that diverges from torch "
            f"(max |err| {first.stats.max_abs:.3g})"
            + ("; ONNX Runtime here matches torch there: the deployment changes it" if only_server else ""),
            where=f"{model} @ {first.module}",
            evidence={"module": first.module, "max_abs": first.stats.max_abs, "server_only": only_server,
                      "diverging_modules": sum(1 for row in rows if row.status == FAIL)},
        ))
    return tuple(rows), findings

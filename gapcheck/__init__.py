"""gapcheck: find where a PyTorch model's behaviour breaks between training, validation and inference.

The public Python API; each CLI command is a thin layer over one of these functions.

- :func:`run_export_diff` / :func:`export_diff`: torch vs ONNX Runtime (and a Triton deployment), layer by layer
- :func:`preprocess_audit`: the same raw samples through train/val/inference preprocessing, with root causes
- :func:`audit_deployment`: a Triton deployment's config against the ONNX graph
- :func:`export_model_repository`: checkpoint -> ONNX -> Triton model repository

Attributes load lazily (PEP 562): ``import gapcheck`` imports no torch, numpy, ONNX Runtime or
tritonclient, so the CLI's ``--help`` and ``gapcheck explain`` start fast. ``gapcheck.run_export_diff``
imports what it needs on first use.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gapcheck.version import __version__

#: public name -> module that defines it (imported on first access)
_LAZY: dict[str, str] = {
    "DeploymentTarget": "gapcheck.export_diff.api",
    "ExportDiffRequest": "gapcheck.export_diff.api",
    "run_export_diff": "gapcheck.export_diff.api",
    "ExportDiffResult": "gapcheck.export_diff.result",
    "export_diff": "gapcheck.export_diff.runner",
    "load_samples_file": "gapcheck.inputs",
    "parse_input_spec": "gapcheck.inputs",
    "random_samples": "gapcheck.inputs",
    "export_onnx": "gapcheck.model.export",
    "load_onnx": "gapcheck.model.export",
    "load_model": "gapcheck.model.loading",
    "check_metric": "gapcheck.metrics.check",
    "preprocess_audit": "gapcheck.preprocess.audit",
    "fingerprint": "gapcheck.tensors",
    "summarize": "gapcheck.tensors",
    "audit_deployment": "gapcheck.triton.audit",
    "TritonEndpoint": "gapcheck.triton.client",
    "export_model_repository": "gapcheck.triton.deploy",
    # light ones, listed here so every public name has one source of truth
    "ExitCode": "gapcheck.errors",
    "GapcheckError": "gapcheck.errors",
    "Finding": "gapcheck.findings",
    "Severity": "gapcheck.findings",
    "Subject": "gapcheck.findings",
    "Verdict": "gapcheck.findings",
}

__all__ = ["__version__", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gapcheck' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


if TYPE_CHECKING:  # static checkers and IDEs see the real names
    from gapcheck.errors import ExitCode, GapcheckError
    from gapcheck.export_diff.api import DeploymentTarget, ExportDiffRequest, run_export_diff
    from gapcheck.export_diff.result import ExportDiffResult
    from gapcheck.export_diff.runner import export_diff
    from gapcheck.findings import Finding, Severity, Subject, Verdict
    from gapcheck.inputs import load_samples_file, parse_input_spec, random_samples
    from gapcheck.model.export import export_onnx, load_onnx
    from gapcheck.model.loading import load_model
    from gapcheck.preprocess.audit import preprocess_audit
    from gapcheck.tensors import fingerprint, summarize
    from gapcheck.triton.audit import audit_deployment
    from gapcheck.triton.client import TritonEndpoint
    from gapcheck.triton.deploy import export_model_repository

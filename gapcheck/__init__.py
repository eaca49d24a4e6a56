"""gapcheck: find where a PyTorch model's behaviour breaks between training, validation and inference.

The public Python API; each CLI command is a thin layer over one of these functions.

- :func:`run_export_diff` / :func:`export_diff`: torch vs ONNX Runtime (and a Triton deployment), layer by layer
- :func:`preprocess_audit`: the same raw samples through train/val/inference preprocessing, with root causes
- :func:`audit_deployment`: a Triton deployment's config against the ONNX graph
- :func:`export_model_repository`: checkpoint -> ONNX -> Triton model repository
"""
from gapcheck.errors import ExitCode, GapcheckError
from gapcheck.export_diff.api import DeploymentTarget, ExportDiffRequest, run_export_diff
from gapcheck.export_diff.result import ExportDiffResult
from gapcheck.export_diff.runner import export_diff
from gapcheck.findings import Finding, Severity
from gapcheck.inputs import load_samples_file, parse_input_spec, random_samples
from gapcheck.model.export import export_onnx, load_onnx
from gapcheck.model.loading import load_model
from gapcheck.preprocess.audit import preprocess_audit
from gapcheck.tensors import fingerprint, summarize
from gapcheck.triton.audit import audit_deployment
from gapcheck.triton.client import TritonEndpoint
from gapcheck.triton.deploy import export_model_repository

__version__ = "0.1.0"

__all__ = [
    "DeploymentTarget", "ExitCode", "TritonEndpoint", "ExportDiffRequest", "ExportDiffResult", "Finding", "GapcheckError", "Severity",
    "audit_deployment", "export_diff", "export_model_repository", "export_onnx", "fingerprint", "load_model",
    "load_onnx", "load_samples_file", "parse_input_spec", "preprocess_audit", "random_samples", "run_export_diff",
    "summarize",
]

"""`gapcheck export`: checkpoint -> ONNX -> a Triton model repository, in one call."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from gapcheck.inputs import parse_input_spec, random_samples
from gapcheck.model.export import export_onnx, save_onnx
from gapcheck.model.loading import load_model
from gapcheck.triton.repository import has_dynamic_batch, resolve_max_batch_size, write_model_repository

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExportRepositoryResult:
    """Where the deployable model went and how it was made; an export either succeeds or raises."""

    model_dir: Path
    config_path: Path
    onnx_path: Path
    name: str
    version: int
    exporter: str  # the exporter that actually ran
    fallback_reason: str | None
    max_batch_size: int
    dynamic_batch: bool
    notes: tuple[str, ...] = ()
    saved_onnx: Path | None = None

    @property
    def verdict(self) -> str:
        return "pass"


def export_model_repository(
    checkpoint: str | Path | None,
    factory: str | None,
    input_specs: list[str] | tuple[str, ...],
    repo_dir: str | Path,
    name: str,
    *,
    exporter: str = "dynamo",
    opset: int | None = None,
    version: int = 1,
    max_batch_size: int | None = None,
    instance_kind: str = "KIND_CPU",
    unsafe_pickle: bool = False,
    strict: bool = True,
    save_onnx_path: str | Path | None = None,
) -> ExportRepositoryResult:
    """Load the model, export it with a dynamic batch axis, and write ``repo_dir/name``."""
    specs = [parse_input_spec(text) for text in input_specs]
    sample = random_samples(specs, num_samples=1, seed=0)[0]
    loaded = load_model(checkpoint, factory, unsafe_pickle=unsafe_pickle, strict=strict)
    module = loaded.module.eval()  # a deployment serves inference mode
    exported = export_onnx(module, sample, exporter=exporter, opset=opset, dynamic_batch=True)
    notes = list(exported.warnings)
    dynamic = has_dynamic_batch(exported.model)
    if not dynamic and max_batch_size is None:
        notes.append("the exported graph has a fixed batch axis: the config uses max_batch_size 0 and full dims")
    batch = resolve_max_batch_size(exported.model, max_batch_size)
    model_dir = write_model_repository(exported.model, repo_dir, name, version=version, max_batch_size=batch,
                                       instance_kind=instance_kind)
    saved = save_onnx(exported.model, save_onnx_path) if save_onnx_path is not None else None
    logger.info("exported %s with %s to %s", name, exported.exporter, model_dir)
    return ExportRepositoryResult(
        model_dir=model_dir,
        config_path=model_dir / "config.pbtxt",
        onnx_path=model_dir / str(version) / "model.onnx",
        name=name,
        version=version,
        exporter=exported.exporter,
        fallback_reason=exported.fallback_reason,
        max_batch_size=batch,
        dynamic_batch=dynamic,
        notes=tuple(notes),
        saved_onnx=saved,
    )

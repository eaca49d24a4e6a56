"""`gapcheck export`: checkpoint -> ONNX -> a Triton model repository, in one call.

Everything that can be checked without the model is checked first (the model name as Triton
takes it, the repository and ``save_onnx`` paths), so a bad path fails in a second, not after
the export. The written ``config.pbtxt`` is parsed back with Triton's own protobuf before the
result reports success.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from gapcheck.findings import Finding, Verdict
from gapcheck.groups import ExportSpec, InputSource, ModelSource
from gapcheck.report.contract import Chart, Check, Table
from gapcheck.triton.audit_result import ServedTensor
from gapcheck.triton.url import check_model_name

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExportRepositoryResult:
    """Where the deployable model went and how it was made; an export either succeeds or raises."""

    command: ClassVar[str] = "export"

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
    instance_kind: str = "KIND_CPU"
    config_inputs: tuple[ServedTensor, ...] = ()  # as Triton's parser read the written config.pbtxt
    config_outputs: tuple[ServedTensor, ...] = ()
    duration_s: float = 0.0
    findings: tuple[Finding, ...] = ()

    @property
    def verdict(self) -> Verdict:
        return Verdict.PASS

    @property
    def headline(self) -> str:
        return f"exported {self.name} version {self.version} to {self.model_dir} ({self.exporter})"

    @property
    def timings(self) -> Mapping[str, float]:
        return {"export_s": round(self.duration_s, 4)}

    def sections(self) -> dict[str, Any]:
        return {
            "repository": {"model_dir": str(self.model_dir), "config_path": str(self.config_path),
                           "onnx_path": str(self.onnx_path), "name": self.name, "version": self.version,
                           "max_batch_size": self.max_batch_size, "dynamic_batch": self.dynamic_batch,
                           "instance_kind": self.instance_kind, "config_checked": True},
            "export": {"exporter": self.exporter, "fallback_reason": self.fallback_reason,
                       "saved_onnx": None if self.saved_onnx is None else str(self.saved_onnx), "notes": list(self.notes)},
            "config": {"inputs": [_tensor(t) for t in self.config_inputs],
                       "outputs": [_tensor(t) for t in self.config_outputs]},
        }

    def views(self) -> Sequence[Table | Chart]:
        rows = tuple((kind, t.name, t.data_type, "[" + ", ".join(map(str, t.dims)) + "]")
                     for kind, tensors in (("input", self.config_inputs), ("output", self.config_outputs))
                     for t in tensors)
        batch = "dynamic" if self.dynamic_batch else "fixed"
        fallback = f" (dynamo failed: {self.fallback_reason})" if self.fallback_reason else ""
        note = (f"exporter {self.exporter}{fallback}; max_batch_size {self.max_batch_size}, batch axis {batch}; "
                f"{self.config_path}; {self.onnx_path}" + "".join(f"\nnote: {n}" for n in self.notes))
        return (Table(title=f"Triton model {self.name} version {self.version}", columns=("kind", "name", "data_type", "dims"),
                      rows=rows, note=note),)

    def checks(self) -> Sequence[Check]:
        classname = f"export.{self.name}"
        return [Check(name="config.pbtxt parses as Triton's ModelConfig", classname=classname,
                      details=str(self.config_path)),
                Check(name="model.onnx written", classname=classname, details=str(self.onnx_path))]


def _tensor(t: ServedTensor) -> dict[str, Any]:
    return {"name": t.name, "data_type": t.data_type, "dims": list(t.dims), "shape": list(t.shape)}


def _config_tensors(entries: Any) -> tuple[ServedTensor, ...]:
    from tritonclient.grpc import model_config_pb2

    return tuple(ServedTensor(name=e.name, data_type=model_config_pb2.DataType.Name(e.data_type), dims=tuple(e.dims),
                              shape=tuple(None if d < 0 else d for d in e.dims)) for e in entries)


def _check_target(repo_dir: str | Path, name: str, version: int, overwrite: bool) -> None:
    """Before any work: a valid model name, a repository that is a real folder, no model already deployed there
    (unless ``overwrite``); a linked repository or model folder is always refused."""
    from gapcheck.triton.repository import check_model_target, check_repository_dir

    check_model_name(name)
    check_repository_dir(repo_dir)
    check_model_target(repo_dir, name, version, overwrite=overwrite)


def _write_and_read_back(model: Any, repo_dir: str | Path, name: str, *, version: int, max_batch_size: int | None,
                         instance_kind: str) -> tuple[Path, int, Any]:
    """Write ``model`` and its config.pbtxt into the repository, then read the config back with Triton's parser
    (success means Triton can read it): the model folder, the max batch size used, the parsed config."""
    from gapcheck.triton.repository import parse_model_config, resolve_max_batch_size, write_model_repository

    batch = resolve_max_batch_size(model, max_batch_size)
    model_dir = write_model_repository(model, repo_dir, name, version=version, max_batch_size=batch,
                                       instance_kind=instance_kind)
    return model_dir, batch, parse_model_config((model_dir / "config.pbtxt").read_text(encoding="utf-8"), name)


def export_model_repository(
    model: ModelSource,
    input_specs: Sequence[str],
    repo_dir: str | Path,
    name: str,
    *,
    export: ExportSpec | None = None,
    version: int = 1,
    max_batch_size: int | None = None,
    instance_kind: str = "KIND_CPU",
    overwrite: bool = False,
) -> ExportRepositoryResult:
    """Load ``model``, export it with a dynamic batch axis (``export``: exporter, opset, the export cache, where to
    save a copy; default: the group's defaults), and write ``repo_dir/name``. A model already deployed there (a
    non-empty ``repo_dir/name``) is refused before any work unless ``overwrite``; a linked repository or model
    folder always is."""
    from gapcheck.triton.repository import has_dynamic_batch

    started = time.perf_counter()
    _check_target(repo_dir, name, version, overwrite)
    export = export or ExportSpec()
    sample = InputSource(specs=tuple(input_specs), num_samples=1, seed=0).samples()[0]
    module = model.load().module.eval()  # a deployment serves inference mode
    # Outputs named as the model names them ("output", "logits", ...): what export-diff's own export names them,
    # so `export-diff --triton-url` without --onnx finds the served names it expects. The same export path and
    # cache as export-diff and golden record (ExportSpec.obtain).
    exported, _ = export.obtain(module, sample, cache=export.cache(model))
    notes = list(exported.warnings)
    dynamic = has_dynamic_batch(exported.model)
    if not dynamic and max_batch_size is None:
        notes.append("the exported graph has a fixed batch axis: the config uses max_batch_size 0 and full dims")
    model_dir, batch, config = _write_and_read_back(exported.model, repo_dir, name, version=version,
                                                    max_batch_size=max_batch_size, instance_kind=instance_kind)
    export.save(exported.model)
    logger.info("exported %s with %s to %s", name, exported.exporter, model_dir)
    return ExportRepositoryResult(
        model_dir=model_dir, config_path=model_dir / "config.pbtxt", onnx_path=model_dir / str(version) / "model.onnx",
        name=name, version=version, exporter=exported.exporter, fallback_reason=exported.fallback_reason,
        max_batch_size=batch, dynamic_batch=dynamic, notes=tuple(notes), saved_onnx=export.save_onnx,
        instance_kind=instance_kind, config_inputs=_config_tensors(config.input),
        config_outputs=_config_tensors(config.output), duration_s=time.perf_counter() - started)


def export_precision_repository(
    request: Any,
    repo_dir: str | Path,
    name: str,
    *,
    version: int = 1,
    max_batch_size: int | None = None,
    instance_kind: str = "KIND_CPU",
    overwrite: bool = False,
) -> Any:
    """``gapcheck export --precision fp16|int8``: the one precision run (:func:`gapcheck.precision.run_precision`,
    ``request`` a :class:`~gapcheck.precision.api.PrecisionRequest`) whose verified model — and only a verified one —
    goes into ``repo_dir/name/version/model.onnx``, with a config.pbtxt read off that model's own inputs and outputs
    (so its data types are the served model's) and parsed back with Triton's parser. A fix that is not verified
    writes nothing (the result is a gap). Paths and the name are checked before any work."""
    import dataclasses

    from gapcheck.precision import run_precision

    _check_target(repo_dir, name, version, overwrite)
    deployed: dict[str, Any] = {}

    def deploy(model: Any) -> Path:
        model_dir, batch, config = _write_and_read_back(model, repo_dir, name, version=version,
                                                        max_batch_size=max_batch_size, instance_kind=instance_kind)
        deployed.update(model_dir=str(model_dir), config_path=str(model_dir / "config.pbtxt"), name=name,
                        version=version, max_batch_size=batch, instance_kind=instance_kind, config_checked=True,
                        inputs=[_tensor(t) for t in _config_tensors(config.input)],
                        outputs=[_tensor(t) for t in _config_tensors(config.output)])
        logger.info("deployed the verified %s model %s to %s", request.precision, name, model_dir)
        return model_dir / str(version) / "model.onnx"

    result = run_precision(dataclasses.replace(request, fix_path=None, deploy=deploy))
    repository = deployed or {"model_dir": None, "name": name, "version": version,
                              "note": "nothing written: the fix was not verified"}
    return dataclasses.replace(result, details={**result.details, "repository": repository})

"""``ExportSpec``: how the model becomes ONNX — the exporter, the opset, the export cache, where to keep a copy.

:meth:`ExportSpec.obtain` is the one export path (export-diff, its deployment audit, golden record): one cache
key (weights, code, input specs, exporter, opset, sequence axes — never the output names: a cached graph's
outputs carry them), one cache (:class:`gapcheck.model.cache.ExportCache`), one run-once check of the inputs.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional

from gapcheck.errors import InputError, UsageError, condense_error
from gapcheck.groups.base import Group, Opt, check_output_file

EXPORTERS = ("dynamo", "torchscript")


@dataclass(frozen=True)
class ExportSpec(Group):
    exporter: str = "dynamo"
    opset: int | None = None
    cache_dir: Path | None = None
    no_cache: bool = False
    save_onnx: Path | None = None
    cache_max_mb: int | None = None  # the cache's size cap (None: [cache] max_mb, else the cache's default)
    # (flag, path) of the command's other inputs (set by the one resolve path): --save-onnx may not be one or lie in one
    inputs: tuple[tuple[str, Path], ...] = ()

    SECTION: ClassVar[str | None] = "cache"
    OPTIONS: ClassVar[tuple[Opt, ...]] = (
        Opt("exporter", "--exporter", "ONNX exporter: dynamo (falls back to torchscript) or torchscript.", str,
            key="exporter"),
        Opt("opset", "--opset", "ONNX opset version.", Optional[int], key="opset", low=7, high=1000),
        Opt("cache_dir", "--cache-dir", "Export cache folder (default: [cache] dir, $GAPCHECK_CACHE_DIR or "
            "~/.cache/gapcheck/exports).", Optional[Path], key="dir"),
        Opt("no_cache", "--no-cache", "Always export; neither read nor write the export cache.", bool),
        Opt("save_onnx", "--save-onnx", "Write the compared ONNX model here.", Optional[Path]),
        Opt("cache_max_mb", "--cache-max-mb", "Size cap of the export cache in MB (least recently used entries "
            "go first).", Optional[int], key="max_mb", low=1),
    )

    def check(self) -> None:
        exporter = getattr(self.exporter, "value", self.exporter)
        if exporter not in EXPORTERS:
            raise UsageError(f"--exporter must be one of {', '.join(EXPORTERS)}, not {exporter!r}")
        if exporter != self.exporter:
            object.__setattr__(self, "exporter", exporter)  # an Exporter enum member becomes its value
        check_output_file(self.save_onnx, "--save-onnx")
        if self.save_onnx is not None:
            from gapcheck.atomic import check_not_input

            check_not_input(self.save_onnx, "--save-onnx", self.inputs)
        if self.cache_dir is not None and Path(self.cache_dir).exists() and not Path(self.cache_dir).is_dir():
            raise UsageError(f"--cache-dir {self.cache_dir} is not a folder")

    def cache(self, model: Any = None) -> Any:
        """The export cache (keyed by the source of ``model``'s factory too: a ModelSource), or None with ``no_cache``."""
        if self.no_cache:
            return None
        from gapcheck.model.cache import ExportCache

        factory = model.resolved_factory() if model is not None else None
        return ExportCache(self.cache_dir, factory=factory, max_bytes=_bytes(self.cache_max_mb))

    def obtain(self, module: Any, sample: dict[str, Any], *, cache: Any = None, progress: Any = None,
               sequence_inputs: tuple[str, ...] = ()) -> tuple[Any, list[str]]:
        """The model's ONNX export and its output names, from ``cache`` when it holds it, else exported (and stored).

        ``module`` is in the mode to export. A fresh export first runs the model once, so inputs that do not fit it
        are an input error (exit 2) rather than an exporter error, and the graph's outputs get the model's own names
        (``logits``; ``output`` for a bare tensor) — the names a deployment made by `gapcheck export` serves.
        """
        import torch

        from gapcheck.model.export import export_onnx
        from gapcheck.progress import NullProgress

        progress = progress or NullProgress()
        exporter = self.exporter
        if isinstance(module, torch.jit.ScriptModule) and exporter == "dynamo":
            exporter = "torchscript"  # torch.export cannot trace a ScriptModule; the TorchScript exporter reads its graph
        key = cache.key(module, sample, exporter=exporter, opset=self.opset, sequence_inputs=sequence_inputs) \
            if cache is not None else None
        hit = cache.load(key) if key is not None else None
        if hit is not None:
            return hit, [o.name for o in hit.model.graph.output]
        names = output_names(module, sample)
        progress.start("exporting to ONNX", None)
        exported = export_onnx(module, sample, exporter=exporter, opset=self.opset, output_names=names,
                               sequence_inputs=sequence_inputs)
        progress.finish()
        if key is not None:
            cache.store(key, exported)
        return exported, names

    def save(self, model: Any) -> None:
        if self.save_onnx is not None:
            from gapcheck.model.onnx_file import save_onnx

            save_onnx(model, self.save_onnx)


def _bytes(megabytes: int | None) -> int | None:
    return None if megabytes is None else int(megabytes) * 1024 * 1024


def output_names(module: Any, sample: dict[str, Any], onnx_model: Any = None) -> list[str]:
    """Run the model once on ``sample``: its own names of its output tensors (``logits``, ``past_key_values.0.key``).

    Inputs it does not accept are an InputError (exit 2; with ``onnx_model``, the ONNX file compared, the message
    also names the file's inputs the sample lacks); a model that returns no tensor is a UsageError.
    """
    import torch

    from gapcheck.model.outputs import named_tensor_leaves
    from gapcheck.tensors import contiguous

    tensors = [torch.from_numpy(contiguous(a)) for a in sample.values()]  # a scalar input keeps its rank 0
    try:
        with torch.no_grad():
            output = module(*tensors)
    except Exception as exc:  # noqa: BLE001 - whatever the model raises on these inputs
        raise refused(sample, exc, onnx_model) from exc
    names = [name for name, _ in named_tensor_leaves(output)]
    if not names:
        raise UsageError(f"the model returns no tensor (it returns {type(output).__name__}): nothing to compare")
    return names


def refused(sample: dict[str, Any], exc: BaseException, onnx_model: Any = None) -> InputError:
    """The input error for a model that raised ``exc`` on ``sample`` (names the ONNX file's missing inputs too)."""
    shapes = ", ".join(f"{k}:{'x'.join(map(str, v.shape))}:{v.dtype}" for k, v in sample.items())
    return InputError(f"the model does not accept the given inputs ({shapes}): {condense_error(exc)}"
                      f"{_missing_graph_inputs(onnx_model, sample)}")


def _missing_graph_inputs(onnx_model: Any, sample: dict[str, Any]) -> str:
    """The ONNX file's inputs the sample lacks, as a clause for an input error (a TorchScript VAD given only ``x``
    says it misses ``sr``; its ONNX twin needs ``state`` and ``sr``: both sides are named)."""
    if onnx_model is None:
        return ""
    initializers = {i.name for i in onnx_model.graph.initializer}
    missing = [i.name for i in onnx_model.graph.input if i.name not in initializers and i.name not in sample]
    return f"; the ONNX file also needs inputs {', '.join(missing)}" if missing else ""

"""The ``gapcheck precision`` result: the report contract's envelope, the ranking (a table and a bar chart), the
kept/excluded modules and ONNX nodes a CI job can apply, and the TensorRT equivalents."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gapcheck.findings import Finding
from gapcheck.precision.fp16 import ModuleRow
from gapcheck.report.contract import Chart, ResultBase, Series, Table

MEASURES = {
    "fp16": "local error ratio: the module's FP16 ops fed the reference inputs, error / tolerance (inf: overflow)",
    "int8": "local: relative L2 error of the module's quantized output against its FP32 ops fed the same quantized "
            "inputs (fully quantized model, one run)",
    "int8-alone": "alone: relative L2 error of the model's outputs when only this module's part of the INT8 model (its "
                  "Q/DQ, weights and ops as quantized) runs and everything else is FP32 (one spliced run)",
}


def _number(value: float | None) -> float | str | None:
    if value is None:
        return None
    return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")


@dataclass(frozen=True)
class PrecisionResult(ResultBase):
    precision: str = "fp16"
    findings: tuple[Finding, ...] = ()
    headline: str = ""
    rows: tuple[ModuleRow, ...] = ()
    fix: dict[str, Any] | None = None  # written path, kept/excluded modules and nodes, verification, runs
    details: dict[str, Any] = field(default_factory=dict)  # mode, calibration, targets, scores, tensorrt
    run_timings: dict[str, float] = field(default_factory=dict)
    command: str = "precision"

    @property
    def timings(self) -> Mapping[str, float]:
        return self.run_timings

    def sections(self) -> dict[str, Any]:
        return {
            "precision": self.precision,
            "measure": self._measure,
            "modules": [self._row(r) for r in self.rows],
            "fix": self.fix,
            **self.details,
        }

    @property
    def _measure(self) -> str:
        return MEASURES["int8-alone" if self.details.get("sensitivity_measure") == "alone" else self.precision]

    @staticmethod
    def _row(r: ModuleRow) -> dict[str, Any]:
        return {"module": r.module, "class": r.class_name, "nodes": list(r.nodes), "error": _number(r.ratio),
                "local": _number(r.local), "alone": _number(r.alone), "sensitivity": _number(r.sensitivity),
                "overflow": r.overflow, "underflow": r.underflow, "out_of_range": r.out_of_range, "passed": r.passed}

    def views(self) -> Sequence[Table | Chart]:
        shown = list(self.rows[:40])
        if self.precision == "int8":  # INT8 has no overflow; both measures when --sensitivity alone gave both
            columns: tuple[str, ...] = ("module", "class", "sensitivity", "local", "alone", "output error", "nodes")
            rows: tuple[tuple[Any, ...], ...] = tuple(
                (r.module, r.class_name, _fmt(r.sensitivity), _fmt(r.local), _fmt(r.alone), _fmt(r.ratio), len(r.nodes))
                for r in shown)
        else:
            columns = ("module", "class", "sensitivity", "error", "overflow", "underflow", "beyond range", "nodes")
            rows = tuple((r.module, r.class_name, _fmt(r.sensitivity), _fmt(r.ratio), r.overflow, r.underflow,
                          f"{r.out_of_range:.1%}", len(r.nodes)) for r in shown)
        table = Table(
            title=f"Modules ranked by sensitivity ({self.precision})", columns=columns, rows=rows,
            highlight=tuple(i for i, r in enumerate(shown) if not r.passed or r.sensitivity == math.inf),
            note=self._measure)
        top = [r for r in shown if r.sensitivity > 0][:25]
        cap = max([r.sensitivity for r in top if math.isfinite(r.sensitivity)] or [1.0]) * 2
        chart = Chart(title="Sensitivity ranking", kind="bar", x=tuple(r.module for r in top),
                      series=(Series("sensitivity", tuple(min(r.sensitivity, cap) for r in top), style="bar"),),
                      y_label="sensitivity", note=self._measure + " (an overflow is drawn at 2x the largest)")
        views: list[Table | Chart] = [table, chart]
        if self.fix and self.fix.get("kept"):  # none kept: the finding says the whole model is written as it is
            kept = self.fix["kept"]
            views.append(Table(title=f"Kept in FP32 ({self.fix.get('status')})", columns=("module", "nodes", "why"),
                               rows=tuple((k["module"], ", ".join(k["nodes"]), k["reason"]) for k in kept)))
        repository = self.details.get("repository")
        if repository and repository.get("model_dir"):
            views.append(Table(
                title=f"Triton model {repository['name']} version {repository['version']} (the verified model)",
                columns=("kind", "name", "data_type", "dims"),
                rows=tuple((kind, t["name"], t["data_type"], "[" + ", ".join(map(str, t["dims"])) + "]")
                           for kind in ("input", "output") for t in repository[kind + "s"]),
                note=f"{repository['config_path']}; max_batch_size {repository['max_batch_size']}; config.pbtxt "
                     "read off the written model's own inputs/outputs and parsed back with Triton's parser"))
        hot = self.details.get("beyond_fp16_range") or {}
        if hot.get("count"):  # passes here, may overflow elsewhere: said on the console too, not only in the JSON
            views.append(Table(
                title=f"Values beyond FP16's range in the FP32 reference ({hot['count']})",
                columns=("value", "node", "module"),
                rows=tuple((v["value"], v["node"], v["module"]) for v in hot.get("values", [])), note=hot.get("note", "")))
        if self.details.get("tensorrt"):
            trt = self.details["tensorrt"]
            views.append(Table(title="TensorRT equivalents", columns=("tool", "command"),
                               rows=(("trtexec", trt["trtexec"]), ("polygraphy", trt["polygraphy"])), note=trt["note"]))
        return views


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return "inf" if value == math.inf else f"{value:.3g}"

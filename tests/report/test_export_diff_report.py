"""export-diff's report contract on a hand-built result: sections fit the schema, views decide, checks per module."""
from __future__ import annotations

import json

from gapcheck.codes.export_diff import LAYER_DIVERGENCE
from gapcheck.compare import ErrorStats
from gapcheck.export_diff.result import (
    FAIL,
    NO_ONNX,
    PASS,
    BatchCheck,
    Cause,
    ExportDiffResult,
    FirstDivergence,
    InputRecord,
    LayerResult,
    OutputResult,
    Status,
)
from gapcheck.findings import Subject, Verdict
from gapcheck.report.contract import Chart, CommandResult, Table
from gapcheck.report.envelope import validate
from gapcheck.report.formats import ReportFormat, render


def _stats(max_abs: float, passed: bool) -> ErrorStats:
    return ErrorStats(passed, max_abs, max_abs * 10, max_abs / 2, 0.0 if passed else 0.25, (0, 1), 0, False, 1e-4, 1e-4, 2.0)


def _layer(order: int, module: str, status: Status, stats: ErrorStats | None, failing: tuple[int, ...] = ()) -> LayerResult:
    return LayerResult(order, module, "Linear", ("Gemm",) if stats else (), f"/{module}/out" if stats else None, status,
                       stats, 0 if stats else None, failing, f"model.py:{order + 10}")


def _result() -> ExportDiffResult:
    layers = (_layer(0, "fc1", PASS, _stats(1e-6, True)), _layer(1, "bn", NO_ONNX, None),
              _layer(2, "act", FAIL, _stats(5e-4, False), (0, 1)), _layer(3, "fc2", FAIL, _stats(2e-4, False), (1,)),
              _layer(-1, "unused", NO_ONNX, None))
    fd = FirstDivergence("act", Cause.LOCAL, "model.py:12", ("Mul", "Tanh"), 1, 5e-4, 4e-7, 5e-4, 1250.0, "its own ops")
    finding = LAYER_DIVERGENCE.finding("first divergence at act", subject=Subject(module="act"),
                                       evidence={"cause": "local", "amplification": 1250.0})
    return ExportDiffResult(
        findings=(finding,), layers=layers,
        outputs=(OutputResult("output", "onnxruntime", FAIL, _stats(2e-4, False), 1, (1,)),),
        first_divergence=fd,
        inputs=(InputRecord(0, "x", (1, 16), "float32", {"torch": "a" * 64, "onnxruntime": "a" * 64}),
                InputRecord(1, "x", (1, 16), "float32", {"torch": "b" * 64, "onnxruntime": "c" * 64})),
        exporter="torchscript", fallback_reason=None, precision="fp32", num_samples=2,
        batch_checks=(BatchCheck(2, "output", PASS, 1e-7, 0), BatchCheck(4, "*", Status.ERROR, None, None, "refused")),
        timings={"export": 0.5},
    )


def test_the_result_implements_the_contract_and_its_schema():
    result = _result()
    assert isinstance(result, CommandResult) and result.command == "export-diff"
    assert result.verdict is Verdict.GAP and not result
    doc = json.loads(render(ReportFormat.JSON, result))
    validate(doc)
    assert doc["layers"][2]["status"] == "fail" and doc["layers"][2]["budget_abs"] == 1e-4 + 1e-4 * 2.0
    assert doc["first_divergence"]["cause"] == "local" and doc["batch_checks"][1]["status"] == "error"


def test_error_by_depth_chart_leaves_gaps_and_marks_the_first_divergence():
    chart = next(v for v in _result().views() if isinstance(v, Chart))
    assert chart.x == ("fc1", "bn", "act", "fc2")  # execution order; a module that never ran is not on the axis
    abs_err, rel_err, budget = chart.series
    assert abs_err.values == (1e-6, None, 5e-4, 2e-4) and rel_err.values[1] is None and budget.values[1] is None
    assert budget.style == "step" and chart.marks == (2,) and chart.log_y


def test_tables_highlight_what_the_result_decided():
    views = {v.title.split(" (")[0]: v for v in _result().views() if isinstance(v, Table)}
    modules = views["module outputs, torch vs ONNX Runtime"]
    assert modules.highlight == (2, 3) and modules.rows[2][8] == "fail (2/2)"
    assert views["localization of the first divergence"].rows[1] == ("cause", "local: introduces the error")
    inputs = next(v for title, v in views.items() if title.startswith("inputs fed"))
    assert inputs.columns[-2:] == ("torch", "onnxruntime") and inputs.highlight == (1,)  # sample 1 fed different bytes
    assert views["batch consistency"].highlight == (1,)


def test_checks_one_case_per_module_output_and_batch():
    checks = _result().checks()
    by_name = {c.name: c for c in checks}
    assert by_name["act"].failure and by_name["fc1"].failure is None and by_name["bn"].skipped
    assert by_name["onnxruntime:output"].failure and by_name["batch=4:as given:*"].failure == "refused"


def test_html_page_has_the_chart_and_the_localization():
    page = render(ReportFormat.HTML, _result())
    assert page.count("data:image/png;base64,") == 1 and "localization of the first divergence" in page
    assert "<dt>amplification</dt><dd>1250</dd>" in page

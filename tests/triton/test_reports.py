"""triton-audit and export results on the report contract: every format renders, JSON validates (no server)."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from gapcheck.codes import triton as codes
from gapcheck.findings import Severity, Subject
from gapcheck.report.contract import CommandResult
from gapcheck.report.formats import ReportFormat, render
from gapcheck.triton.audit_result import ServedModel, ServedTensor, TensorSide, TritonAuditResult
from gapcheck.triton.deploy import ExportRepositoryResult

EVIL = "tiny\x1b[2J<script>"


def schema(command: str) -> dict:
    return json.loads(resources.files("gapcheck.schemas").joinpath(f"{command}.schema.json").read_text())


def audit_result() -> TritonAuditResult:
    served = ServedModel(name="tiny", version="1", versions=("1",), platform="", backend="python", max_batch_size=None,
                         inputs=(ServedTensor("x", "TYPE_FP16", (-1, 3, 8, 8), (None, 3, 8, 8)),),
                         outputs=(ServedTensor("y", "TYPE_FP32", (-1, 5), (None, 5)),), source="model metadata")
    subject = Subject(endpoint="http://127.0.0.1:8000", module="tiny", output="input x")
    findings = (
        codes.API_RESTRICTED.finding("served versions not listed: model-repository API restricted",
                                     subject=Subject(endpoint="http://127.0.0.1:8000", group="model-repository"),
                                     evidence={"api": "model-repository", "not_checked": ["served versions not listed"]}),
        codes.DTYPE_MISMATCH.finding(f"input 'x' of {EVIL} is FP16", subject=subject,
                                     evidence={"served": "TYPE_FP16", "onnx": "TYPE_FP32"}),
        codes.PLATFORM.finding("served by python", evidence={"served": {"backend": "python"}}),
    )
    return TritonAuditResult(endpoint="http://127.0.0.1:8000", protocol="http", model="tiny", requested_version=None,
                             server_name="triton", server_version="2.51.0", model_state="READY", served=served,
                             findings=findings, restricted_apis=("model-repository",),
                             onnx_inputs=(TensorSide("x", "TYPE_FP32", (None, 3, 8, 8)),),
                             onnx_outputs=(TensorSide("y", "TYPE_FP32", (None, 5)),), duration_s=0.25)


def export_result(tmp_path: Path) -> ExportRepositoryResult:
    return ExportRepositoryResult(
        model_dir=tmp_path / "net", config_path=tmp_path / "net" / "config.pbtxt", onnx_path=tmp_path / "net/1/model.onnx",
        name="net", version=1, exporter="dynamo", fallback_reason=None, max_batch_size=64, dynamic_batch=True,
        config_inputs=(ServedTensor("x", "TYPE_FP32", (3, 8, 8), (3, 8, 8)),),
        config_outputs=(ServedTensor("y", "TYPE_FP32", (2,), (2,)),))


def test_audit_result_renders_in_every_format_and_validates():
    result = audit_result()
    assert isinstance(result, CommandResult) and result.verdict == "gap" and not result
    doc = json.loads(render(ReportFormat.JSON, result))
    jsonschema.validate(doc, schema("triton-audit"))
    assert doc["served"]["max_batch_size"] is None and doc["endpoint"]["restricted_apis"] == ["model-repository"]
    assert "triton_dtype_mismatch" in result.headline and "1 API(s) restricted" in result.headline
    (table,) = result.views()
    assert table.rows[0] == ("input", "x", "TYPE_FP16", "TYPE_FP32", "[?, 3, 8, 8]", "[?, 3, 8, 8]",
                             "gap: triton_dtype_mismatch")
    assert table.highlight == (0,)
    suite = ET.fromstring(render(ReportFormat.JUNIT, result)).find("testsuite")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases["input x"].find("failure") is not None and cases["output y"].find("failure") is None
    assert any(c.find("skipped") is not None for c in cases.values())  # the restricted API: not checked
    html = render(ReportFormat.HTML, result)
    console = render(ReportFormat.CONSOLE, result)
    assert "<script>" not in html and "\x1b" not in console and "TYPE_FP16" in console


def test_export_result_renders_in_every_format_and_validates(tmp_path):
    result = export_result(tmp_path)
    assert isinstance(result, CommandResult) and result.verdict == "pass"
    doc = json.loads(render(ReportFormat.JSON, result))
    jsonschema.validate(doc, schema("export"))
    assert doc["repository"]["config_checked"] and doc["config"]["inputs"][0]["name"] == "x"
    for fmt in (ReportFormat.JUNIT, ReportFormat.HTML, ReportFormat.CONSOLE):
        assert "net" in render(fmt, result)


@pytest.mark.parametrize("code", [c for c in dir(codes) if c.isupper() and c != "F"])
def test_every_triton_code_is_documented(code):
    entry = getattr(codes, code)
    assert entry.family == "triton" and entry.explanation and entry.fix
    assert entry.severity in (Severity.GAP, Severity.WARNING, Severity.INFO)

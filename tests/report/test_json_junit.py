"""JSON and JUnit writers."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from gapcheck.findings import Finding, Severity, verdict_of
from gapcheck.report.json_report import SCHEMA_VERSION, write_json
from gapcheck.report.junit import JUnitCase, write_junit


def test_json_is_versioned_and_strict(tmp_path):
    finding = Finding("scale", Severity.GAP, "x255 missing", where="val", evidence={"ratio": float("inf")})
    path = write_json(tmp_path / "r.json", "demo", {"verdict": verdict_of([finding]), "findings": [finding], "nan": float("nan")})
    doc = json.loads(path.read_text())  # json.loads would accept NaN, so check the text too
    assert "NaN" not in path.read_text() and "Infinity" not in path.read_text()
    assert doc["schema_version"] == SCHEMA_VERSION and doc["command"] == "demo" and doc["verdict"] == "gap"
    assert doc["findings"][0] == {"code": "scale", "severity": "gap", "message": "x255 missing", "where": "val",
                                  "evidence": {"ratio": "inf"}}
    assert doc["nan"] == "nan"


def test_junit_counts_failures_and_skips(tmp_path):
    cases = [JUnitCase("a", "c"), JUnitCase("b", "c", failure="diverges", details="max_abs=1"),
             JUnitCase("d", "c", skipped="no ONNX counterpart")]
    suite = ET.parse(write_junit(tmp_path / "r.xml", "s", cases)).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    failed = suite.findall("testcase")[1].find("failure")
    assert failed.get("message") == "diverges" and failed.text == "max_abs=1"


def test_verdict_of_only_counts_gaps():
    assert verdict_of([Finding("x", Severity.WARNING, "w"), Finding("y", Severity.INFO, "i")]) == "pass"

"""JSON envelope and JUnit format over the report contract."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from gapcheck.codes.export_diff import LAYER_DIVERGENCE, TRAINING_MODE
from gapcheck.findings import Finding, Severity, Subject, Verdict, verdict_of
from gapcheck.report.contract import Check, SimpleResult
from gapcheck.report.envelope import SCHEMA_VERSION
from gapcheck.report.formats import ReportFormat, write_report


def test_json_is_versioned_and_strict(tmp_path):
    finding = LAYER_DIVERGENCE.finding("x255 missing", subject=Subject(module="val"), evidence={"ratio": float("inf")})
    result = SimpleResult(command="demo", findings=(finding,), headline="one gap", extra={"nan": float("nan")})
    path = write_report(ReportFormat.JSON, tmp_path / "r.json", result)
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text  # json.loads would accept them, so check the text
    doc = json.loads(text)
    assert list(doc)[:7] == ["schema_version", "command", "gapcheck_version", "verdict", "headline", "findings", "timings"]
    assert doc["schema_version"] == SCHEMA_VERSION and doc["command"] == "demo" and doc["verdict"] == "gap"
    assert doc["findings"][0] == {"code": "layer_divergence", "severity": "gap", "message": "x255 missing", "where": "val",
                                  "subject": {"module": "val"}, "evidence": {"ratio": "inf"},
                                  "fingerprint": finding.fingerprint}
    assert doc["nan"] == "nan"


def test_junit_counts_failures_and_skips(tmp_path):
    class Result(SimpleResult):
        def checks(self):
            return [Check("a", "c"), Check("b", "c", failure="diverges", details="max_abs=1"),
                    Check("d", "c", skipped="no ONNX counterpart")]

    path = write_report(ReportFormat.JUNIT, tmp_path / "r.xml", Result(command="demo"))
    suite = ET.parse(path).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    failed = suite.findall("testcase")[1].find("failure")
    assert failed.get("message") == "diverges" and failed.text == "max_abs=1"


def test_junit_lists_at_most_a_hundred_failures_per_class_and_says_how_many_more(tmp_path):
    # The verification review: a server listing 200,000 tensors not in the graph made a 46 MB JUnit file.
    class Result(SimpleResult):
        def checks(self):
            return ([Check(f"t{i}", "endpoint prod", failure="not in the graph") for i in range(250)]
                    + [Check("ok", "endpoint prod"), Check("other", "endpoint b", failure="differs")])

    path = write_report(ReportFormat.JUNIT, tmp_path / "r.xml", Result(command="demo"))
    suite = ET.parse(path).getroot().find("testsuite")
    cases = suite.findall("testcase")
    assert (suite.get("tests"), suite.get("failures")) == ("103", "102")
    assert [c.get("name") for c in cases[-1:]] == ["150 more failing checks"]
    assert cases[-1].get("classname") == "endpoint prod" and cases[-1].find("failure") is not None
    assert [c.get("name") for c in cases if c.get("classname") == "endpoint b"] == ["other"]


def test_junit_default_checks_label_evidence_and_strip_control_characters(tmp_path):
    finding = LAYER_DIVERGENCE.finding("bad\x07 name", subject=Subject(module="m"), evidence={"max_abs": 0.5, "rows": [1, 2]})
    path = write_report(ReportFormat.JUNIT, tmp_path / "r.xml", SimpleResult(command="demo", findings=(finding,)))
    case = ET.parse(path).getroot().find("testsuite").find("testcase")
    assert case.find("failure").get("message") == "bad\\x07 name"
    assert case.find("failure").text == "max abs: 0.5\nrows: 1, 2"


def test_junit_escapes_8_bit_controls_and_bidi_overrides_as_the_console_does(tmp_path):
    # The attacker review (D14): U+009B (8-bit CSI) and U+202E (right-to-left override) stayed raw in the XML.
    finding = LAYER_DIVERGENCE.finding("served \x9b31m red \u202e txt.exe", subject=Subject(module="m\u202e"))
    path = write_report(ReportFormat.JUNIT, tmp_path / "r.xml", SimpleResult(command="demo", findings=(finding,)))
    text = path.read_text(encoding="utf-8")
    assert "\x9b" not in text and "\u202e" not in text
    case = ET.parse(path).getroot().find("testsuite").find("testcase")
    assert case.find("failure").get("message") == "served \\x9b31m red \\u202e txt.exe"


def test_verdict_of_only_counts_gaps():
    warning = TRAINING_MODE.finding("w")
    info = Finding("x", Severity.INFO, "i")
    assert verdict_of([warning, info]) is Verdict.PASS and verdict_of([warning, info]) == "pass"
    assert Verdict.of([LAYER_DIVERGENCE.finding("g")]) is Verdict.GAP

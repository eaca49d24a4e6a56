"""export-diff --junit: every gap finding is a failing test case, whatever its code (issue 23 follow-up, item 3).

A run whose only gap was a Triton config finding (triton_name_mismatch, ...) exited 1 and wrote a JUnit file with 0
failures: CI's test view showed green. Every registered code that can be a gap (every family: export-diff reports
the Triton audit's, precision's and padding's findings too) is checked here, on the result and in the XML written.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from gapcheck.codes import all_codes
from gapcheck.errors import ExitCode
from gapcheck.export_diff.result import ExportDiffResult
from gapcheck.findings import Severity, Subject
from gapcheck.report.formats import ReportFormat, render

GAP_CODES = sorted({c.code: c for c in all_codes()}.items())


def _result(finding) -> ExportDiffResult:
    return ExportDiffResult(findings=(finding,), layers=(), outputs=(), first_divergence=None, inputs=(),
                            exporter="torchscript", fallback_reason=None, precision="fp32", num_samples=1)


@pytest.mark.parametrize("code", [c for _, c in GAP_CODES], ids=[name for name, _ in GAP_CODES])
def test_every_gap_finding_is_a_junit_failure(code):
    finding = code.finding(f"planted {code.code}", severity=Severity.GAP, where="model @ grpc://h:1",
                           subject=Subject(endpoint="model"))
    result = _result(finding)
    assert ExitCode.for_verdict(result.verdict) == ExitCode.GAP_FOUND
    suite = ET.fromstring(render(ReportFormat.JUNIT, result)).find("testsuite")
    assert suite is not None and int(suite.get("failures", "0")) >= 1
    assert any(f.get("message") == f"planted {code.code}" for f in suite.iter("failure"))


def test_two_gaps_of_one_code_at_one_place_are_two_cases():
    from gapcheck.codes.triton import NAME_MISMATCH

    twice = tuple(NAME_MISMATCH.finding(f"gap {i}", where="m") for i in range(2))
    result = ExportDiffResult(findings=twice, layers=(), outputs=(), first_divergence=None, inputs=(),
                              exporter="torchscript", fallback_reason=None, precision="fp32", num_samples=1)
    names = [c.name for c in result.checks() if c.failure]
    assert len(names) == 2 and len(set(names)) == 2

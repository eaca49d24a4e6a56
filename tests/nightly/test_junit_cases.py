"""nightly's JUnit cases without a server (review D2): every endpoint is a case, and a gap finding of any code that
no failing output case shows is a failing case of its own (the XML had tests=0 failures=0 for an exit-1 night)."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from gapcheck.codes import all_codes
from gapcheck.findings import Severity, Subject
from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option
from gapcheck.nightly.probe import EndpointOutcome
from gapcheck.nightly.result import EndpointReport, NightlyResult
from gapcheck.nightly.status import Classification, Status
from gapcheck.report.formats import ReportFormat, render


def _night(*findings, status=Status.NEW_FAILURE) -> NightlyResult:
    spec = endpoint_spec(parse_endpoint_option("prod=http://127.0.0.1:1/m"))
    outcome = EndpointOutcome(spec, True, None, "1", "c", 4, (), tuple(findings), (), 4, {})
    report = EndpointReport(outcome, Classification(status, (), {}, (), None), tuple(findings))
    return NightlyResult(run_id="r", started_at="2026-01-01T00:00:00+00:00", golden={}, history="h.sqlite",
                         endpoints=(report,))


@pytest.mark.parametrize("code", sorted({c.code: c for c in all_codes()}.values(), key=lambda c: c.code),
                         ids=lambda c: c.code)
def test_every_gap_finding_of_an_endpoint_is_a_failing_case(code):
    finding = code.finding(f"planted {code.code}", severity=Severity.GAP,
                           subject=Subject(endpoint="prod", output="output 0"))
    suite = ET.fromstring(render(ReportFormat.JUNIT, _night(finding))).find("testsuite")
    assert suite is not None and int(suite.get("failures", "0")) == 1
    assert [f.get("message") for f in suite.iter("failure")] == [f"planted {code.code}"]


def test_two_gaps_of_one_code_are_two_cases_and_a_clean_endpoint_is_one_passing_case():
    from gapcheck.codes.nightly import OUTPUT_MISSING

    twice = [OUTPUT_MISSING.finding(f"missing {n}", subject=Subject(endpoint="prod", output=n)) for n in "ab"]
    names = [c.name for c in _night(*twice).checks() if c.failure]
    assert len(names) == 2 and len(set(names)) == 2
    (case,) = _night(status=Status.PASS).checks()
    assert case.failure is None and case.name == "prod"

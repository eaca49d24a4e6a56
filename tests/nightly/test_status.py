"""Statuses relative to history, and the one-sided CUSUM drift test (no server needed)."""
from __future__ import annotations

import pytest

from gapcheck.nightly.history import EndpointRecord, OutputRecord
from gapcheck.nightly.status import DriftParameters, Status, Tonight, classify, cusum

GOLDEN = "g" * 64


def rec(status: str, verdict: str = "pass", ratio: float | None = 0.01, version: str = "1", config: str = "c1",
        golden: str = GOLDEN) -> EndpointRecord:
    outputs = () if status == "unreachable" else (OutputRecord("y", verdict, ratio, 0.0, 0.0, 0.0, ratio, 1e-4, 1e-4),)
    return EndpointRecord("run", "prod", "grpc://h:1/m", "m", None, version, config, golden, status, verdict, "",
                          None, 4, "2026-01-01T00:00:00", 0.1, {}, outputs)


def tonight(gap: bool = False, ratio: float = 0.01, reachable: bool = True, version: str = "1",
            config: str = "c1") -> Tonight:
    return Tonight(reachable, gap, version, config, GOLDEN, {"y": ratio} if reachable else {})


@pytest.mark.parametrize("history,now,expected", [
    ([], tonight(), Status.PASS),
    ([rec("pass")], tonight(), Status.PASS),
    ([], tonight(gap=True), Status.NEW_FAILURE),
    ([rec("pass")], tonight(gap=True), Status.NEW_FAILURE),
    ([rec("new_failure", "gap")], tonight(gap=True), Status.KNOWN_FAILURE),
    ([rec("new_failure", "gap"), rec("unreachable", "gap")], tonight(gap=True), Status.KNOWN_FAILURE),
    ([rec("pass"), rec("unreachable", "gap")], tonight(gap=True), Status.NEW_FAILURE),
    ([rec("known_failure", "gap")], tonight(), Status.RECOVERED),
    ([rec("pass"), rec("unreachable", "gap")], tonight(), Status.RECOVERED),
    ([rec("pass")], tonight(reachable=False), Status.UNREACHABLE),
    ([rec("pass")], tonight(version="2"), Status.CHANGED),
    ([rec("pass")], tonight(config="c2"), Status.CHANGED),
])
def test_status_against_history(history, now, expected) -> None:
    assert classify(now, history).status is expected


def test_changed_carries_both_values() -> None:
    result = classify(tonight(version="3", config="c9"), [rec("pass", version="2", config="c1")])
    assert {(c.what, c.before, c.after) for c in result.changes} == {("served_version", "2", "3"),
                                                                      ("config_hash", "c1", "c9")}


def test_alerting_statuses() -> None:
    assert {s for s in Status if s.alerts} == {Status.NEW_FAILURE, Status.UNREACHABLE, Status.CHANGED,
                                               Status.RECOVERED}


def test_cusum_ignores_jitter_and_flags_steady_growth() -> None:
    params = DriftParameters()
    jitter = [0.10, 0.12, 0.09, 0.13, 0.08, 0.14, 0.11, 0.12, 0.10, 0.13]
    assert cusum(jitter, params) < params.threshold
    growth = [0.05, 0.05, 0.05, 0.15, 0.25, 0.35]
    assert cusum(growth[:4], params) < params.threshold < cusum(growth, params)
    assert cusum([0.5, 0.5], params) == 0.0  # baseline still being collected


def test_drift_needs_the_same_deployment_and_stays_below_tolerance() -> None:
    history = [rec("pass", ratio=r) for r in (0.05, 0.05, 0.05, 0.15, 0.25)]
    assert classify(tonight(ratio=0.35), history).status is Status.DRIFTING
    # after a version change the baseline starts again: the change is reported, not drift
    assert classify(tonight(ratio=0.35, version="2"), history).status is Status.CHANGED
    moved = [rec("pass", ratio=r, version="0") for r in (0.05, 0.05, 0.05)] + [rec("pass", ratio=0.3)]
    assert classify(tonight(ratio=0.35), moved).status is Status.PASS


def test_drift_parameters_are_validated() -> None:
    with pytest.raises(ValueError):
        DriftParameters(baseline_runs=0)



def test_error_ratios_under_fp16_budgets_are_not_one_drift_series_with_fp32_nights() -> None:
    """A deployment compared with FP32 budgets, then (same config hash, e.g. a restricted config API) with FP16
    budgets: the FP16 nights start their own baseline instead of reading as growth over the FP32 ones."""
    import dataclasses

    history = [rec("pass", ratio=r) for r in (0.05, 0.05, 0.05, 0.15, 0.25)]
    assert classify(tonight(ratio=0.35), history).status is Status.DRIFTING
    half = dataclasses.replace(tonight(ratio=0.35), precision="fp16")
    result = classify(half, history)
    assert result.status is Status.CHANGED and result.cusum == {"y": 0.0}
    assert [(c.what, c.before, c.after) for c in result.changes] == [("precision", "fp32", "fp16")]


def test_another_golden_bundle_is_a_change_and_said_beside_a_recovery() -> None:
    # The attacker review (D16): a bundle whose rtol was loosened turned a broken deployment into "recovered", the
    # new bundle said nowhere but the run line. Another golden bundle is a change like a new served version.
    other = "h" * 64
    passing = classify(tonight(), [rec("pass", golden=other)])
    assert passing.status is Status.CHANGED
    assert [(c.what, c.before, c.after) for c in passing.changes] == [("golden_hash", other, GOLDEN)]
    recovered = classify(tonight(), [rec("known_failure", "gap", golden=other)])
    assert recovered.status is Status.RECOVERED  # the verdict turned: still said as such, with the change beside it
    assert [c.what for c in recovered.changes] == ["golden_hash"]

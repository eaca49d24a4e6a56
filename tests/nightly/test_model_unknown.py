"""An endpoint naming a model its server does not have: a misspelt name in the config is exit 2 (a retry cannot mend
it), a model the deployment removed after earlier nights is an outage (exit 3). Either way the other endpoints are
checked and recorded, and the endpoint is never a pass."""
from __future__ import annotations

from pathlib import Path

from gapcheck.golden.bundle import load_bundle
from tests.nightly.fake_triton import FakeTriton
from tests.nightly.nights import night


def _endpoint(report: dict, name: str) -> dict:
    return next(e for e in report["endpoints"] if e["name"] == name)


def _findings(report: dict, name: str) -> list[dict]:
    return [f for f in report["findings"] if f["subject"].get("endpoint") == name]


def test_a_misspelt_model_is_a_configuration_error_and_the_good_endpoint_is_still_checked(
        tiny_golden: Path, tmp_path: Path) -> None:
    with FakeTriton(load_bundle(tiny_golden), "ok") as fake:
        base = fake.url.rsplit("/", 1)[0]
        code, report = night(tiny_golden, tmp_path, [f"typo={base}/mm", f"good={fake.url}"], "--no-audit")
    assert code == 2
    typo, good = _endpoint(report, "typo"), _endpoint(report, "good")
    assert typo["status"] == "unreachable" and good["status"] == "pass"
    codes = [f["code"] for f in _findings(report, "typo")]
    assert codes == ["endpoint_model_unknown"], codes
    assert "model 'mm' is not on" in _findings(report, "typo")[0]["message"]
    assert not _findings(report, "good")


def test_a_model_the_deployment_removed_after_earlier_nights_is_an_outage(tiny_golden: Path, tmp_path: Path) -> None:
    with FakeTriton(load_bundle(tiny_golden), "ok") as fake:
        base = fake.url.rsplit("/", 1)[0]
        first, _ = night(tiny_golden, tmp_path, [f"e={fake.url}"], "--no-audit")
        code, report = night(tiny_golden, tmp_path, [f"e={base}/gone"], "--no-audit")
    assert first == 0
    assert code == 3
    assert _endpoint(report, "e")["status"] == "unreachable"
    finding = next(f for f in _findings(report, "e") if f["code"] == "endpoint_model_unknown")
    assert "the deployment no longer has it" in finding["message"]
    assert finding["evidence"]["last_reachable_at"]

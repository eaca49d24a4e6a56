"""An endpoint naming a model its server does not have: a misspelt name in the config is exit 2 (a retry cannot mend
it), a model the deployment removed after earlier nights is an outage (exit 3). Either way the other endpoints are
checked and recorded, and the endpoint is never a pass."""
from __future__ import annotations

from pathlib import Path

import pytest

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
        url = fake.url
        first, _ = night(tiny_golden, tmp_path, [f"e={url}"], "--no-audit")
        fake.model = "renamed"  # the deployment no longer has model m
        code, report = night(tiny_golden, tmp_path, [f"e={url}"], "--no-audit")
    assert first == 0
    assert code == 3
    assert _endpoint(report, "e")["status"] == "unreachable"
    finding = next(f for f in _findings(report, "e") if f["code"] == "endpoint_model_unknown")
    assert "the deployment no longer has it" in finding["message"]
    assert finding["evidence"]["last_reachable_at"]


def test_another_model_under_an_endpoint_name_that_passed_before_is_still_a_misspelling(
        tiny_golden: Path, tmp_path: Path) -> None:
    """The history is asked whether this endpoint ever answered for THIS model, not for its name alone (review #5):
    an endpoint that passed with model m and is then given 'mm' was never served 'mm'."""
    with FakeTriton(load_bundle(tiny_golden), "ok") as fake:
        base = fake.url.rsplit("/", 1)[0]
        first, _ = night(tiny_golden, tmp_path, [f"e={fake.url}"], "--no-audit")
        code, report = night(tiny_golden, tmp_path, [f"e={base}/mm"], "--no-audit")
    assert first == 0 and code == 2
    assert "no longer has it" not in _findings(report, "e")[0]["message"]


def test_a_removed_model_stays_an_outage_past_the_nights_a_status_reads(
        tiny_golden: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review #6: the status reads back the last HISTORY_WINDOW nights (60); a model removed longer ago than that was
    called a misspelling (exit 2) from then on. Here the window is 2 and the model is gone for 3 nights."""
    from gapcheck.nightly import run

    monkeypatch.setattr(run, "HISTORY_WINDOW", 2)
    with FakeTriton(load_bundle(tiny_golden), "ok") as fake:
        url = fake.url
        codes = [night(tiny_golden, tmp_path, [f"e={url}"], "--no-audit")[0]]
        fake.model = "renamed"  # the deployment no longer has model m
        codes += [night(tiny_golden, tmp_path, [f"e={url}"], "--no-audit")[0] for _ in range(3)]
    assert codes == [0, 3, 3, 3], codes


def test_the_verdict_line_of_a_misspelt_night_says_incomplete(tiny_golden: Path, tmp_path: Path, capsys) -> None:
    with FakeTriton(load_bundle(tiny_golden), "ok") as fake:
        code, _ = night(tiny_golden, tmp_path, [f"typo={fake.url.rsplit('/', 1)[0]}/mm"], "--no-audit")
    out = capsys.readouterr().out
    assert code == 2
    assert "INCOMPLETE 1 endpoint(s)" in out and "GAP 1 endpoint(s)" not in out


def test_the_models_the_server_holds_are_listed_closest_first() -> None:
    from types import SimpleNamespace

    from gapcheck.triton.audit import missing_model

    held = [{"name": f"alpha{i:02d}"} for i in range(20)] + [{"name": "cnn"}]  # alphabetically, cnn comes 21st
    error = missing_model(SimpleNamespace(display_url="grpc://h:8001"), "CNN", held)  # type: ignore[arg-type]
    assert error is not None
    assert "it holds 'cnn', 'alpha00'" in error.message, error.message


def test_a_pinned_version_the_server_never_had_is_a_misspelling_too(tiny_golden: Path, tmp_path: Path) -> None:
    """Review #12: '?version=7' on a server serving version 1 was 'not ready', exit 3 every night; the versions it
    has are named now, and a version this endpoint never answered for is exit 2 (version 1 passed before: not it)."""
    with FakeTriton(load_bundle(tiny_golden), "ok") as fake:
        first, _ = night(tiny_golden, tmp_path, [f"e={fake.url}?version=1"], "--no-audit")
        code, report = night(tiny_golden, tmp_path, [f"e={fake.url}?version=7"], "--no-audit")
    assert first == 0 and code == 2
    (finding,) = _findings(report, "e")
    assert finding["code"] == "endpoint_model_unknown"
    assert "version 7 of model 'm' is not on" in finding["message"] and "it has version(s) 1" in finding["message"]
    assert "version" in finding["evidence"]["hint"]


def test_versions_a_server_names_oddly_are_listed_not_a_crash() -> None:
    """The versions are ordered with the audit's own key; a version string of non-ASCII digits ('²': isdigit, but no
    int) from a hostile server is shown, not a ValueError."""
    from types import SimpleNamespace

    from gapcheck.triton.audit import missing_version

    index = [{"name": "m", "version": v} for v in ("10", "2", "²")]
    error = missing_version(SimpleNamespace(display_url="grpc://h:8001"), "m", "7", index,  # type: ignore[arg-type]
                            hint="h")
    assert error is not None
    assert "it has version(s) ², 2, 10" in error.message, error.message

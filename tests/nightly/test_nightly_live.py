"""gapcheck nightly against a real tritonserver whose repository/model-control APIs are restricted."""
from __future__ import annotations

import hashlib
import hmac
import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gapcheck.cli.app import main
from gapcheck.golden import load_bundle
from gapcheck.groups import TritonTarget
from gapcheck.nightly import NightlyRequest, run_nightly
from gapcheck.nightly.alerts import SIGNATURE_HEADER, TIMESTAMP_HEADER
from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option
from gapcheck.nightly.history import History
from gapcheck.nightly.status import Status
from gapcheck.triton.local_server import LocalTritonServer
from tests.nightly.conftest import hardened_server, validate_report, write_model


def night(golden: Path, history: Path, *endpoints: str, deadline_s: float | None = None, **options) -> object:
    specs = tuple(endpoint_spec(parse_endpoint_option(e, timeout_s=5.0)) for e in endpoints)
    target = TritonTarget(retries=1, **({} if deadline_s is None else {"deadline_s": deadline_s}))
    return run_nightly(NightlyRequest(golden=golden, endpoints=specs, history=history, target=target, **options))


def test_two_passing_nights_cli(served, tiny_golden: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    history = tmp_path / "h.sqlite"
    args = ["nightly", "--golden", str(tiny_golden), "--history", str(history), "--retries", "1",
            "--endpoint", f"prod={served.url('grpc', 'stable')}", "--endpoint", f"prod-http={served.url('http', 'stable')}"]
    for n in (1, 2):
        report = tmp_path / f"night{n}.json"
        assert main([*args, "--json", str(report), "--junit", str(tmp_path / "r.xml"),
                     "--html", str(tmp_path / "r.html")]) == 0
        document = json.loads(report.read_text())
        validate_report(document, "nightly")
        assert [e["status"] for e in document["endpoints"]] == ["pass", "pass"]
        assert document["verdict"] == "pass" and document["run"]["exit_code"] == 0
        prod = document["endpoints"][0]
        assert prod["served_version"] == "1" and len(prod["config_hash"]) == 64 and prod["max_batch_size"] == 8
        # 12 golden samples in batches of the served max_batch_size, each request's input SHA256 as sent
        assert [(r["first_sample"], r["count"]) for r in prod["requests"]] == [(0, 8), (8, 4)]
        assert all(len(r["input_sha256"]["x"]) == 64 for r in prod["requests"])
        cases = ET.parse(tmp_path / "r.xml").getroot().iter("testcase")
        assert sorted(c.get("name") for c in cases) == ["prod / output", "prod-http / output"]
        page = (tmp_path / "r.html").read_text()
        assert "Endpoints" in page and "Worst outputs" in page and "prod-http" in page
        if n == 2:  # since when: tonight beside the earlier nights
            assert "prod / output: error over the last 2 nights" in page and "data:image/png;base64," in page
        # the restricted repository API is not asked at all: readiness saw the model ready, and the audit takes what
        # readiness read (metadata, config) instead of asking again; the night passes
        assert not {"triton_api_restricted", "audit_limited"} & {f["code"] for f in document["findings"]}
        assert document["verdict"] == "pass"
    capsys.readouterr()
    assert main(["history", "--history", str(history), "--json", "-"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert main(["history", "--history", str(history), "--json", str(tmp_path / "history.json")]) == 0
    assert json.loads((tmp_path / "history.json").read_text()) == runs  # a file, as every command writes one
    validate_report(runs, "history")
    assert len(runs["runs"]) == 4 and {r["status"] for r in runs["runs"]} == {"pass"}
    assert all({"run_id", "started_at", "endpoint", "status", "verdict", "max_abs_error"} <= set(r) for r in runs["runs"])
    html = tmp_path / "trend.html"
    junit = tmp_path / "history.xml"
    assert main(["history", "--history", str(history), "--endpoint", "prod", "--html", str(html),
                 "--junit", str(junit)]) == 0
    page = html.read_text()
    assert "prod / " in page and page.count("data:image/png;base64,") >= 1 and "<script" not in page
    assert "<testsuite" in junit.read_text() and 'failures="0"' in junit.read_text()


def test_swapped_model_is_a_new_failure_with_a_signed_webhook(served, tiny_golden: Path, golden_onnx, other_onnx,
                                                               webhook_server, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOOK_SECRET", "hmac-s3cret-value")
    history = tmp_path / "h.sqlite"
    base = ["nightly", "--golden", str(tiny_golden), "--history", str(history), "--retries", "1",
            "--endpoint", f"resnet={served.url('grpc', 'swapped')}", "--webhook", webhook_server.url,
            "--webhook-secret-env", "HOOK_SECRET"]
    try:
        assert main([*base, "--json", str(tmp_path / "1.json")]) == 0
        assert webhook_server.received == []  # nobody is woken for a pass
        served.swap(other_onnx, "swapped")
        assert main([*base, "--json", str(tmp_path / "2.json")]) == 1
        document = json.loads((tmp_path / "2.json").read_text())
        validate_report(document, "nightly")
        endpoint = document["endpoints"][0]
        assert endpoint["status"] == "new_failure" and endpoint["verdict"] == "gap"
        gap = next(f for f in document["findings"] if f["code"] == "golden_mismatch")
        assert gap["subject"] == {"endpoint": "resnet", "output": endpoint["outputs"][0]["output"]}
        assert gap["evidence"]["worst_samples"] and gap["evidence"]["failing_samples"] > 0
        [hook] = webhook_server.received
        assert hook["json"]["status"] == "new_failure" and hook["json"]["endpoint"] == "resnet"
        assert hook["json"]["worst_outputs"][0]["passed"] is False
        expected = hmac.new(b"hmac-s3cret-value", hook["headers"][TIMESTAMP_HEADER].encode() + b"." + hook["body"],
                            hashlib.sha256).hexdigest()
        assert hook["headers"][SIGNATURE_HEADER] == f"sha256={expected}"
        assert hook["json"]["failing_since"] == endpoint["failing_since"] and endpoint["last_pass_at"]
        # the same gap the next night: known, recorded, not alerted again; it says since when
        assert main([*base, "--json", str(tmp_path / "3.json")]) == 1
        assert len(webhook_server.received) == 1
        third = json.loads((tmp_path / "3.json").read_text())["endpoints"][0]
        assert third["status"] == "known_failure" and third["failing_since"] == endpoint["failing_since"]
        assert third["last_pass_at"] == endpoint["last_pass_at"] and "since" in third["headline"]
        served.swap(golden_onnx, "swapped")
        assert main([*base]) == 0
        assert [h["json"]["status"] for h in webhook_server.received] == ["new_failure", "recovered"]
    finally:
        served.swap(golden_onnx, "swapped")
    with History(history) as h:
        assert [r.status for r in h.endpoint_history("resnet")] == ["pass", "new_failure", "known_failure", "recovered"]
        assert [a.delivered for a in h.alerts()] == [True, True]
        assert all(a.target == webhook_server.url.split("/hooks")[0] for a in h.alerts())  # never the token path


def test_server_down_is_unreachable_then_recovered(golden_onnx, tiny_golden: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_model(repo, "resnet", golden_onnx)
    server = hardened_server(repo, tmp_path / "work")
    server.start(timeout_s=120)
    history = tmp_path / "h.sqlite"
    endpoint = f"resnet=grpc://{server.grpc_url}/resnet"
    try:
        assert night(tiny_golden, history, endpoint).exit_code == 0
        server.stop()
        down = night(tiny_golden, history, endpoint, deadline_s=20.0)
        assert down.exit_code == 3
        assert down.endpoints[0].status is Status.UNREACHABLE
        assert "endpoint_unreachable" in {f.code for f in down.findings}
        assert down.verdict.value == "gap"  # never a pass
        again = LocalTritonServer(repo, workdir=tmp_path / "work2", ports=server.ports,
                                  extra_args=server.extra_args)
        again.start(timeout_s=120)
        try:
            back = night(tiny_golden, history, endpoint)
            assert back.exit_code == 0 and back.endpoints[0].status is Status.RECOVERED
        finally:
            again.stop()
    finally:
        server.stop()
    with History(history) as h:
        records = h.endpoint_history("resnet")
        assert [(r.status, r.verdict) for r in records] == [("pass", "pass"), ("unreachable", "gap"),
                                                           ("recovered", "pass")]
        assert records[1].error and records[1].outputs == ()


def test_slowly_growing_error_is_drifting_before_it_crosses_the_tolerance(served, tiny_golden: Path,
                                                                          tmp_path: Path) -> None:
    bundle = load_bundle(tiny_golden)
    [name] = bundle.reference
    tol = bundle.tolerances[name]
    allowed = tol.atol  # an offset below atol passes every element, whatever its magnitude
    history = tmp_path / "h.sqlite"
    endpoint = f"model={served.url('grpc', 'drifting')}"
    statuses, ratios = [], []
    try:
        for step in (0, 0, 0, 1, 2, 3, 4, 5, 6, 15):  # three flat nights, then +10% of the tolerance a night
            served.set_drift(step * 0.1 * allowed, "drifting")
            result = night(tiny_golden, history, endpoint)
            statuses.append(result.endpoints[0].status.value)
            ratios.append(result.endpoints[0].outcome.outputs[0].error_ratio)
    finally:
        served.set_drift(0.0, "drifting")
    first_drift = statuses.index("drifting")
    assert statuses[:3] == ["pass"] * 3
    assert ratios[first_drift] < 0.6  # flagged well before the error reaches the tolerance
    assert all(r < 1 for r in ratios[:first_drift + 1])
    assert statuses[-1] == "new_failure" and ratios[-1] > 1
    assert statuses[first_drift:-1] == ["drifting"] * (len(statuses) - 1 - first_drift)
    with History(history) as h:
        cusums = [r.outputs[0].cusum for r in h.endpoint_history("model")]
    assert cusums[:3] == [0.0] * 3 and cusums[first_drift] > 0.25  # recorded beside each night


def test_tampered_bundle_exits_2_and_names_the_file(served, tiny_golden: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(tiny_golden, bundle)
    target = bundle / "inputs.safetensors"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0x01  # same size, one bit flipped
    target.write_bytes(bytes(data))
    history = tmp_path / "h.sqlite"
    code = main(["nightly", "--golden", str(bundle), "--history", str(history),
                 "--endpoint", f"prod={served.url('grpc', 'stable')}"])
    assert code == 2
    assert "inputs.safetensors" in capsys.readouterr().err
    assert not history.exists()  # nothing recorded for a refused bundle
    (bundle / "reference_torch.safetensors").unlink()
    assert main(["golden", "verify", str(bundle)]) == 2


def test_a_changed_config_is_reported_with_both_hashes(served, tiny_golden: Path, golden_onnx, webhook_server,
                                                       tmp_path: Path) -> None:
    from gapcheck.triton.client import TritonEndpoint, connect
    from tests.nightly.conftest import ADMIN_HEADER, ADMIN_TOKEN, model_config

    history = tmp_path / "h.sqlite"
    args = ["nightly", "--golden", str(tiny_golden), "--history", str(history), "--retries", "1",
            "--endpoint", f"prod={served.url('grpc', 'cli')}", "--webhook", webhook_server.url,
            "--webhook-format", "teams"]
    assert main(args) == 0
    config = model_config("cli", golden_onnx, max_batch_size=4)
    (served.repo / "cli" / "config.pbtxt").write_text(config)
    with connect(TritonEndpoint(served.server.http_url, "http", headers={ADMIN_HEADER: ADMIN_TOKEN})) as conn:
        conn.load_model("cli")
    assert main([*args, "--json", str(tmp_path / "r.json")]) == 0  # a change is a warning, not a gap
    document = json.loads((tmp_path / "r.json").read_text())
    endpoint = document["endpoints"][0]
    assert endpoint["status"] == "changed" and endpoint["max_batch_size"] == 4
    [change] = endpoint["changes"]
    assert change["what"] == "config_hash" and change["after"] == endpoint["config_hash"] != change["before"]
    assert [(r["first_sample"], r["count"]) for r in endpoint["requests"]] == [(0, 4), (4, 4), (8, 4)]
    assert "deployment_changed" in {f["code"] for f in document["findings"]}
    [hook] = webhook_server.received
    assert hook["json"]["@type"] == "MessageCard" and "changed" in hook["json"]["title"]


def test_secrets_never_printed_and_a_failing_webhook_keeps_the_exit_code(served, tiny_golden: Path, tmp_path: Path,
                                                                           monkeypatch, capfd) -> None:
    from tests.nightly.conftest import free_port

    monkeypatch.setenv("HOOK_SECRET", "hook-s3cret-9d1")
    header_secret, url_token = "hdr-s3cret-77aa", "T0KEN-in-the-path-5b"
    history, report, html = tmp_path / "h.sqlite", tmp_path / "r.json", tmp_path / "r.html"
    code = main(["nightly", "--golden", str(tiny_golden), "--history", str(history), "--retries", "0",
                 "--endpoint", f"live={served.url('http', 'http')}",
                 "--endpoint", f"down=grpc://127.0.0.1:{free_port()}/gone", "--deadline", "20",
                 "--header", f"x-auth:{header_secret}",
                 "--webhook", f"http://127.0.0.1:{free_port()}/services/{url_token}", "--webhook-secret-env",
                 "HOOK_SECRET", "--json", str(report), "--html", str(html)])
    assert code == 3  # the down endpoint decides; the failed alert does not
    out, err = capfd.readouterr()
    document = json.loads(report.read_text())
    assert [e["status"] for e in document["endpoints"]] == ["pass", "unreachable"]
    assert document["alerts"][0]["delivered"] is False
    assert "webhook_failed" in {f["code"] for f in document["findings"]}
    assert "webhook" in err and "exit code unchanged" in err
    dump = "\n".join(History(history).db.iterdump())
    for secret in (header_secret, url_token, "hook-s3cret-9d1"):
        for text in (out, err, report.read_text(), html.read_text(), dump):
            assert secret not in text

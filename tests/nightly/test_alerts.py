"""Webhook payloads (generic, Slack, Teams), signatures, bounded retries; a failing webhook never fails the run."""
from __future__ import annotations

import hashlib
import hmac
import time

from gapcheck.nightly.alerts import SIGNATURE_HEADER, TIMESTAMP_HEADER, Alert, send, webhook_target
from gapcheck.nightly.config import WebhookFormat

ALERT = Alert(endpoint="prod", url="grpc://triton:8001/resnet", status="new_failure",
              headline="prod: new_failure: y (max |err| 0.3, 4 samples)",
              worst_outputs=({"output": "y", "passed": False, "max_abs_error": 0.3, "error_ratio": 3000.0,
                              "failing_samples": 4, "worst_samples": []},), run_id="r1", report_url="file:///r.html")


def test_generic_payload_is_signed(webhook_server) -> None:
    delivery = send(ALERT, webhook_server.url, WebhookFormat.generic, secret="k3y")
    assert delivery.delivered and delivery.attempts == 1
    [hook] = webhook_server.received
    body = hook["json"]
    assert (body["endpoint"], body["status"], body["report"]) == ("prod", "new_failure", "file:///r.html")
    assert body["worst_outputs"][0]["output"] == "y"
    mac = hmac.new(b"k3y", hook["headers"][TIMESTAMP_HEADER].encode() + b"." + hook["body"], hashlib.sha256)
    assert hook["headers"][SIGNATURE_HEADER] == "sha256=" + mac.hexdigest()


def test_slack_and_teams_shapes(webhook_server) -> None:
    send(ALERT, webhook_server.url, WebhookFormat.slack)
    send(ALERT, webhook_server.url, WebhookFormat.teams)
    slack, teams = (h["json"] for h in webhook_server.received)
    assert slack["text"].startswith("gapcheck nightly: prod is new failure")
    assert slack["blocks"][0]["type"] == "section" and "<file:///r.html|report>" in slack["blocks"][0]["text"]["text"]
    assert teams["@type"] == "MessageCard" and teams["themeColor"] == "B00020"
    assert {"name": "status", "value": "new_failure"} in teams["sections"][0]["facts"]
    assert teams["potentialAction"][0]["targets"][0]["uri"] == "file:///r.html"
    assert all(SIGNATURE_HEADER not in h["headers"] for h in webhook_server.received)  # no secret, no signature


def test_server_errors_are_retried_a_bounded_number_of_times(webhook_server) -> None:
    webhook_server.status = 503
    delivery = send(ALERT, webhook_server.url, WebhookFormat.generic, attempts=3, backoff_s=0.01)
    assert not delivery.delivered and delivery.attempts == 3 and delivery.error == "HTTP 503"
    assert len(webhook_server.received) == 3


def test_a_refusal_is_not_retried(webhook_server) -> None:
    webhook_server.status = 403
    delivery = send(ALERT, webhook_server.url, WebhookFormat.generic, attempts=3, backoff_s=0.01)
    assert (delivery.delivered, delivery.attempts, delivery.error) == (False, 1, "HTTP 403")


def test_an_unreachable_webhook_fails_fast_and_hides_its_path() -> None:
    from tests.nightly.conftest import free_port

    url = f"http://127.0.0.1:{free_port()}/services/T000/B000/SECRETTOKEN"
    start = time.monotonic()
    delivery = send(ALERT, url, WebhookFormat.slack, timeout_s=1.0, attempts=2, backoff_s=0.01)
    assert not delivery.delivered and delivery.attempts == 2 and time.monotonic() - start < 10
    assert "SECRETTOKEN" not in f"{delivery.target} {delivery.error}"
    assert webhook_target(url) == delivery.target == url.split("/services")[0]

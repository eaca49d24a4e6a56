"""Webhook payloads (generic, Slack, Teams), signatures, bounded retries; a failing webhook never fails the run."""
from __future__ import annotations

import hashlib
import hmac
import time

import pytest

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


def test_credentials_in_the_url_are_sent_as_basic_auth_and_never_shown(webhook_server) -> None:
    import base64

    host = webhook_server.url.split("//", 1)[1]
    url = f"http://bob:S3cr%2Ft-pw@{host}"
    delivery = send(ALERT, url, WebhookFormat.generic)
    assert delivery.delivered
    [hook] = webhook_server.received
    assert hook["headers"]["Authorization"] == "Basic " + base64.b64encode(b"bob:S3cr/t-pw").decode()
    assert hook["path"] == "/hooks/T0K3N-in-path"
    assert "S3cr" not in repr(delivery) and "bob" not in delivery.target


def test_a_refused_connection_with_credentials_names_no_secret() -> None:
    from tests.nightly.conftest import free_port

    url = f"http://bob:S3cretPw@127.0.0.1:{free_port()}/hooks/T0K3N"
    delivery = send(ALERT, url, WebhookFormat.generic, timeout_s=1.0, attempts=1)
    assert not delivery.delivered and delivery.error
    assert "S3cretPw" not in f"{delivery.target} {delivery.error}" and "T0K3N" not in str(delivery.error)


def test_a_receiver_that_trickles_its_answer_is_cut_off_at_the_total_deadline() -> None:
    """One byte every half second: no socket operation ever times out, only the total deadline can end it."""
    import socket
    import threading

    stop = threading.Event()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)

    def trickle() -> None:
        while not stop.is_set():
            try:
                server.settimeout(0.2)
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
                while not stop.wait(0.5):
                    try:
                        conn.sendall(b"x")
                    except OSError:
                        break

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        start = time.monotonic()
        delivery = send(ALERT, f"http://127.0.0.1:{server.getsockname()[1]}/hook", WebhookFormat.generic,
                        timeout_s=2.0, attempts=3, deadline_s=3.0)
        elapsed = time.monotonic() - start
    finally:
        stop.set()
        thread.join(5)
        server.close()
    assert not delivery.delivered and "total deadline of 3s" in str(delivery.error)
    assert elapsed < 6, elapsed


class _Recorder:
    """A local HTTP server that records every request of any method (``.seen``) and answers ``status``
    with ``location`` (a redirect when it is a 3xx)."""

    def __init__(self, status: int = 200, location: str | None = None) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, HTTPServer

        recorder = self
        self.seen: list[dict] = []

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                recorder.seen.append({"method": self.command, "headers": dict(self.headers), "body": body})
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_HEAD = _any  # noqa: N815 - http.server's naming

            def log_message(self, *args: object) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "_Recorder":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_never_followed_and_the_credentials_go_nowhere_else(status: int) -> None:
    """Following a redirect would hand the Basic credentials to whatever host the receiver names, as a
    GET without the alert, and call that a delivery. A 3xx is a failed delivery instead."""
    with _Recorder() as elsewhere, _Recorder(status, f"{elsewhere.url}/stolen") as receiver:
        url = f"http://bob:S3cretPw@{receiver.url.split('//', 1)[1]}/hooks/T0K3N"
        delivery = send(ALERT, url, WebhookFormat.generic, timeout_s=2.0, attempts=3, backoff_s=0.01)
    assert elsewhere.seen == []
    assert not delivery.delivered and f"HTTP {status}" in str(delivery.error)
    assert "redirect" in str(delivery.error)
    assert [hook["method"] for hook in receiver.seen] == ["POST"]  # a refusal, not retried
    for text in (repr(delivery), str(delivery.error), delivery.target):
        assert "S3cretPw" not in text and "T0K3N" not in text and "stolen" not in text

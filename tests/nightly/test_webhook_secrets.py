"""A webhook URL's token is never shown nor stored, whatever fails (issue 23, item 1).

The token is planted in the URL's path, query and credentials; each failure path is forced; then
every output the run writes (stdout, stderr, JSON/JUnit/HTML reports, the history database and its
WAL) is searched for it, byte for byte.
"""
from __future__ import annotations

import http.client
import urllib.error
from pathlib import Path

import pytest

from gapcheck.cli.app import main
from gapcheck.nightly import alerts
from gapcheck.nightly.alerts import Alert, redact_url, send
from gapcheck.nightly.config import WebhookFormat
from tests.nightly.conftest import free_port

SECRET = "SECRET123tok"
ALERT = Alert(endpoint="prod", url="grpc://triton:8001/m", status="unreachable", headline="prod: unreachable",
              worst_outputs=(), run_id="r1")
URLS = [
    f"https://hooks.example.com/services/T0/B0/{SECRET}",
    f"https://hooks.example.com/services/T0/B0/{SECRET}?x=1",
    f"https://hooks.example.com/hook?token={SECRET}&a=b",
    f"https://hooks.example.com/a%2F{SECRET}%2Fb",
    f"https://bob:{SECRET}@hooks.example.com/h",
    f"https://hooks.example.com/h#{SECRET}",
]


def _raising(make_exc):
    class Opener:
        def open(self, request, timeout=None):
            raise make_exc(request.full_url)
    return Opener()


# What urllib, http.client and socket put in their messages: the URL or its path, raw, escaped, quoted, decoded.
ERRORS = {
    "InvalidURL (repr of the path)": lambda u: http.client.InvalidURL(
        f"URL can't contain control characters. {u.split('example.com', 1)[1]!r} (found at least ' ')"),
    "URLError with the whole URL": lambda u: urllib.error.URLError(f"cannot reach {u}"),
    "ValueError unknown url type": lambda u: ValueError(f"unknown url type: {u!r}"),
    "OSError naming the decoded path": lambda u: OSError(f"failed on {urllib.parse.unquote(u)}"),
    "a message over several lines": lambda u: RuntimeError(f"first\nsecond {u}\nthird"),
}


@pytest.mark.parametrize("url", URLS)
@pytest.mark.parametrize("error", list(ERRORS))
def test_no_failure_text_carries_the_token(url: str, error: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(alerts, "_OPENER", _raising(ERRORS[error]))
    delivery = send(ALERT, url, WebhookFormat.slack, attempts=2, backoff_s=0.0, timeout_s=1.0)
    assert not delivery.delivered and delivery.error
    assert SECRET not in repr(delivery) and SECRET not in str(delivery.error), delivery.error
    assert delivery.target == "https://hooks.example.com"


def test_the_issue_url_with_a_carriage_return_is_refused_before_any_request() -> None:
    url = f"https://hooks.example.com/services/T0/B0/{SECRET}\r?x=1"
    with pytest.raises(alerts.UsageError) as caught:
        alerts.check_webhook_url(url)
    assert SECRET not in str(caught.value) and "https://hooks.example.com" in str(caught.value)
    delivery = send(ALERT, url, WebhookFormat.generic)  # the library refuses it too, redacted
    assert not delivery.delivered and SECRET not in str(delivery.error)


def test_redaction_keeps_the_host_readable() -> None:
    url = f"https://hooks.example.com/services/T000/{SECRET}"
    assert redact_url(f"ConnectionError: {url} refused", url) == "ConnectionError: https://hooks.example.com refused"


def _everything_written(tmp_path: Path, captured: str) -> bytes:
    blobs = [captured.encode()]
    for path in sorted(tmp_path.rglob("*")):
        if path.is_file():
            blobs.append(path.read_bytes())
    return b"\n".join(blobs)


def test_a_bad_webhook_url_is_exit_2_before_anything_is_recorded(tiny_golden: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    out.mkdir()
    code = main(["nightly", "--golden", str(tiny_golden), "--endpoint", f"down=http://127.0.0.1:{free_port()}/m",
                 "--history", str(out / "h.sqlite"), "--retries", "0", "--json", str(out / "r.json"),
                 "--webhook", f"https://hooks.example.com/services/T0/B0/{SECRET}\r?x=1"])
    captured = capsys.readouterr()
    assert code == 2
    assert not (out / "h.sqlite").exists() and not (out / "r.json").exists()
    assert SECRET.encode() not in _everything_written(out, captured.out + captured.err)


def test_a_failed_delivery_leaves_the_token_in_no_output_report_or_database(
        tiny_golden: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """An unreachable endpoint alerts; the delivery fails with a message holding the whole URL."""
    monkeypatch.setattr(alerts, "_OPENER", _raising(ERRORS["InvalidURL (repr of the path)"]))
    out = tmp_path / "out"
    out.mkdir()
    url = f"https://bob:{SECRET}pw@hooks.example.com/services/T0/B0/{SECRET}?sig={SECRET}"
    code = main(["nightly", "--golden", str(tiny_golden), "--endpoint", f"down=http://127.0.0.1:{free_port()}/m",
                 "--history", str(out / "h.sqlite"), "--retries", "0", "--deadline", "5", "--webhook", url,
                 "--json", str(out / "r.json"), "--junit", str(out / "r.xml"), "--html", str(out / "r.html")])
    captured = capsys.readouterr()
    assert code == 3
    from gapcheck.nightly.history import History

    with History(out / "h.sqlite", readonly=True) as history:
        [alert] = history.alerts()
    assert not alert.delivered and alert.target == "https://hooks.example.com" and alert.error
    assert "webhook" in captured.err and "hooks.example.com" in captured.err  # the failure is still reported
    written = _everything_written(out, captured.out + captured.err)
    assert SECRET.encode() not in written
    assert {p.name for p in out.iterdir()} >= {"h.sqlite", "r.json", "r.xml", "r.html"}


@pytest.mark.parametrize("url", [f"https://hooks.example.com/{SECRET}\u00e9", f"https://hooks.example.com/{SECRET}\x85x",
                                 f"https://hooks.example.com/{SECRET}\u2028"])
def test_a_url_http_client_cannot_send_fails_delivery_without_the_token(url: str) -> None:
    delivery = send(ALERT, url, WebhookFormat.generic)
    assert not delivery.delivered and delivery.error and SECRET not in str(delivery.error)

"""The report link an alert carries is refused when it holds a credential (``user:password@`` or a query/fragment
token): --report-url and [nightly] report_url exit 2 before any work, the value never shown; an alert built by
hand with such a link is never posted."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gapcheck.cli.app import main
from gapcheck.errors import UsageError
from gapcheck.nightly.alerts import Alert, check_report_url, send
from gapcheck.nightly.config import WebhookFormat

PW = "Pw9Xq2zz"
TOKEN = "S3CRETPLANTED9f8e7d"
ALERT = Alert(endpoint="prod", url="grpc://triton:8001/resnet", status="new_failure", headline="prod: new_failure",
              worst_outputs=(), run_id="r1", report_url="https://ci.example.com/r/1")

BAD = [
    f"https://alice:{PW}@ci.example.com/reports/1.html",
    f"https://{TOKEN}@ci.example.com/reports/1.html",
    f"https://ci.example.com/reports/1.html?run=3&access_token={TOKEN}",
    f"https://bucket.s3.amazonaws.com/r.html?X-Amz-Credential=AKIA&X-Amz-Signature={TOKEN}",
    f"https://store.blob.core.windows.net/r.html?sv=2020&sig={TOKEN}",
    f"https://ci.example.com/r.html#id_token={TOKEN}",
    f"https://ci.example.com/r.html?API-KEY={TOKEN}",
]


@pytest.mark.parametrize("url", BAD)
def test_a_link_with_a_credential_is_refused_without_showing_it(url: str) -> None:
    with pytest.raises(UsageError) as caught:
        check_report_url(url)
    message = str(caught.value)
    assert message.startswith("--report-url") and TOKEN not in message and PW not in message


@pytest.mark.parametrize("url", ["https://ci.example.com/reports/1.html", "https://ci.example.com/r?run=3&author=bob",
                                 "file:///var/reports/night.html", "https://ci.example.com/r#section-2", None])
def test_a_plain_link_passes(url: str | None) -> None:
    check_report_url(url)


def test_the_flag_exits_2_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["nightly", "--golden", str(tmp_path / "missing"), "--endpoint", "prod=http://127.0.0.1:9/m",
                 "--history", str(tmp_path / "h.sqlite"), "--report-url", BAD[2]])
    err = capsys.readouterr().err
    assert code == 2 and "--report-url carries a credential in its query (key 'access_token'" in err
    assert TOKEN not in err and not (tmp_path / "h.sqlite").exists()


def test_the_config_key_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "gapcheck.toml"
    config.write_text(f'[nightly]\nreport_url = "{BAD[0]}"\n')
    code = main(["nightly", "--config", str(config), "--golden", str(tmp_path / "missing"), "--endpoint",
                 "prod=http://127.0.0.1:9/m", "--history", str(tmp_path / "h.sqlite")])
    err = capsys.readouterr().err
    assert code == 2 and "[nightly] report_url holds credentials" in err and PW not in err


def test_an_alert_with_such_a_link_is_never_posted(webhook_server) -> None:
    delivery = send(dataclasses.replace(ALERT, report_url=BAD[2]), webhook_server.url, WebhookFormat.generic)
    assert not delivery.delivered and webhook_server.received == []
    assert "the report link carries a credential" in str(delivery.error) and TOKEN not in str(delivery.error)
    assert send(ALERT, webhook_server.url, WebhookFormat.generic).delivered  # a plain link still goes out


def test_the_library_refuses_a_report_link_with_a_credential_when_the_settings_are_made() -> None:
    # The Python API refuses at construction, as the command line does before any work (exit 2).
    from gapcheck.errors import UsageError
    from gapcheck.nightly.run import WebhookSettings

    with pytest.raises(UsageError):
        WebhookSettings(url="https://hooks.example.com/x", report_url="https://ci.example.com/r/1?token=abc123secret")
    assert WebhookSettings(url="https://hooks.example.com/x", report_url="https://ci.example.com/r/1").report_url

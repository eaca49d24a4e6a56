"""A location's credentials never reach stdout, stderr or a report, whatever fails: fsspec refusing the protocol,
a chained URL (``zip://a.csv::http://user:pw@host/a.zip``) whose outer file cannot be opened, an unreadable remote
item counted as bad input. Each error is one line and exit 2 or 3."""
from __future__ import annotations

from pathlib import Path

import pytest

from gapcheck.data.common import bad_input_findings, shard_failure_findings
from gapcheck.data.remote import shown
from gapcheck.engines import ShardFailure

SECRET = "S3cretPW99"


@pytest.mark.parametrize("location", [
    f"ssh://user:{SECRET}@127.0.0.1:9/x.csv",
    f"s3://KEYID:{SECRET}@bucket/x.csv",
    f"zip://x.csv::http://user:{SECRET}@127.0.0.1:9/a.zip",
    f"zip://x.csv::s3://KEYID:{SECRET}@bucket/a.zip",
    f"simplecache::http://user:{SECRET}@127.0.0.1:9/a.csv",
])
def test_cli_errors_never_print_the_password(location, tmp_path: Path, capsys):
    from gapcheck.cli.app import main

    (tmp_path / "a.csv").write_text("id,a\n1,2\n3,4\n")
    report = tmp_path / "r.json"
    code = main(["leakage", "--split", f"b={location}", "--split", f"a={tmp_path / 'a.csv'}",
                 "--engine", "serial", "--json", str(report)])
    out = capsys.readouterr()
    text = out.out + out.err + (report.read_text() if report.exists() else "")
    assert SECRET not in text, text
    assert code in (2, 3), text
    assert len([line for line in out.err.splitlines() if line.strip()]) == 1, out.err
    assert "Traceback" not in text


def test_a_split_without_a_name_is_refused_without_its_password(tmp_path: Path, capsys):
    from gapcheck.cli.app import main

    code = main(["leakage", "--split", f"=s3://KEYID:{SECRET}@bucket/x.csv", "--split", f"a={tmp_path}"])
    out = capsys.readouterr()
    assert code == 2 and SECRET not in out.out + out.err and "name=location" in out.err


def test_shown_hides_userinfo_in_every_segment_of_a_chained_url():
    url = f"zip://x.csv::http://user:{SECRET}@host/a.zip"
    assert SECRET not in shown(url) and "a.zip" in shown(url)
    assert SECRET not in shown(f"FileNotFoundError: http://user:{SECRET}@host/a.zip")


def test_bad_items_and_shard_errors_in_the_report_hide_credentials():
    item = f"train:http://user:{SECRET}@host/t/a.csv"
    findings = bad_input_findings("train", [(item, f"unreadable table: OSError: GET http://user:{SECRET}@host")])
    failures = shard_failure_findings([ShardFailure(index=0, attempts=1, items=(item,),
                                                    error=f"ClientError: http://user:{SECRET}@host/a.csv")])
    text = repr([f.to_dict() if hasattr(f, "to_dict") else f for f in findings + failures])
    assert SECRET not in text and "a.csv" in text


@pytest.mark.parametrize("second", ["b.csv", "missing.csv", "dir/"])
def test_a_remote_split_with_credentials_never_shows_them_in_output_or_report(second, tmp_path: Path, capsys,
                                                                              monkeypatch):
    """Over HTTP with user:password in the URL: bad rows counted, a missing file, a folder: stdout, stderr and the
    JSON report never hold the password."""
    from gapcheck.cli.app import main
    from gapcheck.data import remote
    from tests.data.test_remote import file_server

    monkeypatch.setenv(remote.TIMEOUT_ENV, "5")
    monkeypatch.setenv(remote.RETRIES_ENV, "0")
    remote.forget_failures()
    root = tmp_path / "srv"
    (root / "dir").mkdir(parents=True)
    rows = "".join(f"{i},{i % 3}\n" for i in range(50))
    (root / "a.csv").write_text("x,y\n" + rows)
    (root / "b.csv").write_bytes(b"x,y\n1,2,3,4\n\xff\xfe,1\n" + rows.encode() + b"7,8,9\n")
    report = tmp_path / "r.json"
    with file_server(root) as (url, _):
        secret_url = url.replace("http://", f"http://user:{SECRET}@")
        code = main(["leakage", "--split", f"a={secret_url}/a.csv", "--split", f"b={secret_url}/{second}",
                     "--engine", "serial", "--json", str(report)])
    remote.forget_failures()
    out = capsys.readouterr()
    text = out.out + out.err + (report.read_text() if report.exists() else "")
    assert SECRET not in text, text
    assert code in (0, 1, 2, 3) and "Traceback" not in text
    if second == "b.csv":
        assert code in (0, 1) and '"bad_input"' in text

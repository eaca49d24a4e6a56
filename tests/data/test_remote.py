"""Remote reads: a total deadline and bounded retries (the Triton client's rules), one line and exit 3.

The servers here run on 127.0.0.1: a silent one that accepts connections and never answers, one that
answers 503 a few times before serving, and a plain file server. The deadline is set to 0.5 s through the
environment (as a user would), so each test ends in a few seconds whatever happens.
"""
from __future__ import annotations

import contextlib
import functools
import http.server
import logging
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gapcheck.data import remote
from gapcheck.data.api import drift, leakage
from gapcheck.data.remote import RemotePolicy, RemoteReadError
from gapcheck.engines import open_engine
from gapcheck.errors import EndpointError, ExitCode, InputError, UsageError
from tests.loopback import serving


@pytest.fixture(autouse=True)
def short_deadline(monkeypatch):
    monkeypatch.setenv(remote.TIMEOUT_ENV, "0.5")
    monkeypatch.setenv(remote.RETRIES_ENV, "1")
    remote.forget_failures()
    yield
    remote.forget_failures()


@contextlib.contextmanager
def silent_server() -> Iterator[tuple[str, list[socket.socket]]]:
    """Accepts every connection and never sends a byte."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", held
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        listener.close()


@contextlib.contextmanager
def file_server(root: Path, failures: int = 0) -> Iterator[tuple[str, list[int]]]:
    """Serves ``root``; the first ``failures`` requests get 503."""
    served = [failures]

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _flaky(self) -> bool:
            if served[0] > 0:
                served[0] -= 1
                self.send_error(503)
                return True
            return False

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if not self._flaky():
                super().do_GET()

        def do_HEAD(self) -> None:  # noqa: N802
            if not self._flaky():
                super().do_HEAD()

    with serving(functools.partial(Handler, directory=str(root))) as url:
        yield url, served


def _tables(root: Path) -> None:
    rng = np.random.default_rng(0)
    pd.DataFrame({"x": rng.normal(size=2_000), "y": rng.integers(0, 2, 2_000)}).to_csv(root / "a.csv", index=False)
    pd.DataFrame({"x": rng.normal(size=2_000) + 1, "y": rng.integers(0, 2, 2_000)}).to_parquet(
        root / "b.parquet", row_group_size=500)


def test_silent_server_ends_in_one_remote_read_error(caplog):
    with silent_server() as (url, held), open_engine("serial") as engine, caplog.at_level(logging.WARNING):
        with pytest.raises(RemoteReadError) as caught:
            drift(f"{url}/ref.csv", f"{url}/cur.csv", engine=engine)
        assert held  # the server was reached, and said nothing
    error = caught.value
    assert isinstance(error, EndpointError) and error.exit_code is ExitCode.BACKEND
    text = str(error)
    assert "\n" not in text and "/ref.csv" in text and "within its total deadline of 0.5 s" in text
    # one deadline per read: the silent first attempt spent it, so no second attempt of 0.5 s more was made
    assert "attempts" not in text and not any("attempt 1/2 failed" in r.getMessage() for r in caplog.records)


def test_silent_server_through_the_cli_is_exit_3_with_one_line(capsys):
    from gapcheck.cli.app import main

    with silent_server() as (url, _):
        code = main(["leakage", "--split", f"a={url}/a.csv", "--split", f"b={url}/b.csv", "--engine", "serial"])
    assert code == 3
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip() and "attempt 1/2" not in line]
    assert len(err) == 1 and "remote read of" in err[0], err


def test_credentials_in_the_url_are_never_shown():
    with silent_server() as (url, _):
        secret_url = url.replace("http://", "http://alice:s3cretpass@") + "/x.csv"
        with pytest.raises(RemoteReadError) as caught:
            remote.read_all(secret_url, 1024)
    assert "s3cretpass" not in str(caught.value) and "alice" not in str(caught.value)


def test_a_failed_host_fails_the_next_reads_at_once():
    with silent_server() as (url, held):
        with pytest.raises(RemoteReadError):
            remote.read_all(f"{url}/1.png", 1024)
        reached = len(held)
        with pytest.raises(RemoteReadError, match="not tried"):
            remote.read_all(f"{url}/2.png", 1024)
        assert len(held) == reached  # no new connection


def test_transient_503_is_retried_and_the_read_succeeds(tmp_path):
    _tables(tmp_path)
    with file_server(tmp_path, failures=1) as (url, left), open_engine("serial") as engine:
        result = drift(f"{url}/a.csv", f"{url}/b.parquet", engine=engine)
        assert left == [0]
    assert result.reference.used == result.current.used == 2_000
    assert [f.feature for f in result.features if f.drift] == ["x"]


def test_http_tables_read_like_local_ones(tmp_path):
    from gapcheck.data.leakage import LeakageOptions

    _tables(tmp_path)
    with file_server(tmp_path) as (url, _), open_engine("serial") as engine:
        remote_result = leakage([f"a={url}/a.csv", f"b={url}/b.parquet"], LeakageOptions(label_column="y"),
                                engine=engine)
        local_result = leakage([f"a={tmp_path / 'a.csv'}", f"b={tmp_path / 'b.parquet'}"],
                               LeakageOptions(label_column="y"), engine=engine)
        with pytest.raises(InputError, match="not found"):
            drift(f"{url}/missing.csv", f"{url}/a.csv", engine=engine)
    assert [s.used for s in remote_result.splits] == [s.used for s in local_result.splits] == [2_000, 2_000]
    assert remote_result.auc == local_result.auc


@contextlib.contextmanager
def headers_only_server(size: int = 5_000) -> Iterator[str]:
    """Answers HEAD (the listing succeeds) but never sends the body of a GET: the server stalls once the
    workers read."""
    stop = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()

        def do_GET(self) -> None:  # noqa: N802
            stop.wait(30)

    with serving(Handler) as url:
        try:
            yield url
        finally:
            stop.set()  # the stalled handlers end before the server is shut down


@pytest.mark.parametrize("kind", ["csv", "png"])
def test_a_server_that_stalls_once_workers_read_is_exit_3_too(kind, tmp_path):
    from gapcheck.cli.app import main

    with headers_only_server() as url, open_engine("serial") as engine:
        if kind == "csv":
            with pytest.raises(RemoteReadError, match="a.csv"):
                drift(f"{url}/a.csv", f"{url}/b.csv", engine=engine)
        else:
            with pytest.raises(RemoteReadError, match="x.png"):
                leakage([f"a={url}/x.png", f"b={url}/y.png"], engine=engine)
        remote.forget_failures()
        assert main(["drift", "--reference", f"{url}/a.csv", "--current", f"{url}/b.csv", "--engine", "serial"]) == 3


@pytest.mark.parametrize("env", [{"GAPCHECK_REMOTE_TIMEOUT_S": "nan"}, {"GAPCHECK_REMOTE_TIMEOUT_S": "-1"},
                                 {"GAPCHECK_REMOTE_TIMEOUT_S": "inf"}, {"GAPCHECK_REMOTE_RETRIES": "-1"},
                                 {"GAPCHECK_REMOTE_RETRIES": "x"}])
def test_the_policy_refuses_nonsense(env):
    with pytest.raises(UsageError):
        RemotePolicy.from_env(env)
    assert RemotePolicy.from_env({}) == RemotePolicy(timeout_s=30.0, retries=3)


def test_tokens_in_a_remote_path_or_query_are_never_shown():
    """A presigned ?sig= or a token folder is a credential too: only the host and the file name are printed."""
    from gapcheck.data.remote import shown

    url = "http://127.0.0.1:9/S3CRETTOK/r.csv?sig=S3CRETTOK"
    assert "S3CRETTOK" not in shown(url) and shown(url).startswith("http://127.0.0.1:9/") and "r.csv" in shown(url)
    message = f"ClientError: GET {url} failed"
    assert "S3CRETTOK" not in shown(message, location=url)
    assert shown("data/x.csv") == "data/x.csv"


def _deadline_in(err: str) -> str:
    line = next(line for line in err.splitlines() if "remote read of" in line)
    return line.split("within its total deadline of ")[1].split(" s")[0]


@pytest.mark.parametrize("command", ["leakage", "drift"])
def test_remote_deadline_from_file_environment_and_flags(command, tmp_path, monkeypatch, capsys):
    """[remote] in the file < GAPCHECK_REMOTE__TIMEOUT_S < --remote-timeout (the older variable is the fallback)."""
    from gapcheck.cli.app import main

    config = tmp_path / "gapcheck.toml"
    config.write_text("[remote]\ntimeout_s = 0.4\nretries = 0\n")

    def run(url: str, *extra: str) -> str:
        remote.forget_failures()
        args = (["leakage", "--split", f"a={url}/a.csv", "--split", f"b={url}/b.csv"] if command == "leakage" else
                ["drift", "--reference", f"{url}/a.csv", "--current", f"{url}/b.csv"])
        assert main([*args, "--engine", "serial", "--config", str(config), *extra]) == 3
        return _deadline_in(capsys.readouterr().err)

    with silent_server() as (url, _):
        assert run(url) == "0.4"  # the file beats the older variable (0.5)
        monkeypatch.setenv("GAPCHECK_REMOTE__TIMEOUT_S", "0.3")
        assert run(url) == "0.3"  # the environment beats the file
        assert run(url, "--remote-timeout", "0.2", "--remote-retries", "2") == "0.2"  # the flag beats both
    assert os.environ[remote.TIMEOUT_ENV] == "0.5"  # the run's settings were handed to workers, then restored


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "1e309", "7200"])
def test_remote_settings_are_finite_and_in_range(value, tmp_path, capsys):
    from gapcheck.cli.app import main

    split = ["--split", "a=http://127.0.0.1:9/a.csv", "--split", "b=http://127.0.0.1:9/b.csv"]
    assert main(["leakage", *split, "--remote-timeout", value]) == 2
    assert "--remote-timeout" in capsys.readouterr().err
    config = tmp_path / "gapcheck.toml"
    config.write_text(f"[remote]\ntimeout_s = {value}\n")  # TOML spells nan and inf bare
    assert main(["drift", "--reference", "http://127.0.0.1:9/a.csv", "--current", "http://127.0.0.1:9/b.csv",
                 "--config", str(config)]) == 2
    assert "timeout_s" in capsys.readouterr().err
    assert main(["leakage", *split, "--remote-retries", "11"]) == 2


def test_remote_defaults_match_the_triton_client():
    from gapcheck.groups import remote as group
    from gapcheck.triton import url

    assert (group.DEFAULT_TIMEOUT_S, group.DEFAULT_RETRIES) == (url.DEFAULT_TIMEOUT_S, url.DEFAULT_RETRIES)

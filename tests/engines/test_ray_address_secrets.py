"""An unreachable Ray address: its credentials are never shown, and Ray's own warnings reach the log as one safe
line each (issue 23). A stand-in ``ray`` module keeps the fast test bounded; the slow one asks the real Ray."""
from __future__ import annotations

import logging
import os
import socket
import types
import warnings

import pytest

from gapcheck.engines import ray_engine
from gapcheck.engines.ray_engine import RayEngine
from gapcheck.errors import BackendError

SECRET = "S3CRETTOK"


def _free_port() -> int:
    with socket.socket() as spare:  # a port nobody listens on
        spare.bind(("127.0.0.1", 0))
        return int(spare.getsockname()[1])


def _fake_ray(address_seen: list[str]) -> types.SimpleNamespace:
    def init(address: str | None = None, **_: object) -> None:
        address_seen.append(str(address))
        address = address or os.environ.get("RAY_ADDRESS")  # what Ray itself falls back to
        # What Ray does for an unreachable client address: a multi-line warning, then an error naming the address.
        warnings.warn(f"Ray Client connection timed out.\n  warnings.warn(\x1b[2J at {address}", UserWarning,
                      stacklevel=2)
        raise ConnectionError(f"ray client connection timeout for {address}\nsecond line")

    return types.SimpleNamespace(is_initialized=lambda: False, init=init)


def test_unreachable_address_is_redacted_and_warnings_are_one_safe_line(monkeypatch, caplog, capsys):
    seen: list[str] = []
    monkeypatch.setattr(ray_engine, "import_ray", lambda: _fake_ray(seen))
    address = f"ray://u:{SECRET}@127.0.0.1:{_free_port()}"
    with (caplog.at_level(logging.WARNING, logger="gapcheck.engines.ray_engine"),
          pytest.raises(BackendError) as info, warnings.catch_warnings(record=True) as leaked):
        warnings.simplefilter("always")
        RayEngine(address=address)
    assert seen == [address]  # the credentials are still handed to Ray itself
    message = str(info.value)
    assert SECRET not in message and "u:" not in message and "\n" not in message
    assert message.startswith("could not start or reach Ray at ray://***@127.0.0.1:")
    assert leaked == []  # nothing re-warned raw: the warning went to the log instead
    records = [r for r in caplog.records if r.name == "gapcheck.engines.ray_engine"]
    assert len(records) == 1
    line = records[0].getMessage()
    assert line.startswith("Ray: Ray Client connection timed out.")
    assert "\n" not in line and "\x1b" not in line and SECRET not in line
    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err + caplog.text


def test_credentials_in_ray_address_from_the_environment_are_redacted_too(monkeypatch, caplog):
    seen: list[str] = []
    monkeypatch.setattr(ray_engine, "import_ray", lambda: _fake_ray(seen))
    monkeypatch.setenv("RAY_ADDRESS", f"ray://u:{SECRET}@127.0.0.1:{_free_port()}")
    with caplog.at_level(logging.WARNING), pytest.raises(BackendError) as info:
        RayEngine(address=None)
    assert seen == ["None"]  # Ray reads RAY_ADDRESS itself
    assert SECRET not in str(info.value) + caplog.text
    assert "ray://***@127.0.0.1:" in caplog.text  # the warning quoted it, redacted


@pytest.mark.slow  # Ray's client gives up on an unreachable address after about 30 s
def test_real_ray_on_an_unreachable_address(caplog, capsys):
    pytest.importorskip("ray")
    address = f"ray://u:{SECRET}@127.0.0.1:{_free_port()}"
    with caplog.at_level(logging.WARNING), pytest.raises(BackendError) as info:
        RayEngine(address=address)
    assert SECRET not in str(info.value) and "\n" not in str(info.value)
    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err + caplog.text
    assert all("\n" not in r.getMessage() and "site-packages" not in r.getMessage() for r in caplog.records)

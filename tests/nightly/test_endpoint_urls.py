"""nightly endpoint URLs with credentials (``http://user:password@host/m``): refused before work with exit 2 (no
history row, no report), the credentials never shown (issue 23). gapcheck never sends URL credentials, and a night
run that silently dropped them would fail authentication every night."""
from __future__ import annotations

from pathlib import Path

import pytest

from gapcheck.cli.app import main
from gapcheck.errors import UsageError
from gapcheck.nightly.config import EndpointConfig, endpoint_spec, parse_endpoint_option
from gapcheck.triton.url import parse_endpoint_url
from tests.nightly.conftest import free_port

SECRET = "S3CRETTOK"


def _everything(out: Path, printed: str) -> bytes:
    return printed.encode() + b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())


@pytest.mark.parametrize("url", [
    f"http://u:{SECRET}@127.0.0.1:{{port}}/m",
    f"grpc://{SECRET}@127.0.0.1:{{port}}/m?version=1",
    f"u:{SECRET}@127.0.0.1:{{port}}/m",
])
def test_credentials_in_an_endpoint_flag_are_refused_before_any_history_row(url, tiny_golden, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    code = main(["nightly", "--golden", str(tiny_golden), "--endpoint", "prod=" + url.format(port=free_port()),
                 "--history", str(out / "h.sqlite"), "--retries", "0", "--deadline", "10",
                 "--json", str(out / "r.json")])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert "credentials" in captured.err and "prod" in captured.err
    assert not (out / "h.sqlite").exists() and not (out / "r.json").exists()
    assert SECRET.encode() not in _everything(out, captured.out + captured.err)


def test_credentials_in_a_config_file_endpoint_are_refused_without_showing_them():
    with pytest.raises(UsageError) as info:
        endpoint_spec(EndpointConfig(name="prod", url=f"https://bob:{SECRET}@triton.example.com:443/m"))
    assert "credentials" in info.value.message and SECRET not in str(info.value) and "bob" not in str(info.value)


def test_a_malformed_endpoint_option_never_echoes_credentials():
    with pytest.raises(UsageError) as info:
        parse_endpoint_option(f"=http://u:{SECRET}@127.0.0.1:8000/m")
    assert SECRET not in str(info.value) and "NAME=URL" in str(info.value)


def test_the_same_parser_accepts_the_url_without_credentials_and_refuses_them_for_every_caller():
    spec = endpoint_spec(EndpointConfig(name="prod", url="grpc://127.0.0.1:8001/m?version=3"))
    assert (spec.address, spec.protocol, spec.model, spec.version) == ("127.0.0.1:8001", "grpc", "m", "3")
    with pytest.raises(UsageError) as info:  # the default: refused, never dropped silently
        parse_endpoint_url(f"http://u:{SECRET}@h:8000/m")
    assert SECRET not in str(info.value)
    assert parse_endpoint_url(f"http://u:{SECRET}@h:8000/m", allow_credentials=True).address == "h:8000"

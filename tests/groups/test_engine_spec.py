"""EngineSpec (issue 18 review D2/D3): an address with control characters is refused up front (exit 2, it reached
Ray's client: ~30 s, then exit 3); ``--engine serial`` over ``[engine] name = "ray"`` + ``address`` is the flag's
choice, the configured address goes with the configured engine."""
from __future__ import annotations

from pathlib import Path

import pytest

from gapcheck.cli.app import main
from gapcheck.errors import UsageError
from gapcheck.groups import EngineSpec


@pytest.mark.parametrize("address", ["ray://x\r\ny", "ray://x\ny", "ray://x\x00", "ray://\x1b[31mx", "", "  "])
def test_an_address_with_control_characters_is_refused(address: str) -> None:
    with pytest.raises(UsageError, match="without control characters"):
        EngineSpec(name="ray", address=address)


def _drift(tmp_path: Path, *args: str) -> list[str]:
    ref, cur = tmp_path / "ref.csv", tmp_path / "cur.csv"
    for path in (ref, cur):
        path.write_text("x\n" + "\n".join(str(i) for i in range(40)) + "\n")
    return ["drift", "--reference", str(ref), "--current", str(cur), *args]


def test_the_cli_refuses_it_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_drift(tmp_path, "--engine", "ray", "--engine-address", "ray://x\r\ny")) == 2
    err = capsys.readouterr().err
    assert "control characters" in err and "\r" not in err


def test_a_flag_engine_drops_the_configured_ray_address(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "gapcheck.toml"
    config.write_text('[engine]\nname = "ray"\naddress = "ray://head:10001"\n')
    assert main(_drift(tmp_path, "--engine", "serial", "--config", str(config))) == 0, capsys.readouterr().err


def test_an_address_beside_a_non_ray_engine_on_one_layer_is_refused(tmp_path: Path) -> None:
    assert main(_drift(tmp_path, "--engine", "serial", "--engine-address", "ray://head:10001")) == 2
    config = tmp_path / "gapcheck.toml"
    config.write_text('[engine]\nname = "serial"\naddress = "ray://head:10001"\n')
    assert main(_drift(tmp_path, "--config", str(config))) == 2


def test_the_hook_alone() -> None:
    config = {"name": "ray", "address": "ray://head:10001", "workers": None}
    fields = {"name": "serial", "address": "ray://head:10001", "workers": None}
    assert EngineSpec.from_cli(fields, config, frozenset({"name"}))["address"] is None
    assert EngineSpec.from_cli(fields, config, frozenset({"name", "address"}))["address"] == "ray://head:10001"
    assert EngineSpec.from_cli({**fields, "name": "ray"}, config, frozenset({"name"}))["address"] == "ray://head:10001"


@pytest.mark.parametrize("address", ["ray://h:0", "ray://h:99999", "ray://:10001", "ray://h:", "ray://h:x",
                                     "h", "http://h:10001", "ray://u@h:10001", "ray://a/b:1", "ray://h:１２"])
def test_a_bad_host_or_port_is_refused_up_front(address: str) -> None:
    """Issue 23 attacker round 5 #6: these reached Ray's client (~31 s of retries, then exit 3)."""
    with pytest.raises(UsageError, match="is not a Ray address"):
        EngineSpec(name="ray", address=address)


@pytest.mark.parametrize("address", ["auto", "local", "ray://head:10001", "ray://head", "head:6379",
                                     "10.0.0.1:6379", "ray://[::1]:10001", "[::1]:6379"])
def test_what_ray_init_takes_is_accepted(address: str) -> None:
    assert EngineSpec(name="ray", address=address).address == address


def test_the_cli_refuses_a_bad_port_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_drift(tmp_path, "--engine", "ray", "--engine-address", "ray://h:0")) == 2
    assert "is not a Ray address" in capsys.readouterr().err

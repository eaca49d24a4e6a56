"""The [nightly] section (pydantic, unknown keys refused), endpoint URLs, and flags over the file."""
from __future__ import annotations

from pathlib import Path

import pytest

from gapcheck.cli.app import main
from gapcheck.errors import ConfigError, UsageError
from gapcheck.nightly.config import (
    EndpointConfig,
    endpoint_spec,
    load_nightly_config,
    parse_endpoint_option,
    parse_nightly_section,
)

TOML = """
[nightly]
golden = "golden"
history = "state/history.sqlite"
webhook_format = "teams"
webhook_secret_env = "HOOK_SECRET"

[[nightly.endpoints]]
name = "prod"
url = "grpc://triton-prod:8001"
model = "resnet"
version = 3
headers = { authorization = "${TRITON_TOKEN}" }
timeout_s = 12

[nightly.drift]
slack = 0.1
"""


def test_section_is_validated_and_paths_follow_the_file(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "gapcheck.toml").write_text(TOML)
    config = load_nightly_config(tmp_path / "gapcheck.toml")
    assert config.golden == str(tmp_path / "golden") and config.history == str(tmp_path / "state/history.sqlite")
    assert config.drift.slack == 0.1 and config.drift.threshold == 0.25
    monkeypatch.setenv("TRITON_TOKEN", "Bearer t0k3n")
    spec = endpoint_spec(config.endpoints[0])
    assert (spec.address, spec.protocol, spec.model, spec.version, spec.timeout_s) == (
        "triton-prod:8001", "grpc", "resnet", "3", 12.0)
    assert spec.headers == {"authorization": "Bearer t0k3n"} and "t0k3n" not in repr(spec)


def test_unknown_keys_and_bad_values_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nightly.histroy"):
        parse_nightly_section({"histroy": "x"}, tmp_path / "gapcheck.toml")
    with pytest.raises(ConfigError, match="nightly.max_in_flight"):
        parse_nightly_section({"max_in_flight": 0}, None)


def test_a_missing_header_variable_is_a_config_error(monkeypatch) -> None:
    monkeypatch.delenv("NOPE_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="NOPE_TOKEN"):
        endpoint_spec(EndpointConfig(name="p", url="http://h:8000/m", headers={"x": "${NOPE_TOKEN}"}))


@pytest.mark.parametrize("text,expected", [
    ("prod=grpc://triton:8001/resnet", ("triton:8001", "grpc", False, "resnet", None)),
    ("canary=http://triton-canary:8000/resnet?version=3", ("triton-canary:8000", "http", False, "resnet", "3")),
    ("tls=grpcs://triton/resnet", ("triton:443", "grpc", True, "resnet", None)),
])
def test_endpoint_urls(text: str, expected) -> None:
    spec = endpoint_spec(parse_endpoint_option(text))
    assert (spec.address, spec.protocol, spec.ssl, spec.model, spec.version) == expected


@pytest.mark.parametrize("text", ["noequals", "prod=ftp://h/m", "prod=grpc://h:8001", "bad name=grpc://h:1/m"])
def test_bad_endpoints_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError):
        endpoint_spec(parse_endpoint_option(text))


def test_config_endpoints_are_used_and_bad_config_exits_2(tmp_path: Path, capsys) -> None:
    (tmp_path / "gapcheck.toml").write_text('[nightly]\nlock_wait_s = "soon"\n')
    assert main(["nightly", "--config", str(tmp_path / "gapcheck.toml"), "--golden", "g"]) == 2
    assert "nightly.lock_wait_s" in capsys.readouterr().err
    (tmp_path / "gapcheck.toml").write_text('[nightly]\n')
    assert main(["nightly", "--config", str(tmp_path / "gapcheck.toml")]) == 2  # no golden bundle anywhere


def test_report_path_is_checked_before_any_work(tmp_path: Path, capsys) -> None:
    assert main(["nightly", "--golden", "missing", "--endpoint", "p=grpc://h:1/m", "--json", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "gapcheck.toml").write_text(TOML)
    monkeypatch.setenv("GAPCHECK_NIGHTLY__MAX_IN_FLIGHT", "7")
    assert load_nightly_config(tmp_path / "gapcheck.toml").max_in_flight == 7


@pytest.mark.parametrize("name", ["prod\n", "pr\x1b[31mod", "prod\r", "pr\u202eod", ""])
def test_control_characters_in_endpoint_names_are_refused(name: str) -> None:
    from gapcheck.nightly.config import EndpointConfig

    with pytest.raises(UsageError) as caught:
        endpoint_spec(EndpointConfig(name=name, url="http://h:8000/m"))
    assert "\x1b" not in str(caught.value) and "\n" not in str(caught.value).split(" may only")[0]


def test_control_characters_on_the_command_line_exit_2_and_are_not_echoed(tmp_path: Path, capsys) -> None:
    from gapcheck.cli.app import main

    code = main(["nightly", "--golden", str(tmp_path), "--endpoint", "pr\x1b[2Jod=http://h:8000/m\x07",
                 "--history", str(tmp_path / "h.sqlite")])
    captured = capsys.readouterr()
    assert code == 2
    assert "\x1b" not in captured.err + captured.out and "\x07" not in captured.err + captured.out

"""The one endpoint URL parser, model names, header checks and redaction (no server)."""
from __future__ import annotations

import pytest

from gapcheck.errors import UsageError
from gapcheck.triton.client import TritonEndpoint
from gapcheck.triton.url import check_headers, check_model_name, parse_endpoint_url, redact, secrets_in


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("127.0.0.1:8000", ("127.0.0.1", 8000, None, False, None, None)),
        ("http://triton:8000", ("triton", 8000, "http", False, None, None)),
        ("https://triton.example", ("triton.example", 443, "http", True, None, None)),
        ("grpc://triton", ("triton", 8001, "grpc", False, None, None)),
        ("grpcs://triton:8443/", ("triton", 8443, "grpc", True, None, None)),
        ("grpc://host:8001/resnet?version=3", ("host", 8001, "grpc", False, "resnet", "3")),
        ("http://host:8000/v2/models/resnet/versions/7", ("host", 8000, "http", False, "resnet", "7")),
        ("http://[::1]:8000/bert", ("[::1]", 8000, "http", False, "bert", None)),
    ],
)
def test_url_forms(url, expected):
    parsed = parse_endpoint_url(url)
    assert (parsed.host, parsed.port, parsed.protocol, parsed.ssl, parsed.model, parsed.version) == expected
    assert "pw" not in parsed.display


@pytest.mark.parametrize("url", ["grpcs://u:pw@triton:8443/", "http://alice:hunter2pw@h:8000/m", "u:pw@h:8001"])
def test_url_credentials_are_refused_by_default_and_never_echoed(url):
    with pytest.raises(UsageError) as refused:
        parse_endpoint_url(url)
    assert "credentials" in str(refused.value)
    assert "pw" not in str(refused.value) and "alice" not in str(refused.value)
    dropped = parse_endpoint_url(url, allow_credentials=True)  # only for callers that want the location
    assert "pw" not in dropped.display and "@" not in dropped.address


@pytest.mark.parametrize("url", ["ftp://h:1", "h", "h:0", "h:99999", "h:80/a/b", "http://h:1/?version=2",
                                 "http://h:1/m?version=x", "http://h:1/m?token=1", "http://h:1/v2/models",
                                 "http://h:1/bad\nname", "http:// h:1"])
def test_bad_urls_are_usage_errors(url):
    with pytest.raises(UsageError):
        parse_endpoint_url(url)


def test_scheme_and_protocol_must_agree_and_the_scheme_chooses_by_default():
    assert TritonEndpoint("grpcs://h:1").protocol == "grpc" and TritonEndpoint("grpcs://h:1").address.ssl
    assert TritonEndpoint("h:1").protocol is None  # probed on connect
    assert TritonEndpoint("http://h:1").display_url == "http://h:1"
    with pytest.raises(UsageError, match="says http"):
        TritonEndpoint("http://h:1", "grpc")
    with pytest.raises(UsageError, match="https://|https"):
        TritonEndpoint("http://h:1", ssl=True)
    assert TritonEndpoint("grpc://h:8001/resnet?version=3").location.model == "resnet"


@pytest.mark.parametrize("name", ["resnet50", "bert_base-v2.onnx", "_x"])
def test_model_names_triton_takes(name):
    assert check_model_name(name) == name


@pytest.mark.parametrize("name", ["", "a/b", "..", ".hidden", "-x", 'q"uote', "new\nline", "sp ace", "x" * 256])
def test_model_names_that_would_break_a_path_a_url_or_config_pbtxt(name):
    with pytest.raises(UsageError) as info:
        check_model_name(name)
    assert "\n" not in str(info.value).replace("\nhint", "")


def test_header_checks_name_the_key_only():
    assert check_headers({"triton-access-token": "t0k"}) == {"triton-access-token": "t0k"}
    for bad in ({"authorization": "a\r\nb-secret"}, {"authorization": "x\x00-secret"}, {"authorization": "sé€ret"}):
        with pytest.raises(UsageError) as info:
            check_headers(bad)
        assert "secret" not in str(info.value).replace("header values are secret", "")
    with pytest.raises(UsageError, match="header name"):
        check_headers({"bad key": "v"})


def test_redaction_covers_escaped_and_split_forms():
    value = "tok-ABCDEF\nline-two-XYZ"
    secrets = secrets_in("http://h:1", {"authorization": value})
    text = redact(f"raw {value} repr {value!r} line line-two-XYZ", secrets)
    assert "ABCDEF" not in text and "XYZ" not in text


def test_cli_model_names_with_control_characters_are_refused(tmp_path, capsys):
    from gapcheck.cli.app import main

    onnx_file = tmp_path / "m.onnx"
    onnx_file.write_bytes(b"")
    code = main(["triton-audit", "--triton-url", "http://127.0.0.1:1", "--triton-model", "tiny\x1b[2J",
                 "--onnx", str(onnx_file)])
    assert code == 2 and "--triton-model" in capsys.readouterr().err


def test_a_model_name_with_a_trailing_newline_is_refused() -> None:
    """``re.match`` with ``$`` takes "cnn\\n" (``$`` matches before a final newline): a TOML ``model = "cnn\\n"``
    was accepted and shown as 'cnn ' (review #10)."""
    import pytest

    from gapcheck.errors import UsageError
    from gapcheck.triton.url import check_model_name

    assert check_model_name("cnn") == "cnn"
    with pytest.raises(UsageError, match="control character"):
        check_model_name("cnn\n")

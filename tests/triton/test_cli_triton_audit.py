"""`gapcheck triton-audit` end to end against the live test server."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from importlib import resources

import jsonschema

from gapcheck.cli.app import main
from gapcheck.triton.local_server import free_ports
from tests.triton.conftest import SECRET_HEADER, SECRET_VALUE


def run(triton, model, tiny_onnx_path, *extra, protocol="http"):
    return main(["triton-audit", "--triton-url", triton.url(protocol), "--triton-model", model,
                 "--onnx", str(tiny_onnx_path), "--protocol", protocol, *extra])


def validate(report: dict) -> None:
    schema = json.loads(resources.files("gapcheck.schemas").joinpath("triton-audit.schema.json").read_text())
    jsonschema.validate(report, schema)


def test_matching_deployment_exits_0(triton, tiny_onnx_path, protocol, capsys):
    assert run(triton, "tiny", tiny_onnx_path, protocol=protocol) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "triton_platform" in out and "2.51.0" in out


def test_fp16_input_exits_1_with_both_values_and_reports(triton, tiny_onnx_path, tmp_path, capsys):
    json_path, junit_path = tmp_path / "audit.json", tmp_path / "audit.xml"
    code = run(triton, "tiny_fp16", tiny_onnx_path, "--json", str(json_path), "--junit", str(junit_path))
    assert code == 1
    out = capsys.readouterr().out
    assert "triton_dtype_mismatch" in out and "TYPE_FP16" in out and "TYPE_FP32" in out
    report = json.loads(json_path.read_text())
    validate(report)
    assert report["command"] == "triton-audit" and report["verdict"] == "gap"
    (finding,) = [f for f in report["findings"] if f["code"] == "triton_dtype_mismatch"]
    assert finding["evidence"] == {"served": "TYPE_FP16", "onnx": "TYPE_FP32"} and finding["severity"] == "gap"
    assert finding["subject"] == {"endpoint": f"http://{triton.url('http')}", "module": "tiny_fp16", "output": "input x"}
    assert report["served"]["inputs"][0]["data_type"] == "TYPE_FP16"
    assert report["onnx"]["inputs"] == [{"name": "x", "data_type": "TYPE_FP32", "shape": [None, 3, 8, 8]}]
    suite = ET.parse(junit_path).getroot().find("testsuite")
    assert suite.get("failures") == "1"
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert cases["input x"].find("failure") is not None and cases["output y"].find("failure") is None


def test_stale_version_exits_1(triton, tiny_onnx_path, capsys):
    assert run(triton, "tiny_versions", tiny_onnx_path, "--triton-version", "2", protocol="grpc") == 1
    assert "triton_version_stale" in capsys.readouterr().out


def test_not_ready_model_exits_1_and_names_the_state(triton, tiny_onnx_path, capsys):
    assert run(triton, "broken", tiny_onnx_path) == 1
    out = capsys.readouterr().out
    assert "triton_not_ready" in out and "UNAVAILABLE" in out


def test_server_down_exits_3_and_never_prints_the_header(tiny_onnx_path, tmp_path, capsys):
    (port,) = free_ports(1)
    json_path = tmp_path / "never.json"
    code = main(["triton-audit", "--triton-url", f"127.0.0.1:{port}", "--triton-model", "tiny", "--onnx",
                 str(tiny_onnx_path), "--protocol", "grpc", "--retries", "1", "--timeout", "2",
                 "--header", f"{SECRET_HEADER}:{SECRET_VALUE}", "--json", str(json_path)])
    assert code == 3
    captured = capsys.readouterr()
    assert f"127.0.0.1:{port}" in captured.err and SECRET_VALUE not in captured.out + captured.err
    assert not json_path.exists()  # no report claims anything about a server that never answered


def test_secret_header_reaches_a_secured_server_and_stays_out_of_reports(secured_triton, tiny_onnx_path, tmp_path,
                                                                         capsys):
    json_path = tmp_path / "audit.json"
    code = main(["--debug", "triton-audit", "--triton-url", secured_triton.http_url, "--triton-model", "tiny", "--onnx",
                 str(tiny_onnx_path), "--protocol", "http", "--header", f"{SECRET_HEADER}:{SECRET_VALUE}",
                 "--json", str(json_path)])
    assert code == 0
    captured = capsys.readouterr()
    assert SECRET_VALUE not in captured.out + captured.err + json_path.read_text()
    validate(json.loads(json_path.read_text()))


def test_malformed_header_is_a_usage_error_without_echo(tiny_onnx_path, capsys):
    code = main(["triton-audit", "--triton-url", "127.0.0.1:1", "--triton-model", "tiny", "--onnx",
                 str(tiny_onnx_path), "--header", "no-colon-s3cr3t"])
    assert code == 2
    captured = capsys.readouterr()
    assert "--header #1" in captured.err  # the spelling the user typed and "s3cr3t" not in captured.out + captured.err


def test_missing_onnx_file_is_a_usage_error(tmp_path, capsys):
    code = main(["triton-audit", "--triton-url", "127.0.0.1:1", "--triton-model", "tiny", "--onnx",
                 str(tmp_path / "missing.onnx")])
    assert code == 2


def test_missing_tls_file_is_a_usage_error(tiny_onnx_path, tmp_path, capsys):
    code = main(["triton-audit", "--triton-url", "127.0.0.1:1", "--triton-model", "tiny", "--onnx",
                 str(tiny_onnx_path), "--ssl", "--ssl-root-cert", str(tmp_path / "missing-ca.pem")])
    assert code == 2
    assert "TLS file" in capsys.readouterr().err


def test_triton_section_of_the_config_fills_what_flags_leave_out(triton, tiny_onnx_path, tmp_path, capsys):
    config = tmp_path / "gapcheck.toml"
    config.write_text(f'[triton]\nurl = "http://{triton.url("http")}"\nmodel = "tiny"\ntimeout_s = 5\n')
    assert main(["triton-audit", "--onnx", str(tiny_onnx_path), "--config", str(config)]) == 0
    # flags win over the file
    assert main(["triton-audit", "--onnx", str(tiny_onnx_path), "--config", str(config),
                 "--triton-model", "tiny_fp16"]) == 1
    assert "triton_dtype_mismatch" in capsys.readouterr().out


def test_old_spellings_still_work(triton, tiny_onnx_path):
    assert main(["triton-audit", "--triton-url", triton.url("grpc"), "--triton-model", "tiny", "--onnx",
                 str(tiny_onnx_path), "--timeout", "5", "--retries", "0", "--header", "x-any:value"]) == 0


def test_the_audit_never_imports_torch(triton, tiny_onnx_path, tmp_path):
    """Reading an ONNX file is torch-free (gapcheck/model/onnx_file.py): a cron's audit starts in a second, not five."""
    import subprocess
    import sys
    from pathlib import Path

    script = ("import sys\nfrom gapcheck.cli.app import main\n"
              f"code = main(['triton-audit', '--triton-url', {triton.url('http')!r}, '--triton-model', 'tiny', "
              f"'--onnx', {str(tiny_onnx_path)!r}, '--protocol', 'http', '--json', {str(tmp_path / 'a.json')!r}])\n"
              "print(code, 'torch' in sys.modules)\n")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.stdout.split()[-2:] == ["0", "False"], done.stdout + done.stderr

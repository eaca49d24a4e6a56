"""export-diff through the CLI boundary: exit codes, reports, bad input."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import torch

from gapcheck.cli.app import main
from gapcheck.report.envelope import validate
from sample_models.cnn import build_small_resnet

RESNET = ["--model", "sample_models.cnn:build_small_resnet", "--input", "x:1x3x32x32:float32", "--no-progress"]
CUSTOM = ["--model", "sample_models.planted:build_custom_op", "--input", "x:1x16:float32", "--exporter", "torchscript",
          "--no-progress"]


@pytest.fixture(scope="module")
def resnet_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "resnet.pt"
    # DDP-style prefix and nesting, as training scripts save them.
    state = {f"module.{k}": v for k, v in build_small_resnet().state_dict().items()}
    torch.save({"epoch": 3, "state_dict": state}, path)
    return path


def test_clean_model_exits_0_with_reports(tmp_path, capsys, resnet_checkpoint):
    report, junit, onnx_out = tmp_path / "r.json", tmp_path / "r.xml", tmp_path / "m.onnx"
    code = main(["export-diff", "--checkpoint", str(resnet_checkpoint), *RESNET, "--json", str(report),
                 "--junit", str(junit), "--save-onnx", str(onnx_out)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "PASS" in out and "layer1.0.bn1" in out
    doc = json.loads(report.read_text())
    validate(doc)
    assert doc["schema_version"] == "2.0" and doc["command"] == "export-diff"
    assert doc["verdict"] == "pass" and doc["first_divergence"] is None
    assert {layer["module"] for layer in doc["layers"]} >= {"conv1", "bn1", "layer1.0.conv1", "fc"}
    folded = next(layer for layer in doc["layers"] if layer["module"] == "conv1")
    assert folded["status"] == "no-onnx"  # BatchNorm folded into the Conv: shown, not failed
    assert doc["inputs"][0]["sha256"]["torch"] == doc["inputs"][0]["sha256"]["onnxruntime"]
    suite = ET.parse(junit).getroot().find("testsuite")
    assert int(suite.get("tests")) >= 10 and suite.get("failures") == "0"
    assert onnx_out.stat().st_size > 1000


def test_planted_gap_exits_1_and_names_module(tmp_path, capsys):
    report, junit, page = tmp_path / "r.json", tmp_path / "r.xml", tmp_path / "r.html"
    code = main(["export-diff", *CUSTOM, "--num-samples", "3", "--json", str(report), "--junit", str(junit),
                 "--html", str(page)])
    out = capsys.readouterr().out
    assert code == 1
    assert "first divergence: act" in out
    doc = json.loads(report.read_text())
    validate(doc)
    assert doc["verdict"] == "gap"
    assert [f["code"] for f in doc["findings"]] == ["layer_divergence", "output_mismatch"]
    assert doc["findings"][0]["subject"] == {"module": "act"} and len(doc["findings"][0]["fingerprint"]) == 16
    html = page.read_text()
    assert html.count('src="data:image/png;base64,') == 1  # the error-by-depth chart
    for title in ("error by depth", "module outputs", "localization of the first divergence", "inputs fed to each backend"):
        assert title in html
    assert "<dt>cause</dt><dd>local</dd>" in html and "first divergence marked: act" in html
    assert doc["first_divergence"]["module"] == "act" and doc["first_divergence"]["cause"] == "local"
    assert doc["first_divergence"]["source"].startswith(str(__import__("sample_models").__path__[0]))
    failures = [c for c in ET.parse(junit).getroot().iter("testcase") if c.find("failure") is not None]
    assert {c.get("name") for c in failures} >= {"act", "fc2"}


def test_tolerance_override_lets_a_known_gap_pass(capsys):
    # The tanh-vs-erf GELU error is ~5e-4: a per-module override documents an accepted difference.
    code = main(["export-diff", *CUSTOM, "--tolerance", "act=1e-2,1e-2", "--tolerance", "fc2=1e-2,1e-2",
                 "--tolerance", "output*=1e-2,1e-2"])
    assert code == 0, capsys.readouterr().out


def test_inputs_file_with_real_data(tmp_path, capsys):
    data = tmp_path / "inputs.npz"
    np.savez(data, x=np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32))
    report = tmp_path / "r.json"
    code = main(["export-diff", "--model", "sample_models.planted:build_custom_op", "--inputs", str(data),
                 "--exporter", "torchscript", "--no-progress", "--json", str(report)])
    assert code == 1
    doc = json.loads(report.read_text())
    assert doc["num_samples"] == 3 and len({i["sha256"]["torch"] for i in doc["inputs"]}) == 3


def test_existing_onnx_file_is_compared(tmp_path, capsys):
    onnx_path = tmp_path / "given.onnx"
    assert main(["export-diff", *CUSTOM, "--save-onnx", str(onnx_path)]) == 1
    capsys.readouterr()
    # Inputs derived from the ONNX graph when no --input is given.
    code = main(["export-diff", "--model", "sample_models.planted:build_custom_op", "--onnx", str(onnx_path), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 1 and "exporter: file" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--checkpoint", "missing.pt", *RESNET], "not found"),
        (["--model", "no_such_pkg.models:build", "--input", "x:1x3:float32"], "no_such_pkg"),
        (["--model", "sample_models.cnn:nope", "--input", "x:1x3:float32"], "nope"),
        (["--model", "sample_models.cnn:build_small_resnet", "--input", "x:1x3x32:float32"], "does not accept"),
        (["--model", "sample_models.cnn:build_small_resnet", "--input", "x:1xAx3:float32"], "shape"),
        (["--model", "sample_models.cnn:build_small_resnet"], "--input"),
        ([*RESNET, "--batch-sizes", "0,x"], "--batch-sizes"),
        ([*RESNET, "--precision", "bf16"], "bfloat16"),
        ([*RESNET, "--triton-url", "localhost:1"], "--triton-model"),
        ([*RESNET, "--triton-url", "localhost:1", "--triton-model", "m", "--triton-ssl-root-cert", "no.pem"], "no.pem"),
        ([*RESNET, "--triton-url", "localhost", "--triton-model", "m"], "host:port"),
        ([*RESNET, "--triton-url", "localhost:1", "--triton-model", "m", "--triton-header", "k:v",
          "--triton-header", "no-colon"], "--triton-header #2 must be KEY:VALUE"),
    ],
)
def test_usage_and_input_errors_exit_2(args, message, capsys):
    code = main(["export-diff", *args])
    captured = capsys.readouterr()
    assert code == 2, captured.out + captured.err
    assert message in captured.err
    assert "Traceback" not in captured.err


def test_unwritable_report_path_exits_2_before_any_work(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code = main(["export-diff", "--checkpoint", "missing.pt", *RESNET, "--html", str(blocker / "r.html")])
    err = capsys.readouterr().err
    assert code == 2 and "--html report path" in err and "not found" not in err  # refused before loading anything
    same = tmp_path / "r.out"
    assert main(["export-diff", *RESNET, "--json", str(same), "--html", str(same)]) == 2
    assert "name the same file" in capsys.readouterr().err


def test_corrupt_checkpoint_and_onnx_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"PK\x03\x04 truncated")
    assert main(["export-diff", "--checkpoint", str(bad), *RESNET]) == 2
    bad_onnx = tmp_path / "bad.onnx"
    bad_onnx.write_bytes(b"\x08\x07garbage" * 10)
    assert main(["export-diff", "--onnx", str(bad_onnx), *RESNET]) == 2
    err = capsys.readouterr().err
    assert "not a valid ONNX model" in err and "Traceback" not in err


def test_model_that_fails_to_export_names_both_exporters(tmp_path, capsys):
    factory = tmp_path / "unexportable.py"
    factory.write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.linalg.eigvalsh(x @ x.transpose(-1, -2))  # no ONNX op for an eigensolver\n"
        "def build():\n"
        "    return M()\n"
    )
    code = main(["export-diff", "--model", f"{factory}:build", "--input", "x:1x4x4:float32", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert "dynamo exporter failed" in err and "TorchScript exporter failed" in err


def test_debug_shows_traceback(capsys):
    assert main(["--debug", "export-diff", "--checkpoint", "missing.pt", *RESNET]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_pickled_module_refused_unless_unsafe(tmp_path, capsys):
    path = tmp_path / "full.pt"
    torch.save(build_small_resnet(), path)
    assert main(["export-diff", "--checkpoint", str(path), *RESNET]) == 2
    assert "--unsafe-pickle" in capsys.readouterr().err
    assert main(["export-diff", "--checkpoint", str(path), *RESNET, "--unsafe-pickle"]) == 0


TWO_INPUTS = '''
import torch


class TwoInputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(8, 4)
        self.b = torch.nn.Linear(6, 4)

    def forward(self, image, meta):
        return self.a(image) + self.b(meta)


def build():
    return TwoInputs().eval()
'''


def test_inputs_file_is_matched_to_forward_by_name_not_position(tmp_path, capsys):
    factory = tmp_path / "two.py"
    factory.write_text(TWO_INPUTS)
    rng = np.random.default_rng(0)
    reordered = tmp_path / "reordered.npz"  # the file lists meta first
    np.savez(reordered, meta=rng.standard_normal((2, 6)).astype(np.float32),
             image=rng.standard_normal((2, 8)).astype(np.float32))
    assert main(["export-diff", "--model", f"{factory}:build", "--inputs", str(reordered), "--no-progress"]) == 0
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, foo=rng.standard_normal((2, 8)).astype(np.float32), bar=rng.standard_normal((2, 6)).astype(np.float32))
    assert main(["export-diff", "--model", f"{factory}:build", "--inputs", str(wrong), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "image" in err and "foo" in err


def test_onnx_file_of_another_model_is_named_as_such(tmp_path, capsys):
    other = tmp_path / "other.onnx"
    main(["export-diff", "--model", "sample_models.planted:build_branch", "--input", "x:1x8:float32",
          "--no-progress", "--save-onnx", str(other)])
    factory = tmp_path / "same_io.py"  # same input and output shapes, other module names
    factory.write_text("import torch\n"
                       "class Other(torch.nn.Module):\n"
                       "    def __init__(self):\n"
                       "        super().__init__()\n"
                       "        self.proj = torch.nn.Linear(8, 4)\n"
                       "    def forward(self, x):\n"
                       "        return self.proj(x)\n"
                       "def build():\n"
                       "    return Other().eval()\n")
    capsys.readouterr()
    report = tmp_path / "r.json"
    code = main(["export-diff", "--model", f"{factory}:build", "--onnx", str(other), "--no-progress", "--json", str(report)])
    assert code == 1
    doc = json.loads(report.read_text())
    validate(doc)
    mismatch = next(f for f in doc["findings"] if f["code"] == "onnx_model_mismatch")
    assert "gate" in mismatch["evidence"]["unknown_modules"]
    assert doc["first_divergence"] is None


def test_config_section_merges_file_environment_flags(tmp_path, capsys, monkeypatch):
    config = tmp_path / "gapcheck.toml"
    config.write_text('[export_diff]\nnum_samples = 2\nexporter = "torchscript"\n'
                      'tolerances = { "act" = [1e-2, 1e-2], "fc2" = [1e-2, 1e-2], "output*" = [1e-2, 1e-2] }\n')
    report = tmp_path / "r.json"
    base = ["export-diff", "--model", "sample_models.planted:build_custom_op", "--input", "x:1x16:float32",
            "--no-progress", "--config", str(config), "--json", str(report)]
    assert main(base) == 0, capsys.readouterr().out  # the file's tolerances accept the known GELU difference
    doc = json.loads(report.read_text())
    assert (doc["num_samples"], doc["exporter"]) == (2, "torchscript")
    monkeypatch.setenv("GAPCHECK_EXPORT_DIFF__NUM_SAMPLES", "3")
    assert main(base) == 0 and json.loads(report.read_text())["num_samples"] == 3
    assert main([*base, "--num-samples", "1", "--tolerance", "act=0,0"]) == 1  # flags win over both
    assert json.loads(report.read_text())["num_samples"] == 1
    monkeypatch.setenv("GAPCHECK_EXPORT_DIFF__PRECISION", "fp8")
    assert main(base) == 2
    assert "GAPCHECK_EXPORT_DIFF__PRECISION: export_diff.precision" in capsys.readouterr().err

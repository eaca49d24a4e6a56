"""Issue 23: a report path (or --save-onnx) that is one of the command's own inputs, or lies inside an input folder,
is refused before any work (exit 2) and the input is left byte for byte; checked once, in the groups' resolve path."""
from __future__ import annotations

import numpy as np
import pytest

from gapcheck.atomic import check_not_input
from gapcheck.cli.app import main
from gapcheck.errors import UsageError

FACTORY = "tests/nightly/models.py:build_tiny"
INPUT = "x:1x3x8x8:float32"
PAYLOAD = b"\x80\x02precious bytes\n"


pytestmark = pytest.mark.usefixtures("isolated_cache")  # tests/cli/conftest.py; no_model too


def _refused(argv, victim, capsys, expect):
    before = victim.read_bytes()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert expect in err, err
    assert victim.read_bytes() == before


@pytest.mark.parametrize("flag", ["--json", "--junit", "--html", "--sarif", "--save-onnx"])
def test_export_diff_report_over_the_checkpoint(flag, tmp_path, capsys, no_model):
    victim = tmp_path / "victim.pt"
    victim.write_bytes(PAYLOAD)
    _refused(["export-diff", "--checkpoint", str(victim), "--model", FACTORY, "--input", INPUT, flag, str(victim)],
             victim, capsys, "is also --checkpoint")


def test_export_diff_report_through_another_spelling_and_a_link(tmp_path, capsys, no_model, monkeypatch):
    victim = tmp_path / "victim.pt"
    victim.write_bytes(PAYLOAD)
    (tmp_path / "sub").mkdir()
    (tmp_path / "hard.pt").hardlink_to(victim)
    monkeypatch.chdir(tmp_path)
    for report in ("./sub/../victim.pt", str(tmp_path / "hard.pt")):
        _refused(["export-diff", "--checkpoint", "victim.pt", "--model", FACTORY, "--input", INPUT, "--json", report],
                 victim, capsys, "is also --checkpoint")


def test_export_diff_report_over_the_inputs_file_and_the_onnx(tmp_path, capsys, no_model):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.zeros((1, 3, 8, 8), np.float32))
    _refused(["export-diff", "--model", FACTORY, "--inputs", str(inputs), "--json", str(inputs)], inputs, capsys,
             "is also --inputs")
    onnx = tmp_path / "m.onnx"
    onnx.write_bytes(PAYLOAD)
    _refused(["export-diff", "--model", FACTORY, "--input", INPUT, "--onnx", str(onnx), "--html", str(onnx)], onnx,
             capsys, "is also --onnx")


def test_export_diff_report_over_the_factory_file(tmp_path, capsys, no_model):
    factory = tmp_path / "net.py"
    factory.write_bytes(b"def build():\n    raise SystemExit\n")
    _refused(["export-diff", "--model", f"{factory}:build", "--input", INPUT, "--json", str(factory)], factory, capsys,
             "is also --model")


def test_golden_record_report_inside_out(tmp_path, capsys, no_model):
    out = tmp_path / "gjs"
    assert main(["golden", "record", "--model", FACTORY, "--input", INPUT, "--out", str(out), "--json",
                 str(out / "manifest.json")]) == 2
    assert "lies inside --out" in capsys.readouterr().err
    assert not out.exists()


def test_golden_verify_report_inside_the_bundle(tmp_path, capsys):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    manifest = bundle / "manifest.json"
    manifest.write_bytes(b'{"x": 1}')
    _refused(["golden", "verify", str(bundle), "--json", str(manifest)], manifest, capsys, "lies inside BUNDLE")


def test_precision_report_over_the_checkpoint(tmp_path, capsys, no_model):
    victim = tmp_path / "v.pt"
    victim.write_bytes(PAYLOAD)
    _refused(["precision", "--checkpoint", str(victim), "--model", FACTORY, "--input", INPUT, "--json", str(victim)],
             victim, capsys, "is also --checkpoint")


def test_leakage_report_over_a_split(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ref.csv").write_bytes(b"a,b\n1,2\n3,4\n")
    (tmp_path / "cur.csv").write_bytes(b"a,b\n1,2\n5,6\n")
    _refused(["leakage", "--split", "train=ref.csv", "--split", "test=cur.csv", "--engine", "serial", "--json",
              "ref.csv"], tmp_path / "ref.csv", capsys, "is also --split")


def test_drift_report_over_the_reference(tmp_path, capsys):
    ref = tmp_path / "ref.csv"
    ref.write_bytes(b"a\n1\n2\n")
    (tmp_path / "cur.csv").write_bytes(b"a\n1\n3\n")
    _refused(["drift", "--reference", str(ref), "--current", str(tmp_path / "cur.csv"), "--engine", "serial",
              "--sarif", str(ref)], ref, capsys, "is also --reference")


def test_preprocess_audit_report_inside_the_samples_folder(tmp_path, capsys):
    images = tmp_path / "imgs"
    images.mkdir()
    png = images / "0.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    _refused(["preprocess-audit", "--samples", str(images), "--stage", "a=tests.x:y", "--engine", "serial",
              "--json", str(png)], png, capsys, "lies inside --samples")


def test_nightly_and_history_report_over_the_history(tmp_path, capsys):
    history = tmp_path / "h.sqlite"
    history.write_bytes(PAYLOAD)
    _refused(["history", "--history", str(history), "--json", str(history)], history, capsys, "is also --history")


def test_report_over_the_config_file(tmp_path, capsys):
    config = tmp_path / "gapcheck.toml"
    config.write_bytes(b"[golden]\n")
    _refused(["history", "--history", str(tmp_path / "h.sqlite"), "--config", str(config), "--json", str(config)],
             config, capsys, "is also --config")


def test_an_unrelated_report_path_still_passes_the_check(tmp_path):
    (tmp_path / "data").mkdir()
    check_not_input(tmp_path / "report.json", "--json report", [("--samples", tmp_path / "data"),
                                                                ("--checkpoint", tmp_path / "victim.pt")])
    check_not_input(tmp_path / "data2" / "r.json", "--json report", [("--samples", tmp_path / "data")])
    # a NEW report inside a folder the command only reads replaces nothing (``--samples . --json r.json``)
    check_not_input(tmp_path / "data" / "new" / "r.json", "--json report", [("--samples", tmp_path / "data")])
    (tmp_path / "data" / "old.json").write_text("{}")
    with pytest.raises(UsageError, match="lies inside --samples"):  # an existing file there is a sample
        check_not_input(tmp_path / "data" / "old.json", "--json report", [("--samples", tmp_path / "data")])
    with pytest.raises(UsageError, match="lies inside --out"):  # the command fills --out: nothing else goes there
        check_not_input(tmp_path / "data" / "r.json", "--json report", [("--out", tmp_path / "data")])
    with pytest.raises(UsageError, match="lies inside --bundle"):  # a folder the work will create
        check_not_input(tmp_path / "made" / "r.json", "--json report", [("--bundle", tmp_path / "made")])


def test_a_link_to_an_input_is_refused_as_the_input(tmp_path):
    victim = tmp_path / "victim.pt"
    victim.write_bytes(PAYLOAD)
    (tmp_path / "link").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "link")
    (tmp_path / "link" / "r.json").write_bytes(PAYLOAD)
    with pytest.raises(UsageError, match="lies inside --samples"):
        check_not_input(tmp_path / "alias" / "r.json", "--json report", [("--samples", tmp_path / "link")])

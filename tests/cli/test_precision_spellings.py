"""The issue's own spellings of the precision run: ``gapcheck export-diff --precision fp16|int8 --fix OUT`` (with
--calibration/--target), through the one path (:func:`gapcheck.precision.run_precision`): exit codes 0 fixed and
verified, 1 not fixed, 2 bad flags, 3 a backend failure; JSON (schema-checked), JUnit and HTML reports."""
from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import onnx
import pytest

from gapcheck.cli.app import main
from gapcheck.report.envelope import validate

PLANTED = ["export-diff", "--model", "sample_models.planted:build_fp16_overflow", "--input", "x:1x8x16:float32",
           "--num-samples", "2", "--no-cache"]
CNN = ["export-diff", "--model", "sample_models.cnn:build_small_resnet", "--input", "x:1x3x32x32:float32",
       "--num-samples", "3", "--no-cache"]


def _report(path: Path) -> dict:
    document = json.loads(path.read_text())
    validate(document)
    return document


def test_export_diff_fp16_fix_is_the_precision_run_written_and_verified(tmp_path: Path):
    out, report, junit = tmp_path / "model.fp16.onnx", tmp_path / "r.json", tmp_path / "r.xml"
    assert main([*PLANTED, "--precision", "fp16", "--fix", str(out), "--json", str(report), "--junit", str(junit)]) == 0
    document = _report(report)
    assert document["command"] == "precision" and document["fix"]["status"] == "verified"
    assert "attn.scores" in document["fix"]["modules"] and document["fix"]["path"] == str(out)
    assert document["tensorrt"]["note"].startswith("not executed")
    kept = set(document["fix"]["nodes"])
    model = onnx.load(str(out))
    assert kept and kept <= {n.name for n in model.graph.node}  # the nodes the report names are in the written file
    assert any(i.data_type == onnx.TensorProto.FLOAT16 for i in model.graph.initializer)
    assert not [e for e in ElementTree.parse(junit).iter() if e.tag in ("failure", "error")]
    # The same run spelled `gapcheck precision` keeps the same nodes (one path, not a second implementation).
    again = tmp_path / "again.json"
    assert main(["precision", *PLANTED[1:], "--fix", str(tmp_path / "again.onnx"), "--json", str(again)]) == 0
    assert _report(again)["fix"]["nodes"] == document["fix"]["nodes"]


def test_export_diff_fp16_without_fix_is_still_the_layerwise_comparison(tmp_path: Path):
    report = tmp_path / "r.json"
    assert main([*PLANTED, "--precision", "fp16", "--json", str(report)]) == 1
    document = _report(report)
    assert document["command"] == "export-diff"
    assert "fp16_overflow" in {f["code"] for f in document["findings"]}


@pytest.mark.parametrize("flags", [
    ["--fix", "{tmp}/x.onnx"],  # --fix without --precision
    ["--precision", "bf16", "--fix", "{tmp}/x.onnx"],
    ["--target", "cosine=0.9"],
    ["--precision", "fp16", "--target", "cosine=0.9"],  # targets are INT8's
    ["--precision", "int4"],
    ["--precision", "int8", "--calibration-method", "median"],
    ["--precision", "int8", "--int8-mode", "float"],
    ["--precision", "int8", "--sensitivity", "median"],
    ["--precision", "fp16", "--sensitivity", "alone"],  # INT8's measure
    ["--precision", "int8", "--target", "cosine=1.5"],
    ["--precision", "int8", "--calibration", "{tmp}/absent.npz"],
    ["--precision", "int8", "--batch-sizes", "1,2"],  # an FP32 comparison option with the precision run
    ["--precision", "fp16", "--fix", "{tmp}/x.onnx", "--onnx", "{tmp}/m.onnx"],
    ["--precision", "fp16", "--fix", "{tmp}/same.onnx", "--save-onnx", "{tmp}/same.onnx"],
    ["--precision", "fp16", "--fix", "{tmp}/r.json", "--json", "{tmp}/r.json"],
])
def test_bad_flags_exit_2_before_any_work(tmp_path: Path, flags: list[str]):
    (tmp_path / "m.onnx").write_bytes(b"")
    argv = [f.replace("{tmp}", str(tmp_path)) for f in flags]
    assert main([*PLANTED, *argv]) == 2
    assert not (tmp_path / "x.onnx").exists() and not (tmp_path / "same.onnx").exists()


def test_export_diff_int8_with_calibration_and_target_writes_the_verified_model(tmp_path: Path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "cal.npz", x=rng.standard_normal((6, 3, 32, 32)).astype(np.float32))
    np.savez(tmp_path / "val.npz", x=rng.standard_normal((3, 3, 32, 32)).astype(np.float32))
    out, report, html = tmp_path / "model.int8.onnx", tmp_path / "r.json", tmp_path / "r.html"
    code = main([*CNN, "--inputs", str(tmp_path / "val.npz"), "--precision", "int8", "--calibration",
                 str(tmp_path / "cal.npz"), "--target", "cosine=0.5", "--sensitivity", "alone", "--fix", str(out),
                 "--json", str(report), "--html", str(html)])
    assert code == 0
    document = _report(report)
    assert document["mode"] == "static" and document["calibration"]["samples"] == 6
    assert document["fix"]["status"] == "verified" and document["targets"] == ["cosine=0.5"]
    assert document["sensitivity_measure"] == "alone" and document["measure"].startswith("alone")
    ranked = [m["alone"] for m in document["modules"]]
    assert ranked == sorted(ranked, reverse=True) and ranked[0] > 0
    assert any(n.op_type == "QuantizeLinear" for n in onnx.load(str(out)).graph.node)
    assert "Sensitivity ranking" in html.read_text()


def test_export_diff_int8_target_no_exclusion_reaches_exits_1_and_writes_nothing(tmp_path: Path):
    out, junit = tmp_path / "never.onnx", tmp_path / "r.xml"
    code = main([*CNN, "--precision", "int8", "--target", "max-rel-error=0", "--fix", str(out), "--junit", str(junit)])
    assert code == 1 and not out.exists()
    failures = [e for e in ElementTree.parse(junit).iter() if e.tag in ("failure", "error")]
    assert failures


def test_export_diff_int8_backend_failure_exits_3(tmp_path: Path, monkeypatch):
    from gapcheck.errors import BackendError
    from gapcheck.precision import int8

    def refuse(self, exclude=()):
        raise BackendError("ONNX Runtime cannot quantize this model (static): planted")

    monkeypatch.setattr(int8.Quantizer, "quantize", refuse)
    out = tmp_path / "q.onnx"
    assert main([*CNN, "--precision", "int8", "--fix", str(out)]) == 3
    assert not out.exists()


def test_real_text_counts_as_real_calibration_data(tmp_path: Path):
    """--text-samples (real sentences, tokenized) are real inputs for INT8: no calibration_unrepresentative."""
    from tests.precision.models import SENTENCES

    text = tmp_path / "sentences.txt"
    text.write_text("\n".join(SENTENCES) + "\n")
    report = tmp_path / "r.json"
    code = main(["export-diff", "--model", "sample_models.transformer:build_transformer", "--input",
                 "tokens:1x16:int64", "--text-samples", str(text), "--tokenizer", "tests.precision.stages:word_ids",
                 "--num-samples", "4", "--no-cache", "--precision", "int8", "--target", "cosine=0",
                 "--json", str(report)])
    assert code == 0
    document = _report(report)
    assert document["mode"] == "dynamic" and document["verification_samples"] == 4
    assert "calibration_unrepresentative" not in {f["code"] for f in document["findings"]}
    random = tmp_path / "random.json"
    assert main(["export-diff", "--model", "sample_models.transformer:build_transformer", "--input",
                 "tokens:1x16:int64:0,1000", "--num-samples", "4", "--no-cache", "--precision", "int8", "--target",
                 "cosine=0", "--json", str(random)]) == 0
    assert "calibration_unrepresentative" in {f["code"] for f in _report(random)["findings"]}


def test_every_sentence_verifies_without_num_samples(tmp_path: Path):
    """--text-samples without --num-samples: the file's sentences (up to TEXT_BATCHES batches) calibrate and verify,
    not only its first one (--num-samples' default is one random draw)."""
    from tests.precision.models import SENTENCES

    text = tmp_path / "sentences.txt"
    text.write_text("\n".join(SENTENCES) + "\n")
    report = tmp_path / "r.json"
    assert main(["export-diff", "--model", "sample_models.transformer:build_transformer", "--input",
                 "tokens:1x16:int64", "--text-samples", str(text), "--tokenizer", "tests.precision.stages:word_ids",
                 "--no-cache", "--precision", "int8", "--target", "cosine=0", "--json", str(report)]) == 0
    document = _report(report)
    assert document["verification_samples"] == len(SENTENCES)
    assert document["scores"]["samples"] == len(SENTENCES)


def test_the_fix_never_replaces_what_the_run_reads(tmp_path: Path):
    rng = np.random.default_rng(1)
    inputs, calibration = tmp_path / "val.npz", tmp_path / "cal"
    np.savez(inputs, x=rng.standard_normal((2, 1, 8, 16)).astype(np.float32))
    calibration.mkdir()
    (calibration / "a.png").write_bytes(b"a user's sample")
    before = inputs.read_bytes()
    assert main([*PLANTED, "--inputs", str(inputs), "--precision", "fp16", "--fix", str(inputs)]) == 2
    assert inputs.read_bytes() == before
    assert main([*CNN, "--precision", "int8", "--calibration", str(calibration), "--calibration-stage",
                 "p=tests.precision.stages:photo_32", "--fix", str(calibration / "a.png")]) == 2
    assert (calibration / "a.png").read_bytes() == b"a user's sample"


def test_the_fix_never_lands_in_the_calibration_folder(tmp_path: Path, capsys):
    """A new file in the calibration folder replaces nothing, but the folder is read whole: the next run would
    calibrate on the model (its stage fails on it). Refused before any work."""
    from skimage.io import imsave

    calibration = tmp_path / "cal"
    calibration.mkdir()
    rng = np.random.default_rng(2)
    for i in range(3):
        imsave(calibration / f"p{i}.png", rng.integers(0, 255, (40, 40, 3), dtype=np.uint8), check_contrast=False)
    args = [*CNN, "--precision", "int8", "--calibration", str(calibration), "--calibration-stage",
            "p=tests.precision.stages:photo_32", "--target", "cosine=0"]
    assert main([*args, "--fix", str(calibration / "model.int8.onnx")]) == 2
    assert "inside the calibration folder" in capsys.readouterr().err
    assert sorted(p.name for p in calibration.iterdir()) == ["p0.png", "p1.png", "p2.png"]
    assert main([*args, "--fix", str(tmp_path / "model.int8.onnx")]) == 0  # the same run, written beside it

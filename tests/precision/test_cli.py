"""`gapcheck precision` as a user runs it: exit codes, the JSON a CI job applies (schema-checked), the HTML chart,
and the files it may and may not touch."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gapcheck.cli.app import main
from gapcheck.report.envelope import validate

PLANTED = ["precision", "--model", "sample_models.planted:build_fp16_overflow", "--input", "x:1x8x16:float32",
           "--num-samples", "2", "--no-cache"]


def test_gap_without_fix_then_fixed_with_json_and_html(tmp_path: Path):
    assert main([*PLANTED, "--json", str(tmp_path / "gap.json")]) == 1
    out = tmp_path / "deploy"
    out.mkdir()
    (out / "keep.txt").write_text("a user's file")
    report, html = tmp_path / "r.json", tmp_path / "r.html"
    code = main([*PLANTED, "--fix", str(out / "model.fp16.onnx"), "--json", str(report), "--html", str(html)])
    assert code == 0
    document = json.loads(report.read_text())
    validate(document)
    assert document["fix"]["status"] == "verified" and "attn.scores" in document["fix"]["modules"]
    assert document["fix"]["nodes"] and document["fix"]["path"].endswith("model.fp16.onnx")
    assert document["modules"][0]["module"] == "attn.scores" and document["modules"][0]["sensitivity"] == "inf"
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt", "model.fp16.onnx"]
    assert (out / "keep.txt").read_text() == "a user's file"
    text = html.read_text()
    assert "Sensitivity ranking" in text and "data:image/png;base64" in text.split("Sensitivity ranking", 2)[-1]


def test_the_fix_never_overwrites_the_export(tmp_path: Path):
    same = tmp_path / "model.onnx"
    assert main([*PLANTED, "--save-onnx", str(same), "--fix", str(same)]) == 2
    assert not same.exists()


def test_bad_options_are_usage_errors(tmp_path: Path):
    assert main([*PLANTED, "--precision", "int4"]) == 2
    assert main([*PLANTED, "--precision", "int8", "--target", "cosine=1.5"]) == 2
    assert main([*PLANTED, "--precision", "int8", "--calibration-method", "median"]) == 2
    assert main([*PLANTED, "--calibration", str(tmp_path / "absent")]) == 2  # calibration is for INT8


def test_int8_empty_calibration_folder_and_misfit_samples_exit_2(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    cnn = ["precision", "--model", "sample_models.cnn:build_small_resnet", "--input", "x:1x3x32x32:float32",
           "--precision", "int8", "--no-cache"]
    assert main([*cnn, "--calibration", str(tmp_path / "empty"), "--calibration-stage", "p=tests.precision.stages:photo_32"]) == 2
    np.savez(tmp_path / "wrong.npz", y=np.zeros((2, 3, 32, 32), np.float32))
    assert main([*cnn, "--calibration", str(tmp_path / "wrong.npz")]) == 2


def test_int8_cli_json_lists_what_ci_applies(tmp_path: Path):
    report = tmp_path / "int8.json"
    code = main(["precision", "--model", "sample_models.cnn:build_small_resnet", "--input", "x:1x3x32x32:float32",
                 "--num-samples", "4", "--precision", "int8", "--target", "max-rel-error=0",
                 "--fix", str(tmp_path / "q.onnx"), "--json", str(report), "--no-cache"])
    assert code == 1  # unreachable: the fix is insufficient, nothing written
    document = json.loads(report.read_text())
    validate(document)
    assert document["fix"]["status"] == "insufficient" and not (tmp_path / "q.onnx").exists()
    assert {f["code"] for f in document["findings"]} >= {"precision_fix_insufficient", "calibration_unrepresentative"}


def test_a_fix_with_no_int8_op_left_is_not_an_int8_fix(tmp_path: Path):
    """Only the FP32 model meets max-rel-error=1e-5: excluding every module is the FP32 model, not a fix (exit 1,
    precision_fix_insufficient, nothing written), never 'INT8 fixed and verified' with every node in FP32."""
    out, report = tmp_path / "model.int8.onnx", tmp_path / "r.json"
    code = main(["precision", "--model", "tests.precision.models:tiny_convnet", "--input", "x:1x3x16x16:float32",
                 "--num-samples", "3", "--no-cache", "--precision", "int8", "--int8-mode", "static", "--target",
                 "max-rel-error=1e-5", "--fix", str(out), "--json", str(report)])
    assert code == 1 and not out.exists()
    document = json.loads(report.read_text())
    validate(document)
    assert document["fix"]["status"] == "insufficient" and document["fix"]["path"] is None
    assert document["fix"]["trade"][-1]["met"]  # the all-FP32 try did meet it
    insufficient = [f for f in document["findings"] if f["code"] == "precision_fix_insufficient"]
    assert insufficient and "no INT8 op is left" in insufficient[0]["message"]


def test_a_kept_node_reads_its_constant_in_fp32_and_keeps_the_output_fp32(tmp_path: Path):
    """Issue 20: x * 1e5 kept in FP32 read the constant clamped to 65504 and wrote an FP16 graph output (Inf)."""
    import onnx

    out, report = tmp_path / "out.onnx", tmp_path / "r.json"
    code = main(["precision", "--model", "tests.precision.models:scaled_linear", "--input", "x:1x8x16:float32",
                 "--precision", "fp16", "--fix", str(out), "--json", str(report), "--no-cache"])
    assert code == 0
    assert json.loads(report.read_text())["fix"]["status"] == "verified"
    model = onnx.load(str(out))
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    constants = [onnx.numpy_helper.to_array(t) for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT]
    assert any(c.size == 1 and float(c) == 100000.0 for c in constants)


def test_hostile_module_names_with_an_overflow_are_fixed(tmp_path: Path):
    out = tmp_path / "out.onnx"
    code = main(["precision", "--model", "tests.precision.models:hostile_names", "--input", "x:1x8x16:float32",
                 "--precision", "fp16", "--fix", str(out), "--no-cache"])
    assert code == 0 and out.exists()


CNN_INT8 = ["precision", "--model", "sample_models.cnn:build_small_resnet", "--input", "x:1x3x32x32:float32",
            "--precision", "int8", "--target", "cosine=0", "--no-cache"]


def test_int8_all_nan_calibration_is_an_input_error_not_a_gap(tmp_path: Path, capsys):
    """Issue 20: every value NaN gave exit 1 'INT8 misses cosine -1'; it is bad input (exit 2), named."""
    np.savez(tmp_path / "nan.npz", x=np.full((3, 3, 32, 32), np.nan, np.float32))
    assert main([*CNN_INT8, "--calibration", str(tmp_path / "nan.npz")]) == 2
    err = capsys.readouterr().err
    assert "calibration samples hold NaN/inf" in err and "3 of 3" in err


def test_int8_a_few_nan_calibration_samples_are_skipped_and_reported(tmp_path: Path):
    rng = np.random.default_rng(0)
    samples = rng.standard_normal((6, 3, 32, 32)).astype(np.float32)
    samples[1, 0, 0, 0], samples[4, 1, 2, 3] = np.nan, np.inf
    np.savez(tmp_path / "some.npz", x=samples)
    report = tmp_path / "r.json"
    assert main([*CNN_INT8, "--calibration", str(tmp_path / "some.npz"), "--json", str(report)]) == 0
    skipped = [f for f in json.loads(report.read_text())["findings"] if f["code"] == "calibration_sample_skipped"]
    assert len(skipped) == 1 and "2 calibration sample(s) skipped, 4 used" in skipped[0]["message"]
    assert "sample 1" in skipped[0]["message"] and "sample 4" in skipped[0]["message"]


def test_int8_a_corrupt_png_among_good_ones_is_skipped(tmp_path: Path, photos_32):
    """Issue 20: one corrupt PNG ended the run with exit 2; house rule: counted, reported, skipped."""
    import shutil

    folder = tmp_path / "calibration"
    shutil.copytree(photos_32[0], folder)
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not an image")
    report = tmp_path / "r.json"
    code = main([*CNN_INT8, "--calibration", str(folder), "--calibration-stage", "p=tests.precision.stages:photo_32",
                 "--inputs", str(photos_32[1]), "--json", str(report)])
    assert code == 0
    skipped = [f for f in json.loads(report.read_text())["findings"] if f["code"] == "calibration_sample_skipped"]
    assert len(skipped) == 1 and "broken.png" in skipped[0]["message"] and "1 calibration sample(s)" in skipped[0][
        "message"]
    only = tmp_path / "only"
    only.mkdir()
    (only / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not an image")
    assert main([*CNN_INT8, "--calibration", str(only), "--calibration-stage", "p=tests.precision.stages:photo_32"]) == 2


def test_precision_takes_the_progress_spellings_of_export_diff(tmp_path: Path):
    """Issue 20: `gapcheck precision` lacked --progress/--no-progress (export-diff has them)."""
    assert main([*PLANTED, "--no-progress", "--json", str(tmp_path / "a.json")]) == 1
    assert main([*PLANTED, "--progress", "--json", str(tmp_path / "b.json")]) == 1


def test_run_precision_reports_its_stages(tmp_path: Path):
    from gapcheck.groups import InputSource, ModelSource
    from gapcheck.precision import PrecisionRequest, run_precision

    class Recorder:
        def __init__(self) -> None:
            self.stages: list[str] = []

        def start(self, description: str, total: int | None) -> None:
            self.stages.append(description)

        def advance(self, steps: int = 1) -> None:
            pass

        def finish(self) -> None:
            self.stages.append("done")

    recorder = Recorder()
    request = PrecisionRequest(model=ModelSource(factory="sample_models.planted:build_fp16_overflow"),
                               inputs=InputSource(specs=("x:1x8x16:float32",), num_samples=1))
    run_precision(request, progress=recorder)
    assert recorder.stages == ["precision: load and export", "precision: fp16 layer-wise run", "done"]

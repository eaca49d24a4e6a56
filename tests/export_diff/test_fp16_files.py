"""export-diff --onnx on a deployment's FP16 file (onnxconverter_common's convert_float_to_float16 with
keep_io_types=True: FP32 inputs and outputs around an FP16 body): compared with FP16 budgets, the file used as it is."""
from __future__ import annotations

import json
import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from gapcheck.cli.app import main
from gapcheck.model.onnx_file import computes_in_fp16
from sample_models.cnn import build_small_resnet
from sample_models.transformer import build_transformer

CASES = {  # factory, input, an initializer the file names after its module, that module
    "cnn": ("sample_models.cnn:build_small_resnet", "x:1x3x32x32:float32", "fc.bias", "fc"),
    "transformer": ("sample_models.transformer:build_transformer", "ids:1x16:int64:0,1000", "block.mlp.fc1.bias",
                    "block.mlp.fc1"),
}


def _fp16_file(tmp_path, case: str, planted: str | None = None, keep_io_types: bool = True):
    """The model exported as a user would, then converted to FP16 as deployments do; ``planted`` gets +0.5."""
    module, example = (build_small_resnet(), torch.randn(1, 3, 32, 32)) if case == "cnn" else \
        (build_transformer(), torch.randint(0, 1000, (1, 16)))
    fp32 = tmp_path / f"{case}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (example,), str(fp32), dynamo=False, input_names=[CASES[case][1].split(":")[0]])
        from onnxconverter_common import float16

        model = float16.convert_float_to_float16(onnx.load(str(fp32)), keep_io_types=keep_io_types)
    if planted:
        tensor = next(t for t in model.graph.initializer if t.name == planted)
        tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor) + np.float16(0.5), planted))
    target = tmp_path / f"{case}_fp16{'_planted' if planted else ''}.onnx"
    onnx.save(model, str(target))
    return fp32, target


def _run(tmp_path, case: str, onnx_file, *extra: str) -> tuple[int, dict]:
    factory, spec = CASES[case][:2]
    report = tmp_path / "report.json"
    code = main(["export-diff", "--model", factory, "--input", spec, "--onnx", str(onnx_file), "--num-samples", "2",
                 "--json", str(report), "--no-progress", *extra])
    return code, json.loads(report.read_text()) if report.exists() else {}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_clean_fp16_file_passes_with_fp16_budgets_without_being_asked(tmp_path, case):
    fp32, fp16 = _fp16_file(tmp_path, case)
    assert not computes_in_fp16(onnx.load(str(fp32))) and computes_in_fp16(onnx.load(str(fp16)))
    code, report = _run(tmp_path, case, fp16)
    assert code == 0, report.get("findings")
    assert report["precision"] == "fp16"  # the report says the comparison ran in FP16, and a finding says why
    assert [f["severity"] for f in report["findings"] if f["code"] == "fp16_file"] == ["info"]
    # asked explicitly: the file is used as it is (converting it again refused it: "already converted to float16")
    code, asked = _run(tmp_path, case, fp16, "--precision", "fp16")
    assert code == 0 and "fp16_file" not in {f["code"] for f in asked["findings"]}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_weight_changed_in_the_fp16_file_is_found_at_its_module(tmp_path, case):
    _, planted = _fp16_file(tmp_path, case, planted=CASES[case][2])
    code, report = _run(tmp_path, case, planted)
    assert code == 1
    first = report["first_divergence"]
    assert (first["module"], first["cause"], report["precision"]) == (CASES[case][3], "local", "fp16")
    assert f"{CASES[case][2]} differs from the checkpoint" in json.dumps(report["findings"])
    assert "bound to different types" not in json.dumps(report)



def test_a_file_with_fp16_inputs_is_fed_the_models_fp32_samples_cast_to_fp16(tmp_path):
    """keep_io_types=False: the file takes and returns FP16 (before: ONNX Runtime refused the FP32 feed, exit 3)."""
    _, clean = _fp16_file(tmp_path, "cnn", keep_io_types=False)
    assert onnx.load(str(clean)).graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    code, report = _run(tmp_path, "cnn", clean)
    assert (code, report["precision"]) == (0, "fp16"), report.get("findings")
    _, planted = _fp16_file(tmp_path, "cnn", planted="fc.bias", keep_io_types=False)
    code, report = _run(tmp_path, "cnn", planted)
    assert (code, report["first_divergence"]["module"], report["first_divergence"]["cause"]) == (1, "fc", "local")


FACTORY = """
import torch


def distilbert():
    from transformers import DistilBertConfig, DistilBertModel

    torch.manual_seed(0)
    return DistilBertModel(DistilBertConfig(vocab_size=1000, dim=64, n_layers=2, n_heads=4, hidden_dim=128)).eval()
"""


def test_the_padding_check_on_an_fp16_file_uses_fp16_budgets_too(tmp_path, monkeypatch):
    """The padding check compares in the file's precision as the layers do (with FP32 budgets: a false
    padding_dependence, max |err| 0.0027 on a DistilBERT converted to FP16)."""
    from onnxconverter_common import float16

    (tmp_path / "fp16_factory.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    from fp16_factory import distilbert

    exported, fp16 = tmp_path / "db.onnx", tmp_path / "db_fp16.onnx"
    names = ["input_ids", "attention_mask", "last_hidden_state"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(distilbert(), (torch.randint(0, 1000, (1, 16)), torch.ones(1, 16, dtype=torch.int64)),
                          str(exported), input_names=names[:2], output_names=names[2:], dynamo=False,
                          opset_version=17, dynamic_axes={name: {0: "b", 1: "t"} for name in names})
        onnx.save(float16.convert_float_to_float16(onnx.load(str(exported)), keep_io_types=True), str(fp16))
    report = tmp_path / "pad.json"
    code = main(["export-diff", "--model", "fp16_factory:distilbert", "--input", "input_ids:1x16:int64:0,1000",
                 "--input", "attention_mask:1x16:int64:1,2", "--onnx", str(fp16), "--pad-check", "--pad-lengths", "24",
                 "--json", str(report), "--no-progress"])
    doc = json.loads(report.read_text())
    assert code == 0, [f["message"] for f in doc["findings"]]
    assert doc["precision"] == "fp16" and all(v["max_abs"] is not None for v in doc["padding"]["variants"])


def _codes(report: dict) -> dict[str, str]:
    return {f["code"]: f["severity"] for f in report["findings"]}


def test_an_explicit_fp32_on_an_fp16_file_compares_with_fp32_budgets_and_says_why_it_fails(tmp_path):
    """--precision fp32 is not the default any more: asked, the file's FP16 rounding is judged with FP32 budgets
    (a gap at the first module is then right) and a warning says the file computes in FP16."""
    _, fp16 = _fp16_file(tmp_path, "cnn")
    code, report = _run(tmp_path, "cnn", fp16, "--precision", "fp32")
    assert (code, report["precision"]) == (1, "fp32")
    codes = _codes(report)
    assert codes["precision_not_the_files"] == "warning" and "fp16_file" not in codes
    message = next(f["message"] for f in report["findings"] if f["code"] == "precision_not_the_files")
    assert "computes in FP16 but precision fp32 was asked" in message and "Leave --precision out" in message
    assert report["first_divergence"]["module"] == report["layers"][0]["module"]  # FP16 rounding, from the start


def test_precision_fp32_from_the_config_is_asked_too_and_absent_means_the_files_own(tmp_path, monkeypatch):
    _, fp16 = _fp16_file(tmp_path, "cnn")
    config = tmp_path / "gapcheck.toml"
    config.write_text('[export_diff]\nprecision = "fp32"\n')
    code, report = _run(tmp_path, "cnn", fp16, "--config", str(config))
    assert (code, report["precision"], _codes(report).get("precision_not_the_files")) == (1, "fp32", "warning")
    monkeypatch.setenv("GAPCHECK_EXPORT_DIFF__PRECISION", "fp32")  # the environment is the config too
    code, report = _run(tmp_path, "cnn", fp16)
    assert (code, report["precision"]) == (1, "fp32")
    monkeypatch.delenv("GAPCHECK_EXPORT_DIFF__PRECISION")
    config.write_text("[export_diff]\nnum_samples = 2\n")  # a section without the key: the file's own precision
    code, report = _run(tmp_path, "cnn", fp16, "--config", str(config))
    assert (code, report["precision"], _codes(report).get("fp16_file")) == (0, "fp16", "info")


def test_bf16_asked_on_an_fp16_file_runs_the_file_as_written_with_bf16_budgets(tmp_path):
    _, fp16 = _fp16_file(tmp_path, "cnn")
    code, report = _run(tmp_path, "cnn", fp16, "--precision", "bf16")
    assert (code, report["precision"]) == (0, "bf16"), report.get("findings")
    message = next(f["message"] for f in report["findings"] if f["code"] == "precision_not_the_files")
    assert "precision bf16 was asked" in message and "wider than FP16" in message


def test_fp16_asked_on_an_fp32_file_still_checks_what_an_fp16_deployment_computes(tmp_path):
    fp32, _ = _fp16_file(tmp_path, "cnn")
    code, report = _run(tmp_path, "cnn", fp32, "--precision", "FP16")  # as the docs write it
    assert (code, report["precision"]) == (0, "fp16"), report.get("findings")
    assert not {"fp16_file", "precision_not_the_files"} & set(_codes(report))
    code, report = _run(tmp_path, "cnn", fp32)  # nothing asked, an FP32 file: FP32 as before
    assert (code, report["precision"]) == (0, "fp32") and "precision_not_the_files" not in _codes(report)


@pytest.mark.parametrize("value", ["nan", "", "fp64", "int4", "fp16 "])
def test_a_precision_that_is_none_of_the_choices_is_a_usage_error(tmp_path, capsys, value):
    _, fp16 = _fp16_file(tmp_path, "cnn")
    code, report = _run(tmp_path, "cnn", fp16, "--precision", value)
    assert (code, report) == (2, {})
    assert f"--precision must be fp32, fp16, bf16 or int8, not {value!r}" in capsys.readouterr().err


@pytest.mark.parametrize("text", ['precision = ["fp16"]', 'precision = "FP16x"', "precision = 16", 'precision = ""'])
def test_a_precision_in_the_config_that_is_none_of_the_choices_is_a_usage_error(tmp_path, capsys, text):
    _, fp16 = _fp16_file(tmp_path, "cnn")
    config = tmp_path / "gapcheck.toml"
    config.write_text(f"[export_diff]\n{text}\n")
    code, report = _run(tmp_path, "cnn", fp16, "--config", str(config))
    assert (code, report) == (2, {})
    assert "precision" in capsys.readouterr().err


def test_a_python_caller_asking_an_unknown_precision_is_refused():
    from gapcheck.errors import UsageError
    from gapcheck.export_diff.api import ExportDiffRequest, file_precision

    assert ExportDiffRequest(factory="unused:unused").precision is None  # not asked: the file's own
    with pytest.raises(UsageError, match="precision must be fp32, fp16 or bf16"):
        file_precision("FP16", None)


def test_an_eps_planted_in_an_fp16_bert_is_found_at_its_layernorm_not_refused(tmp_path):
    """The value search feeds torch's FP32 values into a cut of the FP16 graph: they are cast to the dtype ONNX Runtime
    computes each in (localize.as_computed; tests/export_diff/test_fp16_cast.py). Before: ONNX Runtime refused the
    cut, 'bound to different types', and the run ended exit 2."""
    from sample_models.zoo import bert_classifier

    fp32 = tmp_path / "bert.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(bert_classifier().eval(), (torch.randint(0, 1000, (1, 16)),), str(fp32), dynamo=False,
                          input_names=["input_ids"])
        from onnxconverter_common import float16

        model = float16.convert_float_to_float16(onnx.load(str(fp32)), keep_io_types=True)
    norm = [n for n in model.graph.node if n.op_type == "LayerNormalization"][2]
    next(a for a in norm.attribute if a.name == "epsilon").f = 0.5
    planted = tmp_path / "bert_eps.onnx"
    onnx.save(model, str(planted))
    report = tmp_path / "report.json"
    code = main(["export-diff", "--model", "sample_models.zoo:bert_classifier", "--input",
                 "input_ids:1x16:int64:0,1000", "--onnx", str(planted), "--num-samples", "2", "--json", str(report),
                 "--no-progress"])
    first = json.loads(report.read_text())["first_divergence"]
    assert code == 1
    assert (first["module"], first["cause"]) == ("bert.encoder.layer.0.output.LayerNorm", "local")

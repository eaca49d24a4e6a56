"""Padding invariance on the planted sequence models (torch and ONNX Runtime), and on a real HF BERT."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from gapcheck.backends.onnxruntime import OnnxRuntimeBackend
from gapcheck.backends.torch_eager import TorchBackend
from gapcheck.errors import UsageError
from gapcheck.export_diff.padding import PadOptions, check_padding, torch_localizer
from gapcheck.report.formats import ReportFormat, render
from sample_models import padding as planted

T = 32
INPUTS = ("ids", "mask")
OUTPUTS = ("hidden", "logits")


def _base() -> dict[str, np.ndarray]:
    return {"ids": np.ones((1, T), dtype=np.int64), "mask": np.ones((1, T), dtype=np.int64)}


def _torch_run(model):
    backend = TorchBackend(model, INPUTS, OUTPUTS)
    return backend.infer


def _ort_run(model):
    buffer = io.BytesIO()
    torch.onnx.export(model, (torch.ones(2, T, dtype=torch.long), torch.ones(2, T, dtype=torch.long)), buffer,
                      input_names=list(INPUTS), output_names=list(OUTPUTS), dynamo=False,
                      dynamic_axes={"ids": {0: "b", 1: "t"}, "mask": {0: "b", 1: "t"}})
    import onnx
    return OnnxRuntimeBackend(onnx.load_from_string(buffer.getvalue())).infer


def _check(model, sides=("right",), backends=None):
    options = PadOptions(token_input="ids", mask_input="mask", max_length=T, sides=sides, n_sequences=3)
    localize = torch_localizer(model, INPUTS, OUTPUTS, options.tolerance)
    return check_padding(options, _base(), _torch_run(model), backends=backends, localize=localize)


@pytest.mark.parametrize("sides", [("right",), ("right", "left")])
def test_clean_model_is_padding_invariant_on_both_backends(sides):
    model = planted.build_clean()
    result = _check(model, sides, backends={"onnxruntime": _ort_run(model)})
    assert [f.code for f in result.findings] == [], result.findings
    assert {v.backend for v in result.variants} == {"torch", "onnxruntime"}
    assert all(v.passed for v in result.variants)


def test_mean_pool_over_padding_is_found_and_localized():
    result = _check(planted.build_mean_pool_over_padding())
    finding = next(f for f in result.findings if f.code == "padding_dependence")
    assert finding.subject.endpoint == "torch"
    assert finding.evidence["output"] == "logits"  # the hidden states at valid positions are fine
    assert finding.subject.module == "head"  # pooling happens in forward; the first module that sees it is the head
    assert not any(f.code == "mask_ignored" for f in result.findings)


def test_ignored_mask_is_named():
    result = _check(planted.build_mask_ignored())
    codes = [f.code for f in result.findings]
    assert "padding_dependence" in codes and "mask_ignored" in codes
    dependence = next(f for f in result.findings if f.code == "padding_dependence")
    assert dependence.evidence["output"] == "hidden" and dependence.evidence["positions"]
    assert dependence.subject.module.startswith("attn")  # attention over padded keys: first seen at attn.proj


def test_onnx_with_fixed_sequence_axis_is_not_checked_not_a_gap():
    model = planted.build_clean()
    buffer = io.BytesIO()
    torch.onnx.export(model, (torch.ones(2, T, dtype=torch.long), torch.ones(2, T, dtype=torch.long)), buffer,
                      input_names=list(INPUTS), output_names=list(OUTPUTS), dynamo=False,
                      dynamic_axes={"ids": {0: "b"}, "mask": {0: "b"}})
    import onnx
    fixed = OnnxRuntimeBackend(onnx.load_from_string(buffer.getvalue())).infer
    options = PadOptions(token_input="ids", mask_input="mask", max_length=T, n_sequences=3)
    result = check_padding(options, _base(), _torch_run(model), backends={"onnxruntime": fixed})
    assert result.verdict.value == "pass"
    skipped = [f for f in result.findings if f.code == "padding_not_checked"]
    assert skipped and all(f.subject.endpoint == "onnxruntime" for f in skipped)
    assert any(v.backend == "onnxruntime" and v.length == T and v.passed for v in result.variants)
    unrun = [v for v in result.sections()["padding"]["variants"] if v["max_abs"] is None]
    assert unrun and all(v["passed"] is None for v in unrun)  # nothing compared: neither passed nor failed


def test_real_bert_from_config_is_padding_invariant_on_the_right():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    bert = transformers.BertModel(config).eval()

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, ids, mask):
            out = self.bert(input_ids=ids, attention_mask=mask)
            return out.last_hidden_state, out.pooler_output

    model = Wrapped().eval()
    options = PadOptions(token_input="ids", mask_input="mask", max_length=T, n_sequences=3, token_range=(1, 200))
    result = check_padding(options, _base(), TorchBackend(model, INPUTS, ("last_hidden_state", "pooler")).infer)
    assert [f.code for f in result.findings] == [], [f.message for f in result.findings]


def test_options_are_validated():
    with pytest.raises(UsageError, match="side"):
        PadOptions(token_input="ids", mask_input="mask", max_length=T, sides=("top",))
    with pytest.raises(UsageError, match="lengths"):
        PadOptions(token_input="ids", mask_input="mask", max_length=T, lengths=(0,))
    with pytest.raises(UsageError, match="token input"):
        check_padding(PadOptions(token_input="tokens", mask_input="mask", max_length=T), _base(), lambda f: {})


def test_report_renders():
    result = _check(planted.build_mask_ignored())
    assert '"padding_dependence"' in render(ReportFormat.JSON, result)
    junit = render(ReportFormat.JUNIT, result)
    assert "torch:pad right to" in junit and 'failures="2"' in junit


def _gpt2(position_ids_from_mask: bool):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=200, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    torch.manual_seed(0)
    gpt2 = transformers.GPT2Model(config).eval()

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gpt2 = gpt2

        def forward(self, ids, mask):
            # generate() derives positions from the mask this way; without it left padding shifts every position.
            positions = (mask.cumsum(-1) - 1).clamp(min=0) if position_ids_from_mask else None
            return self.gpt2(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state

    return Wrapped().eval()


def test_real_gpt2_with_left_padding_and_mask_positions_is_clean():
    model = _gpt2(position_ids_from_mask=True)
    options = PadOptions(token_input="ids", mask_input="mask", max_length=T, sides=("left",), n_sequences=3,
                         token_range=(1, 200))
    result = check_padding(options, _base(), TorchBackend(model, INPUTS, ("last_hidden_state",)).infer)
    assert [f.code for f in result.findings] == [], [f.message for f in result.findings]


def test_real_gpt2_left_padded_without_position_ids_is_a_padding_dependence():
    model = _gpt2(position_ids_from_mask=False)
    options = PadOptions(token_input="ids", mask_input="mask", max_length=T, sides=("left",), n_sequences=3,
                         token_range=(1, 200))
    localize = torch_localizer(model, INPUTS, ("last_hidden_state",), options.tolerance)
    result = check_padding(options, _base(), TorchBackend(model, INPUTS, ("last_hidden_state",)).infer,
                           localize=localize)
    finding = next(f for f in result.findings if f.code == "padding_dependence")
    assert finding.subject.module and "wpe" in finding.subject.module  # the position embedding is where it starts


def test_cli_pad_check_on_planted_and_clean_models(tmp_path, capsys):
    import json

    from gapcheck.cli.app import main

    args = ["export-diff", "--input", "ids:1x32:int64:1,100", "--input", "mask:1x32:int64:1,2", "--pad-check",
            "--pad-side", "both", "--no-progress", "--no-cache"]
    report = tmp_path / "r.json"
    assert main([*args, "--model", "sample_models.padding:build_mask_ignored", "--json", str(report)]) == 1
    doc = json.loads(report.read_text())
    codes = {f["code"] for f in doc["findings"]}
    assert {"padding_dependence", "mask_ignored"} <= codes
    assert {v["backend"] for v in doc["padding"]["variants"]} == {"torch", "onnxruntime"}
    # with --pad-check, gapcheck's own export keeps the sequence axis dynamic: ONNX Runtime runs every padded length
    assert all(v["max_abs"] is not None for v in doc["padding"]["variants"])
    assert not any(f["code"] == "padding_not_checked" for f in doc["findings"])
    import onnx

    saved = tmp_path / "seq.onnx"
    assert main([*args, "--model", "sample_models.padding:build_clean", "--save-onnx", str(saved)]) == 0
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in onnx.load(str(saved)).graph.input}
    assert all(isinstance(dims[name][1], str) for name in ("ids", "mask")), dims  # symbolic, not 32
    capsys.readouterr()
    assert main([*args, "--model", "sample_models.padding:build_clean"]) == 0
    assert main([*args[:-4], "--pad-side", "top", "--model", "sample_models.padding:build_clean"]) == 2
    assert main(["export-diff", "--model", "sample_models.padding:build_clean", "--input", "ids:1x32:int64:1,100",
                 "--input", "mask:1x32:int64:1,2", "--pad-lengths", "40", "--no-progress"]) == 2  # needs --pad-check


# --- refusals instead of silent passes (attacker review: pad-check) -------------------------------------------

def _per_token(feeds):
    """A padding-invariant stand-in model without torch: one value per position, and a masked sum."""
    ids, mask = feeds["ids"].astype(np.float64), feeds["mask"].astype(np.float64)
    return {"hidden": ids[..., None], "logits": (ids * mask).sum(axis=1, keepdims=True)}


def _options(**kwargs):
    return PadOptions(**{"token_input": "ids", "mask_input": "mask", "max_length": T, "n_sequences": 3, **kwargs})


def test_lengths_that_cannot_pad_the_sequences_are_refused_not_passed():
    from gapcheck.errors import UsageError

    with pytest.raises(UsageError, match=r"padded length\(s\) 1 are shorter .* at least \d+") as caught:
        check_padding(_options(lengths=(1,)), _base(), _per_token)
    assert caught.value.parameter == "pad_lengths"


def test_too_short_lengths_among_usable_ones_are_stated():
    result = check_padding(_options(lengths=(1, T)), _base(), _per_token, backends={"other": _per_token})
    assert {v.length for v in result.variants} == {T}
    assert result.dropped_lengths == (1,)
    dropped = [f for f in result.findings if f.code == "padding_not_checked" and f.evidence.get("dropped_lengths")]
    assert len(dropped) == 1 and dropped[0].evidence["dropped_lengths"] == [1]
    assert "padding_not_checked" in render(ReportFormat.JSON, result)


def test_padded_length_is_capped_by_the_declared_length():
    from gapcheck.export_diff.padding import PAD_LENGTH_FACTOR

    cap = PAD_LENGTH_FACTOR * T
    with pytest.raises(UsageError, match=f"longer than {cap}") as caught:
        _options(lengths=(40, 65536))
    assert caught.value.parameter == "pad_lengths"
    assert _options(lengths=(cap,)).lengths == (cap,)


def test_padded_batch_is_checked_against_the_element_limit_before_it_is_built(monkeypatch):
    from gapcheck.errors import InputError

    monkeypatch.setenv("GAPCHECK_MAX_ELEMENTS", str(3 * T - 1))

    def run(feeds):
        assert feeds["ids"].shape[0] == 1, "a padded batch was built and run"
        return _per_token(feeds)

    with pytest.raises(InputError, match="padded batch"):
        check_padding(_options(lengths=(T,)), _base(), run)


def _fails_when(predicate, message="RuntimeError: CUDA out of memory"):
    from gapcheck.errors import BackendError

    def run(feeds):
        if predicate(feeds):
            raise BackendError(f"the torch model failed to run: {message}")
        return _per_token(feeds)

    return run


def test_torch_failure_on_a_padded_variant_is_an_error_not_an_info_pass():
    from gapcheck.errors import BackendError, ExitCode

    torch_run = _fails_when(lambda feeds: feeds["ids"].shape[0] > 1)  # the reference runs; every padded batch fails
    with pytest.raises(BackendError, match="torch \\(the reference\\) failed .* padded to 32") as caught:
        check_padding(_options(lengths=(T,)), _base(), torch_run, backends={"onnxruntime": torch_run})
    assert caught.value.exit_code == ExitCode.BACKEND
    # beyond the declared length, the length asked for is the likely cause: a usage error naming it
    with pytest.raises(UsageError, match="padded to 100 .* longer than the declared sequence length 32") as caught:
        check_padding(_options(lengths=(100,)), _base(), torch_run)
    assert caught.value.parameter == "pad_lengths"


def test_torch_failure_on_the_unpadded_reference_is_an_error():
    from gapcheck.errors import BackendError

    with pytest.raises(BackendError, match="reference failed"):
        check_padding(_options(), _base(), _fails_when(lambda feeds: True, "shapes cannot be multiplied"))


def test_other_backend_refusing_a_length_stays_info_and_torch_still_compares():
    other = _fails_when(lambda feeds: feeds["ids"].shape[1] != T, "Got invalid dimensions for input")
    result = check_padding(_options(lengths=(20, T)), _base(), _per_token, backends={"onnxruntime": other})
    assert result.verdict.value == "pass"
    skipped = [f for f in result.findings if f.code == "padding_not_checked"]
    assert [f.subject.endpoint for f in skipped] == ["onnxruntime"] and skipped[0].severity.value == "info"
    assert all(v.max_abs is not None for v in result.variants if v.backend == "torch")


def test_duplicate_lengths_and_sides_run_once():
    options = _options(lengths=(T, 20, T), sides=("left", "right", "left"))
    assert options.lengths == (20, T) and options.sides == ("left", "right")
    result = check_padding(options, _base(), _per_token)
    names = [check.name for check in result.checks()]
    assert len(names) == len(set(names)) == 4


def test_token_and_mask_inputs_are_validated():
    with pytest.raises(UsageError, match="two different inputs"):
        _options(mask_input="ids")
    with pytest.raises(UsageError, match="token input name"):
        _options(token_input="")
    floats = {"ids": np.ones((1, T), dtype=np.float32), "mask": np.ones((1, T), dtype=np.int64)}
    with pytest.raises(UsageError, match="must be an integer sequence"):
        check_padding(_options(), floats, _per_token)
    short_mask = {"ids": np.ones((1, T), dtype=np.int64), "mask": np.ones((1, 8), dtype=np.int64)}
    with pytest.raises(UsageError, match="mask input 'mask' must be a 1xT sequence"):
        check_padding(_options(), short_mask, _per_token)


def test_torchscript_export_keeps_the_sequence_axis_dynamic_too(tmp_path):
    import json

    from gapcheck.cli.app import main

    report = tmp_path / "r.json"
    assert main(["export-diff", "--input", "ids:1x32:int64:1,100", "--input", "mask:1x32:int64:1,2", "--pad-check",
                 "--pad-side", "both", "--no-progress", "--no-cache", "--exporter", "torchscript",
                 "--model", "sample_models.padding:build_clean", "--json", str(report)]) == 0
    variants = json.loads(report.read_text())["padding"]["variants"]
    assert {v["backend"] for v in variants} == {"torch", "onnxruntime"}
    assert all(v["max_abs"] is not None and v["passed"] for v in variants)  # every length ran on ONNX Runtime

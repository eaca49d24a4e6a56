"""The pad token: taken from the model's config (RoBERTa pads with 1 and derives positions from it), or --pad-id."""
from __future__ import annotations

import json

import torch

from gapcheck.cli.app import main
from gapcheck.export_diff.pad_run import model_pad_id


def build_roberta() -> torch.nn.Module:
    import transformers

    config = transformers.RobertaConfig(vocab_size=200, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                        intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.RobertaModel(config).eval()

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.roberta = model

        def forward(self, input_ids, attention_mask):
            return self.roberta(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    return Wrapped().eval()


def test_the_pad_id_comes_from_a_wrapped_models_config():
    assert model_pad_id(build_roberta()) == 1
    assert model_pad_id(torch.nn.Linear(2, 2)) == 0


def test_roberta_left_padded_with_its_own_pad_id_is_clean_and_with_0_is_not(tmp_path, capsys):
    args = ["export-diff", "--model", "tests.export_diff.test_pad_id:build_roberta", "--input",
            "input_ids:1x16:int64:3,200", "--input", "attention_mask:1x16:int64:1,2", "--pad-check", "--pad-side",
            "left", "--pad-lengths", "16", "--no-progress", "--no-cache", "--exporter", "dynamo"]
    report = tmp_path / "r.json"
    code = main([*args, "--json", str(report)])
    out = capsys.readouterr().out
    assert code == 0, out  # a false alarm before: padding with 0 shifted RoBERTa's positions
    assert all(v["passed"] for v in json.loads(report.read_text())["padding"]["variants"] if v["backend"] == "torch")
    assert main([*args, "--pad-id", "0", "--json", str(report)]) == 1  # 0 is a real token to RoBERTa
    assert "padding_dependence" in {f["code"] for f in json.loads(report.read_text())["findings"]}

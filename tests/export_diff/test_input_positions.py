"""Inputs reach forward by position: names that are forward's parameters at other positions are refused (exit 2)."""
from __future__ import annotations

import torch

from gapcheck.cli.app import main


class LikeGpt2(torch.nn.Module):
    """forward(input_ids, past_key_values=None, attention_mask=None), as Hugging Face decoders have it."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(50, 8)

    def forward(self, input_ids, past_key_values=None, attention_mask=None):
        hidden = self.embed(input_ids)
        if attention_mask is not None:
            hidden = hidden * attention_mask.unsqueeze(-1)
        return hidden.sum(dim=1)


def build() -> torch.nn.Module:
    torch.manual_seed(0)
    return LikeGpt2().eval()


def test_a_mask_given_second_is_refused_with_forwards_order(capsys):
    code = main(["export-diff", "--model", "tests.export_diff.test_input_positions:build", "--input",
                 "input_ids:1x6:int64:0,50", "--input", "attention_mask:1x6:int64:1,2", "--no-progress", "--no-cache"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "'attention_mask' is parameter 3 of LikeGpt2.forward(input_ids, past_key_values, attention_mask" in err
    assert "Traceback" not in err


def test_inputs_in_forwards_order_or_with_other_names_run(capsys):
    base = ["export-diff", "--model", "tests.export_diff.test_input_positions:build", "--no-progress", "--no-cache",
            "--exporter", "torchscript"]
    assert main([*base, "--input", "input_ids:1x6:int64:0,50"]) == 0
    assert main([*base, "--input", "tokens:1x6:int64:0,50"]) == 0  # a name forward does not have: by position, as ever

"""export-diff says which weights of a checkpoint it compared (timm's state_dict vs state_dict_ema, a stripped
'module.' prefix): an info finding in every report, never a silent choice."""
from __future__ import annotations

import json

import torch

from gapcheck.cli.app import main
from sample_models.cnn import build_small_resnet
from tests.model.test_checkpoints import RESNET, timm_checkpoint


def _weights_findings(report) -> list[dict]:
    return [f for f in json.loads(report.read_text())["findings"] if f["code"] == "checkpoint_weights"]


def test_the_key_and_the_other_weight_sets_are_reported(tmp_path) -> None:
    timm_checkpoint(tmp_path / "ckpt.pth.tar")
    for key, other in (([], "state_dict_ema"), (["--state-dict-key", "state_dict_ema"], "state_dict")):
        report = tmp_path / "r.json"
        assert main(["export-diff", "--checkpoint", str(tmp_path / "ckpt.pth.tar"), *RESNET, *key, "--num-samples",
                     "1", "--json", str(report)]) == 0
        (finding,) = _weights_findings(report)
        chosen = key[1] if key else "state_dict"
        assert finding["severity"] == "info"
        assert f"'{chosen}'" in finding["message"] and f"'{other}'" in finding["message"], finding


def test_a_stripped_prefix_is_reported_and_a_plain_state_dict_says_nothing(tmp_path) -> None:
    state = build_small_resnet().state_dict()
    torch.save({f"module.{k}": v for k, v in state.items()}, tmp_path / "ddp.pt")
    torch.save(state, tmp_path / "plain.pt")
    report = tmp_path / "r.json"
    assert main(["export-diff", "--checkpoint", str(tmp_path / "ddp.pt"), *RESNET, "--num-samples", "1",
                 "--json", str(report)]) == 0
    (finding,) = _weights_findings(report)
    assert "'module.'" in finding["message"]
    assert main(["export-diff", "--checkpoint", str(tmp_path / "plain.pt"), *RESNET, "--num-samples", "1",
                 "--json", str(report)]) == 0
    assert _weights_findings(report) == []

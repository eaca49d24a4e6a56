"""export-diff --onnx on what ONNX Runtime's transformer optimizer writes for T5 (RMSNorm as SimplifiedLayerNormalization
in the ONNX domain, SkipSimplifiedLayerNormalization in com.microsoft): ONNX Runtime runs it, so gapcheck compares it."""
from __future__ import annotations

import warnings

import onnx
import torch

from gapcheck.cli.app import main
from sample_models.zoo import t5_encoder


def test_a_t5_file_from_onnxruntimes_transformer_optimizer_is_compared_and_passes(tmp_path):
    from onnxruntime.transformers import optimizer

    exported, optimized = tmp_path / "t5.onnx", tmp_path / "t5_opt.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(t5_encoder(), (torch.randint(0, 1000, (1, 16)),), str(exported), dynamo=False,
                          input_names=["input_ids"], opset_version=17)
        optimizer.optimize_model(str(exported), model_type="t5", num_heads=4, hidden_size=64).save_model_to_file(
            str(optimized))
    ops = {(n.domain, n.op_type) for n in onnx.load(str(optimized)).graph.node}
    assert ("", "SimplifiedLayerNormalization") in ops  # what onnx.checker refuses: "No Op registered for ..."
    code = main(["export-diff", "--model", "sample_models.zoo:t5_encoder", "--input", "input_ids:1x16:int64:0,1000",
                 "--onnx", str(optimized), "--num-samples", "2", "--no-progress"])
    assert code == 0

"""What export-diff must report for each sample model: the table the tests (and users) read.

Each entry: the factory, the input spec, the extra options, and the expected
finding codes with the module they must be attributed to (None = clean model).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SampleCase:
    name: str
    factory: str
    inputs: tuple[str, ...]
    options: dict = field(default_factory=dict)
    expected_codes: tuple[str, ...] = ()  # empty: a clean model, no gap at default tolerances
    expected_module: str | None = None  # where the first divergence (or the finding) must point
    expected_cause: str | None = None  # "local" / "inherited" for the first divergence
    warnings: tuple[str, ...] = ()  # finding codes expected below gap severity


CASES = (
    SampleCase("resnet", "sample_models.cnn:build_small_resnet", ("x:1x3x32x32:float32",), {"num_samples": 2}),
    SampleCase(  # the TorchScript exporter folds BatchNorm into Conv under the Conv's name
        "resnet_torchscript", "sample_models.cnn:build_small_resnet", ("x:1x3x32x32:float32",), {"exporter": "torchscript"},
    ),
    SampleCase("transformer", "sample_models.transformer:build_transformer", ("ids:1x16:int64:0,1000",), {"num_samples": 2}),
    SampleCase(
        "custom_op", "sample_models.planted:build_custom_op", ("x:1x16:float32",), {"exporter": "torchscript", "num_samples": 2},
        ("layer_divergence", "output_mismatch"), "act", "local",
    ),
    SampleCase(
        "branch", "sample_models.planted:build_branch", ("x:1x8:float32",), {"num_samples": 8},
        ("layer_divergence", "input_dependent_gap", "export_fallback"), "gate", "local",
    ),
    SampleCase(
        "batch_loop", "sample_models.planted:build_per_sample_loop", ("x:1x5x12:float32",), {"batch_sizes": (1, 4)},
        ("batch_size_baked",), None,
    ),
    SampleCase(  # compared in eval mode (the default): reported, not a gap, since eval mode is what deploys
        "train_mode", "sample_models.planted:build_train_mode", ("x:1x3x16x16:float32",), {},
        (), None, warnings=("training_mode",),
    ),
    SampleCase(  # compared as handed over: BatchNorm on batch statistics, Dropout active
        "train_mode_kept", "sample_models.planted:build_train_mode", ("x:1x3x16x16:float32",), {"keep_train_mode": True},
        ("training_mode", "layer_divergence"), "bn", "local",
    ),
    SampleCase(
        "fp16_overflow", "sample_models.planted:build_fp16_overflow", ("x:1x8x16:float32",), {"precision": "fp16"},
        ("fp16_overflow", "layer_divergence"), "attn.scores", "local",
    ),
)

"""``export-diff --pad-check``: the padding-invariance check on every backend of an export-diff run.

Reuses what the run already has — the model, the exported ONNX graph, the deployed backends — so the
cost is the padding variants' forwards on each backend, never a re-export (see
:mod:`gapcheck.export_diff.padding` for the check itself).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from gapcheck.errors import UsageError
from gapcheck.export_diff.padding import PadOptions, check_padding, torch_localizer
from gapcheck.export_diff.result import ExportDiffResult
from gapcheck.progress import ProgressReporter


def token_and_mask(sample: dict[str, np.ndarray], token: str | None, mask: str | None,
                    input_specs: Sequence[str] = ()) -> tuple[str, str | None]:
    """The token and mask input names (found from the inputs when None), refused (UsageError) when unusable."""
    sequences = [name for name, array in sample.items() if array.ndim == 2 and np.issubdtype(array.dtype, np.integer)]
    if token is None:
        candidates = [name for name in sequences if "mask" not in name.lower() and "type" not in name.lower()]
        if not candidates:
            raise UsageError("the padding check needs an integer token input of shape 1xT (e.g. ids:1x64:int64:0,30522)",
                             parameter="pad_inputs")
        token = candidates[0]
    if token not in sample:
        raise UsageError(f"the padding check's token input {token!r} is not a model input ({', '.join(sample)})",
                         parameter="pad_inputs")
    if token not in sequences:
        array = sample[token]
        raise UsageError(f"the padding check's token input {token!r} must be an integer sequence input of shape 1xT "
                         f"(token ids), got {array.dtype} of shape {'x'.join(map(str, array.shape))}",
                         parameter="pad_inputs")
    if mask is None:
        mask = next((name for name in sequences if "mask" in name.lower() and name != token), None)
    elif mask not in sample:
        raise UsageError(f"the padding check's mask input {mask!r} is not a model input ({', '.join(sample)})",
                         parameter="pad_inputs")
    if mask == token:
        raise UsageError(f"the padding check's token and mask inputs are both {token!r}: name two different inputs "
                         "(TOKENS,MASK)", parameter="pad_inputs")
    low_high = _declared_range(input_specs, token)
    values = (low_high[0], low_high[1] - 1) if low_high else (int(sample[token].min()), int(sample[token].max()))
    if values[0] >= 0 and values[1] <= 1:  # a 0/1 input is a mask, not token ids (e.g. mask:1xT:int64:1,2)
        raise UsageError(f"the padding check's token input {token!r} only holds values {values[0]}..{values[1]}: it "
                         "looks like a mask, not token ids; name the token input first (TOKENS,MASK)",
                         parameter="pad_inputs")
    return token, mask


def _declared_range(input_specs: Sequence[str], name: str) -> tuple[int, int] | None:
    """[low, high) of ``name``'s --input spec, when it declares one."""
    from gapcheck.inputs import parse_input_spec

    for text in input_specs:
        spec = parse_input_spec(text)
        if spec.name == name and spec.low is not None and spec.high is not None:
            return int(spec.low), int(spec.high)
    return None


def _token_range(input_specs: Sequence[str], token: str) -> tuple[int, int]:
    declared = _declared_range(input_specs, token)
    if declared is None:
        return 1, 100
    low = max(declared[0], 1)  # 0 is the usual padding id: real tokens are drawn above it
    return low, max(declared[1], low + 1)


def model_pad_id(module: Any) -> int:
    """The padding token the model was built for: the first ``config.pad_token_id`` among its modules (Hugging Face
    models carry one; RoBERTa's is 1 and it derives positions from it, so padding with 0 is not padding there),
    else 0."""
    for sub in module.modules():
        value = getattr(getattr(sub, "config", None), "pad_token_id", None)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return 0


def with_padding(request: Any, result: ExportDiffResult, module: Any, sample: dict[str, np.ndarray],
                 deployed: Sequence[Any], progress: ProgressReporter) -> ExportDiffResult:
    """Run the padding check on torch, ONNX Runtime and every deployed backend; add its findings and section."""
    from gapcheck.backends.onnxruntime import OnnxRuntimeBackend
    from gapcheck.backends.torch_eager import TorchBackend
    from gapcheck.export_diff.runner import evaluation_mode

    pad = request.pad_check
    specs = request.inputs.specs
    token, mask = token_and_mask(sample, pad.token_input, pad.mask_input, specs)
    tolerance = request.policy()  # the run's policy: per-dtype defaults, --rtol/--atol, per-output overrides
    options = PadOptions(token_input=token, mask_input=mask, max_length=int(sample[token].shape[1]), lengths=pad.lengths,
                         sides=pad.sides, n_sequences=pad.n_sequences, seed=request.inputs.seed,
                         token_range=_token_range(specs, token), tolerance=tolerance,
                         pad_id=pad.pad_id if pad.pad_id is not None else model_pad_id(module))
    input_names = list(sample)
    # torch returns every model output; a file holding only some of them (Optimum's BertModel without
    # pooler_output) is compared on those it has: each backend's outputs are looked up in torch's by name
    output_names = list(result.model_outputs) or [output.name for output in result.onnx_model.graph.output]
    backends = {"onnxruntime": OnnxRuntimeBackend(result.onnx_model).infer}
    backends.update({backend.name: backend.infer for backend in deployed})
    progress.start("checking padding invariance", None)
    try:
        with evaluation_mode(module, request.keep_train_mode):
            torch_run = TorchBackend(module, input_names, output_names).infer
            localize = torch_localizer(module, input_names, output_names, tolerance)
            padding = check_padding(options, sample, torch_run, backends=backends, localize=localize)
    finally:
        progress.finish()
    return dataclasses.replace(result, padding=padding, findings=result.findings + padding.findings)

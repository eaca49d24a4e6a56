"""Reduced-precision variants of an ONNX model: what an FP16 deployment would compute."""
from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence

import onnx

from gapcheck.errors import UsageError

log = logging.getLogger(__name__)
PRECISIONS = ("fp32", "fp16", "bf16")
FP16_MAX = 65504.0


def to_precision(model: onnx.ModelProto, precision: str, keep_fp32: Sequence[str] = ()) -> onnx.ModelProto:
    """The model converted to ``precision`` with its input/output types kept (so the same feeds work).

    ``keep_fp32`` names nodes that stay in FP32 (onnxconverter-common's ``node_block_list``: casts are inserted
    around them); the model given is never changed.
    """
    if precision == "fp32":
        return model
    if precision == "fp16":
        from onnxconverter_common import float16  # only needed for this mode

        if keep_fp32:
            copy = onnx.ModelProto()
            copy.CopyFrom(model)  # the converter edits a model it does not shape-infer in place
            model = copy
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "values truncated to fp16" warnings: the point of the check
            return float16.convert_float_to_float16(model, keep_io_types=True, disable_shape_infer=False,
                                                    node_block_list=list(keep_fp32) or None)
    if precision == "bf16":
        raise UsageError(
            "precision bf16 is not available: ONNX Runtime's CPU execution provider has no bfloat16 kernels for "
            "most operators, so there is no runtime here to run what a bf16 deployment computes",
            hint="use precision fp16, or compare on the deployment's own runtime (e.g. a Triton endpoint)",
            parameter="precision",
        )
    raise UsageError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}", parameter="precision")

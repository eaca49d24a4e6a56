"""Batch consistency: sample i's output must not depend on the batch size or on what else is in the batch."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from gapcheck.backends.onnxruntime import OnnxRuntimeBackend
from gapcheck.backends.torch_eager import TorchBackend
from gapcheck.compare import TolerancePolicy, compare_arrays
from gapcheck.errors import BackendError, UsageError
from gapcheck.export_diff.result import FAIL, PASS, BatchCheck
from gapcheck.progress import ProgressReporter


def _stack(samples: Sequence[dict[str, np.ndarray]], order: Sequence[int]) -> dict[str, np.ndarray]:
    return {name: np.concatenate([samples[i][name] for i in order], axis=0) for name in samples[0]}


def check_batchable(samples: Sequence[dict[str, np.ndarray]], batch_sizes: Sequence[int]) -> None:
    """Refuse batch checks up front (exit 2) for inputs without a leading batch axis of 1."""
    if any(b < 1 for b in batch_sizes):
        raise UsageError("batch sizes must be positive", parameter="batch_sizes")
    if batch_sizes and any(samples[0][name].ndim == 0 or samples[0][name].shape[0] != 1 for name in samples[0]):
        raise UsageError("batch sizes need inputs whose first axis is a batch of 1 per sample", parameter="batch_sizes")


def check_batches(
    torch_backend: TorchBackend,
    ort: OnnxRuntimeBackend,
    samples: Sequence[dict[str, np.ndarray]],
    batch_sizes: Sequence[int],
    policy: TolerancePolicy,
    progress: ProgressReporter,
    compared_outputs: Sequence[str] = (),
) -> list[BatchCheck]:
    """Run batches of each size (in order and reversed) and compare row i with sample i run alone in torch.

    Samples are reused cyclically when there are fewer samples than the batch size.
    """
    check_batchable(samples, batch_sizes)
    compared = list(compared_outputs or torch_backend.output_names)  # the outputs the ONNX graph has
    singles = [torch_backend.infer(s) for s in samples]
    checks = []
    for batch_size in batch_sizes:
        rows = [i % len(samples) for i in range(batch_size)]
        for label, order in (("as given", rows), ("reversed", rows[::-1])):  # composition: another order
            try:
                outputs = ort.infer(_stack(samples, order), compared)
            except BackendError as exc:
                checks.append(BatchCheck(batch_size, "*", "error", None, None, exc.message, label))
                break
            for name in compared:
                worst_abs, worst_row, ok = 0.0, None, True
                for row, sample_index in enumerate(order):
                    expected = singles[sample_index][name]
                    actual = outputs[name][row : row + 1]
                    stats = compare_arrays(actual, expected, policy.for_name(name, expected.dtype))
                    if not stats.passed:
                        ok = False
                    if not stats.passed and (worst_row is None or stats.max_abs > worst_abs):
                        worst_abs, worst_row = stats.max_abs, row
                    elif ok:
                        worst_abs = max(worst_abs, stats.max_abs)
                checks.append(BatchCheck(batch_size, name, PASS if ok else FAIL, worst_abs, worst_row, order=label))
        progress.advance()
    return checks

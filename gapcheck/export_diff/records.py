"""The values export-diff's result is made of: statuses, per-module and per-output records, the first divergence.

At the bottom of the command: the result and its views (:mod:`gapcheck.export_diff.result`, which re-exports these
for the rest of the command) read them, and this module imports neither.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from gapcheck.compare import ErrorStats
from gapcheck.report.text import format_number


class Status(str, Enum):
    """What happened to one compared thing (a module, an output, a batch check)."""

    PASS = "pass"
    FAIL = "fail"
    NO_ONNX = "no-onnx"  # no ONNX counterpart: fused into a neighbour, an identity, not executed
    NOT_COMPARABLE = "n/a"  # mapped, but not comparable (e.g. returns several tensors)
    ERROR = "error"  # the runtime refused (e.g. a batch size)

    def __str__(self) -> str:
        return self.value


class Cause(str, Enum):
    """Why the first divergent module diverges."""

    LOCAL = "local"  # its own ONNX ops, fed torch's inputs, compute something else
    INHERITED = "inherited"  # its inputs already differ
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


# Module-level names kept for the runner, the batch checks and the server comparison.
PASS, FAIL, NO_ONNX, NOT_COMPARABLE = Status.PASS, Status.FAIL, Status.NO_ONNX, Status.NOT_COMPARABLE


@dataclass(frozen=True)
class LayerResult:
    order: int  # execution (completion) order in the torch forward pass; -1 when it never ran
    module: str
    class_name: str
    op_types: tuple[str, ...]
    onnx_value: str | None
    status: str  # a Status
    stats: ErrorStats | None  # worst case over samples
    worst_sample: int | None
    failing_samples: tuple[int, ...]
    source: str | None
    note: str = ""
    # max |torch fp32 - torch fp64| at this module on the first sample: the rounding noise its budget allows for
    # (atol = max(dtype default, NOISE_FACTOR x noise_floor)); None when not measured (FP16/BF16, no float64 run)
    noise_floor: float | None = None

    @property
    def budget_abs(self) -> float | None:
        """The largest absolute error the tolerance allows at the worst element (atol + rtol·max|expected|, under
        the noise ceiling)."""
        if self.stats is None:
            return None
        return self.stats.budget


@dataclass(frozen=True)
class OutputResult:
    """A final graph output of one backend compared with torch, worst case over samples."""

    name: str
    backend: str
    status: str
    stats: ErrorStats | None
    worst_sample: int | None
    failing_samples: tuple[int, ...]
    note: str = ""


@dataclass(frozen=True)
class FirstDivergence:
    module: str
    cause: str  # a Cause
    source: str | None  # file:line of the diverging op (or of the module's forward)
    op_types: tuple[str, ...]
    sample: int
    output_max_abs: float
    input_max_abs: float | None  # worst error of the module's inputs as ONNX Runtime computed them
    local_max_abs: float | None  # error of the module's ONNX ops fed torch's own inputs
    amplification: float | None
    note: str = ""
    group: tuple[str, ...] = ()  # the fused group this module heads (conv first), when a tool fused it
    differences: tuple[str, ...] = ()  # what differs from the checkpoint: parameters, padding, epsilon (local only)

    @property
    def fused(self) -> bool:
        return len(self.group) > 1

    @property
    def how(self) -> str:
        wording = {"local": "introduces the error", "inherited": "inherits the error from its inputs"}
        return wording.get(str(self.cause), "diverges (cause undetermined)")


@dataclass(frozen=True)
class InputRecord:
    """One input tensor of one sample, and its SHA256 as fed to each backend."""

    sample: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    sha256: dict[str, str]


@dataclass(frozen=True)
class BatchCheck:
    batch_size: int
    output: str
    status: str  # PASS, FAIL, or ERROR when the runtime refused the batch
    max_abs: float | None
    worst_row: int | None
    error: str | None = None
    order: str = "as given"  # "as given" or "reversed": the same samples in another batch composition


def num(value: float | None) -> str:
    return "-" if value is None else format_number(value)

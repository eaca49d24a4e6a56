"""The backend contract. The comparator only ever sees ``dict[str, np.ndarray]``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class TensorSpec:
    """Name, dtype and shape of an input or output; ``None`` or a string in ``shape`` is a dynamic axis."""

    name: str
    dtype: str
    shape: tuple[int | str | None, ...]


@runtime_checkable
class Backend(Protocol):
    """Anything that runs named inputs and returns named outputs.

    Implementations raise :class:`gapcheck.errors.BackendError` (or a subclass) when they fail, and
    after each ``infer`` hold ``last_input_fingerprints``: the SHA256 (gapcheck.tensors.fingerprint)
    of each input as they actually fed it, so reports show what every backend received.
    """

    name: str
    last_input_fingerprints: dict[str, str]

    def input_specs(self) -> list[TensorSpec]: ...

    def output_specs(self) -> list[TensorSpec]: ...

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...

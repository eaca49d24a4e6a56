"""Reduced-precision deployments (FP16, INT8): find the modules that break, write the fixed model, prove it.

:func:`run_precision` is the entry point (``gapcheck precision``, ``gapcheck export-diff --precision ... --fix`` and
``gapcheck export --precision ...`` call it, their options declared once in :mod:`.spec`); :mod:`.fp16` and
:mod:`.int8` hold the passes, :mod:`.targets` the task-level measures, :mod:`.calibration` the calibration sources.
The names below resolve lazily, so the light :mod:`.spec` imports no ONNX or numpy.
"""
from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {"PrecisionRequest": "gapcheck.precision.api", "run_precision": "gapcheck.precision.api",
           "Target": "gapcheck.precision.targets", "parse_target": "gapcheck.precision.targets",
           "PrecisionSpec": "gapcheck.precision.spec"}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_PUBLIC[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])

"""Reduced-precision deployments (FP16, INT8): find the modules that break, write the fixed model, prove it.

:func:`run_precision` is the entry point (the CLI's ``gapcheck precision`` calls it); :mod:`.fp16` and :mod:`.int8`
hold the passes, :mod:`.targets` the task-level measures, :mod:`.calibration` the calibration sources.
"""
from __future__ import annotations

from gapcheck.precision.api import PrecisionRequest, run_precision
from gapcheck.precision.targets import Target, parse_target

__all__ = ["PrecisionRequest", "Target", "parse_target", "run_precision"]

"""``[precision]``: the defaults of the reduced-precision options (:class:`~gapcheck.precision.spec.PrecisionSpec`'s
keys), shared by ``gapcheck precision``, ``export-diff --precision ... --fix`` and ``export --precision``.

Only the types and ranges are checked here; the group checks the values again (the same messages as for flags).
``--fix`` (where to write) and ``--precision`` stay flags: a config file should not choose an output path or turn a
plain run into a reduced-precision one.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from gapcheck.config import Section


class PrecisionSection(Section):
    calibration: Optional[str] = None
    calibration_stage: Optional[str] = None
    calibration_method: Optional[Literal["minmax", "entropy", "percentile"]] = None
    int8_mode: Optional[Literal["auto", "static", "dynamic"]] = None
    targets: Optional[list[str]] = None
    max_runs: Optional[int] = Field(default=None, ge=1, le=10)
    sensitivity: Optional[Literal["local", "alone"]] = None

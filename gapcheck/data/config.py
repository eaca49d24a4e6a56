"""Config sections of the data checks: ``[leakage]``, ``[drift]`` (file < env < flags); ``[engine]`` lives in
:mod:`gapcheck.engines.config`."""
from __future__ import annotations

from typing import Optional, Union

from pydantic import Field

from gapcheck.config import Section, register_section


class LeakageSection(Section):
    near: Optional[float] = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    key: Optional[list[str]] = None
    group_column: Optional[str] = None
    label_column: Optional[str] = None
    labels: Optional[str] = None
    # duplicates within splits: true (all), false (none), split names; absent: validation/test splits by name
    within: Optional[Union[bool, list[str]]] = None


class DriftSection(Section):
    p_threshold: Optional[float] = Field(default=None, gt=0, lt=1, allow_inf_nan=False)
    min_effect: Optional[float] = Field(default=None, ge=0, allow_inf_nan=False)
    columns: Optional[list[str]] = None
    fail_underpowered: Optional[bool] = None


register_section("leakage", LeakageSection)
register_section("drift", DriftSection)

"""Config sections of the data checks and the engines: ``[engine]``, ``[leakage]``, ``[drift]`` (file < env < flags)."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from gapcheck.config import Section, register_section


class EngineSection(Section):
    name: Literal["serial", "local", "ray"] = "local"
    workers: Optional[int] = Field(None, ge=1)
    address: Optional[str] = None


class LeakageSection(Section):
    near: Optional[float] = None
    key: Optional[list[str]] = None
    group_column: Optional[str] = None
    label_column: Optional[str] = None
    labels: Optional[str] = None


class DriftSection(Section):
    p_threshold: Optional[float] = None
    min_effect: Optional[float] = None
    columns: Optional[list[str]] = None


register_section("engine", EngineSection)
register_section("leakage", LeakageSection)
register_section("drift", DriftSection)

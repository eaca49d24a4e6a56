"""``[engine]``: which engine data jobs run on (the keys of :class:`gapcheck.groups.EngineSpec`; file < env < flags)."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from gapcheck.config import Section


class EngineSection(Section):
    name: Literal["serial", "local", "ray"] = "local"
    workers: Optional[int] = Field(None, ge=1)
    address: Optional[str] = None

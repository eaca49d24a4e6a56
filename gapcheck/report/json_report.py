"""JSON reports: dataclasses and enums to plain JSON, with a schema version on top."""
from __future__ import annotations

import dataclasses
import json
import math
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

SCHEMA_VERSION = "1.0"


def to_jsonable(value: Any) -> Any:
    """Plain JSON types for dataclasses, enums, paths, numpy values; non-finite floats become strings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def write_json(path: str | Path, command: str, payload: dict[str, Any]) -> Path:
    """Write ``{"schema_version", "command", **payload}`` to ``path``."""
    document = {"schema_version": SCHEMA_VERSION, "command": command, **to_jsonable(payload)}
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(document, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return target

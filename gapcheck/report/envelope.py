"""The one JSON envelope every command writes.

``{"schema_version", "command", "gapcheck_version", "verdict", "headline", "findings": [...],
"timings": {...}, <the command's own sections>}``. Each command ships a JSON Schema for its
envelope in ``gapcheck/schemas/<command>.schema.json``; tests validate every report against it.
"""
from __future__ import annotations

import dataclasses
import math
from enum import Enum
from pathlib import Path
from typing import Any

from gapcheck.findings import Finding
from gapcheck.report.contract import CommandResult
from gapcheck.version import __version__

SCHEMA_VERSION = "2.0"
_HEAD = ("schema_version", "command", "gapcheck_version", "verdict", "headline", "findings", "timings")


def to_jsonable(value: Any) -> Any:
    """Plain JSON types for dataclasses, enums, paths, numpy values; non-finite floats become strings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "tolist") and type(value).__module__ == "numpy":  # numpy scalars and arrays, without importing numpy
        return to_jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def finding_to_dict(finding: Finding) -> dict[str, Any]:
    return {
        "code": finding.code,
        "severity": finding.severity.value,
        "message": finding.message,
        "where": finding.where,
        "subject": finding.subject.as_dict(),
        "evidence": to_jsonable(finding.evidence),
        "fingerprint": finding.fingerprint,
    }


def envelope(result: CommandResult) -> dict[str, Any]:
    """The envelope of ``result`` as plain JSON types."""
    sections = to_jsonable(result.sections())
    clash = sorted(set(sections) & set(_HEAD))
    if clash:
        raise ValueError(f"{result.command}: sections may not reuse envelope keys: {', '.join(clash)}")
    return {
        "schema_version": SCHEMA_VERSION,
        "command": result.command,
        "gapcheck_version": __version__,
        "verdict": result.verdict.value,
        "headline": result.headline,
        "findings": [finding_to_dict(f) for f in result.findings],
        "timings": to_jsonable(dict(result.timings)),
        **sections,
    }


def schema_for(command: str, shape: str | None = None) -> dict[str, Any]:
    """The JSON Schema shipped for ``command``'s report (``gapcheck/schemas/<command>.schema.json``), or for one
    of its other report shapes (``<command>-<shape>.schema.json``: preprocess-audit on text is ``input: text``)."""
    import json
    from importlib import resources

    name = f"{command}-{shape}.schema.json" if shape else f"{command}.schema.json"
    try:
        text = resources.files("gapcheck.schemas").joinpath(name).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KeyError(f"no JSON Schema shipped for command {command!r} (expected gapcheck/schemas/{name})") from None
    schema: dict[str, Any] = json.loads(text)
    return schema


def validate(document: dict[str, Any]) -> None:
    """Validate a report against its command's schema (needs ``jsonschema``, a test dependency); raises on error."""
    import jsonschema

    shape = document.get("input")  # a command with several report shapes says which one (preprocess-audit: text)
    schema = schema_for(str(document.get("command")), str(shape) if isinstance(shape, str) else None)
    jsonschema.validate(document, schema, cls=jsonschema.Draft202012Validator)

"""What both precision passes share below the entry point: the default INT8 target, the atomic write of a fixed
model, and how a cause that a verified fix handles is reported."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from gapcheck.atomic import write_atomic
from gapcheck.findings import Finding, Severity
from gapcheck.precision.targets import Target

DEFAULT_TARGET = Target("cosine", 0.99)


def write_fix(path: Path, model: Any) -> Path:
    """The fixed model, atomically: the file alone (nothing else in its folder is touched)."""
    return write_atomic(path, model.SerializeToString(), what="fixed model")


def downgraded(finding: Finding) -> Finding:
    """A cause the verified fix handles stays in the report, as a warning: the written model passes."""
    if finding.severity is not Severity.GAP:
        return finding
    return replace(finding, severity=Severity.WARNING, message=finding.message + " (kept in FP32 by the fix)")

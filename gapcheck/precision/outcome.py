"""What both precision passes share below the entry point: the default INT8 target, the atomic write of a fixed
model, and how a cause that a verified fix handles is reported."""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import Any

from gapcheck.atomic import write_atomic
from gapcheck.findings import Finding, Severity
from gapcheck.precision.targets import Target

DEFAULT_TARGET = Target("cosine", 0.99)


def write_fix(request: Any, model: Any) -> Path:
    """The verified model: handed to the request's ``deploy`` (a Triton repository), else written atomically to
    ``fix_path`` (the file alone: nothing else in its folder is touched). Returns where it went."""
    if request.deploy is not None:
        return Path(request.deploy(model))
    return write_atomic(request.fix_path, model.SerializeToString(), what="fixed model")


def downgraded(finding: Finding, kept_nodes: Collection[str]) -> Finding:
    """A cause the verified fix handles stays in the report, as a warning: the written model passes. The note says
    what the fix did about it: only a module whose nodes the fix keeps is said to be kept in FP32 (the fix keeps the
    fewest; a sensitive module it leaves quantized, or the whole model's missed target, is said to be before it)."""
    if finding.severity is not Severity.GAP:
        return finding
    nodes = finding.evidence.get("nodes") if isinstance(finding.evidence, dict) else None
    if nodes and set(nodes) & set(kept_nodes):
        note = "kept in FP32 by the fix"
    elif nodes:
        note = "left as it is by the fix: the fixed model passes without it in FP32"
    else:
        note = "before the fix: the fixed model passes"
    return replace(finding, severity=Severity.WARNING, message=f"{finding.message} ({note})")

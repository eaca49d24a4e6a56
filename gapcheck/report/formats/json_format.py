"""JSON: the one versioned envelope (see :mod:`gapcheck.report.envelope`)."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

from gapcheck.report.envelope import envelope

if TYPE_CHECKING:
    from gapcheck.report.contract import CommandResult


def render(result: "CommandResult") -> str:
    return json.dumps(envelope(result), indent=2, allow_nan=False) + "\n"

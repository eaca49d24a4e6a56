"""Text helpers every renderer shares: neutralize outside text, format values, label evidence.

Text that comes from outside (file names, stage names, server messages, exception text) may carry
terminal escape sequences or control characters; :func:`safe_text` is the one place that makes it
harmless for a console. :func:`evidence_items` turns a finding's evidence into labelled, readable
values (never a Python dict repr) for the console, HTML and JUnit alike. Imports nothing heavy.
"""
from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

_MAX_LIST_ITEMS = 8
#: characters of one outside value (a cell, a message) a console line shows: a server's 10 MB error text must not
#: become 10 MB of terminal (the JSON report keeps it whole)
MAX_CONSOLE_CHARS = 2000


def clip(text: str, limit: int = MAX_CONSOLE_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how many more there were."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit:,} more characters)"


def safe_text(text: object) -> str:
    """``text`` with control characters (ESC, BEL, CR, bidi overrides...) shown as ``\\xNN`` escapes.

    Tabs and newlines stay; everything else in Unicode category C (control, format, unassigned)
    is replaced so a hostile file name cannot move the cursor, recolour the terminal or reorder text.
    """
    out = []
    for ch in str(text):
        if ch in "\t\n" or unicodedata.category(ch)[0] != "C":
            out.append(ch)
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
    return "".join(out)


def safe_line(text: object) -> str:
    """:func:`safe_text` on one line: newlines, carriage returns and tabs shown as ``\\n`` / ``\\r`` / ``\\t``,
    so outside text (a server's message, a file name) cannot start a line of its own that reads like gapcheck's
    ("PASS all good")."""
    return safe_text(str(text).replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r"))


def format_number(value: float) -> str:
    """Four significant digits; inf/nan spelled out."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, int):
        return str(value)
    return f"{value:.4g}"


def format_value(value: Any) -> str:
    """A readable one-line form of an evidence value: numbers rounded, lists joined and cut, tables as ``k: v``."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return format_number(value)
    if isinstance(value, Enum):
        return format_value(value.value)
    if isinstance(value, Mapping):
        return "; ".join(f"{_label(k)}: {format_value(v)}" for k, v in value.items())
    if isinstance(value, (str, bytes)):
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    if isinstance(value, (Sequence, set, frozenset)):
        items = list(value)
        shown = ", ".join(format_value(v) for v in items[:_MAX_LIST_ITEMS])
        more = len(items) - _MAX_LIST_ITEMS
        return shown + (f", ... ({more} more)" if more > 0 else "") if items else "(none)"
    if hasattr(value, "tolist"):  # numpy values, without importing numpy
        return format_value(value.tolist())
    return str(value)


def _label(key: object) -> str:
    return str(key).replace("_", " ")


def evidence_items(evidence: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``[(label, value)]`` for a finding's evidence: ``max_abs`` becomes ``max abs``, values via :func:`format_value`."""
    return [(_label(key), format_value(value)) for key, value in evidence.items()]


def evidence_text(evidence: Mapping[str, Any], separator: str = "\n") -> str:
    return separator.join(f"{label}: {value}" for label, value in evidence_items(evidence))

"""JUnit XML: one testcase per :class:`~gapcheck.report.contract.Check` the result exposes."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from gapcheck.report.text import safe_text

if TYPE_CHECKING:
    from gapcheck.report.contract import CommandResult


def _clean(text: str) -> str:
    # XML 1.0 forbids most control characters; they come from outside (file names, server messages). The rest of
    # Unicode's category C (8-bit CSI U+009B, bidi overrides U+202E, ...) is escaped as the console escapes it: a CI
    # page that shows the XML must not have its text repainted or reordered (the attacker review, D14).
    return safe_text(text)


def render(result: "CommandResult") -> str:
    cases = list(result.checks())
    failures = sum(1 for c in cases if c.failure is not None)
    skipped = sum(1 for c in cases if c.skipped is not None and c.failure is None)
    suite = ET.Element("testsuite", name=f"gapcheck {result.command}", tests=str(len(cases)), failures=str(failures),
                       errors="0", skipped=str(skipped), time=str(round(sum(result.timings.values()), 3)))
    for case in cases:
        element = ET.SubElement(suite, "testcase", name=_clean(case.name), classname=_clean(case.classname), time="0")
        if case.failure is not None:
            failure = ET.SubElement(element, "failure", message=_clean(case.failure), type="gap")
            failure.text = _clean(case.details)
        elif case.skipped is not None:
            ET.SubElement(element, "skipped", message=_clean(case.skipped))
        elif case.details:
            ET.SubElement(element, "system-out").text = _clean(case.details)
    root = ET.Element("testsuites")
    root.append(suite)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"

"""JUnit XML: one testcase per :class:`~gapcheck.report.contract.Check` the result exposes."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from typing import TYPE_CHECKING

from gapcheck.report.text import safe_text

if TYPE_CHECKING:
    from gapcheck.report.contract import Check, CommandResult


def _clean(text: str) -> str:
    # XML 1.0 forbids most control characters; they come from outside (file names, server messages). The rest of
    # Unicode's category C (8-bit CSI U+009B, bidi overrides U+202E, ...) is escaped as the console escapes it: a CI
    # page that shows the XML must not have its text repainted or reordered (the attacker review, D14).
    return safe_text(text)


#: Failing cases written per class (an endpoint, a module): a server listing 200,000 tensors that are not in the graph
#: made a 46 MB file of one failure each; past this, one failing case says how many more there are.
MAX_FAILURES_PER_CLASS = 100


def _bounded(cases: list["Check"]) -> list["Check"]:
    """``cases`` with at most :data:`MAX_FAILURES_PER_CLASS` failing ones per class, and one more failing case per
    class that had more, saying how many are not listed (the report's other formats keep them all)."""
    from gapcheck.report.contract import Check

    failing: Counter[str] = Counter()
    kept = []
    for case in cases:
        if case.failure is not None:
            failing[case.classname] += 1
            if failing[case.classname] > MAX_FAILURES_PER_CLASS:
                continue
        kept.append(case)
    for classname, count in failing.items():
        if count > MAX_FAILURES_PER_CLASS:
            more = count - MAX_FAILURES_PER_CLASS
            kept.append(Check(f"{more} more failing checks", classname,
                              failure=f"{more} more failing checks of {classname} are not listed here (the first "
                                      f"{MAX_FAILURES_PER_CLASS} are): see the JSON or HTML report"))
    return kept


def render(result: "CommandResult") -> str:
    cases = _bounded(list(result.checks()))
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

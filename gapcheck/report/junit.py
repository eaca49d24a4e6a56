"""JUnit XML: one testcase per compared thing, so CI dashboards show each."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class JUnitCase:
    name: str
    classname: str
    failure: str | None = None  # message when the case failed
    details: str = ""  # body text: numbers behind the verdict
    skipped: str | None = None  # reason when the case was not comparable


def write_junit(path: str | Path, suite_name: str, cases: list[JUnitCase]) -> Path:
    failures = sum(1 for c in cases if c.failure is not None)
    skipped = sum(1 for c in cases if c.skipped is not None and c.failure is None)
    suite = ET.Element(
        "testsuite", name=suite_name, tests=str(len(cases)), failures=str(failures), errors="0", skipped=str(skipped)
    )
    for case in cases:
        element = ET.SubElement(suite, "testcase", name=case.name, classname=case.classname, time="0")
        if case.failure is not None:
            failure = ET.SubElement(element, "failure", message=case.failure, type="gap")
            failure.text = case.details
        elif case.skipped is not None:
            ET.SubElement(element, "skipped", message=case.skipped)
        elif case.details:
            ET.SubElement(element, "system-out").text = case.details
    root = ET.Element("testsuites")
    root.append(suite)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(target, encoding="utf-8", xml_declaration=True)
    return target

"""SARIF 2.1.0: findings with a file location as code-scanning results (GitHub, GitLab, VS Code).

One run per report. ``tool.driver.rules`` documents every code the findings use, from the one
registry (title, explanation, fix); each result points at its rule by id and index, carries its
location (a path relative to the working directory under ``%SRCROOT%``, 1-based line and column)
and the finding's stable fingerprint as ``partialFingerprints`` so code scanning recognises "the
same finding as last run". Files that could not be checked (the result's ``errors`` section) become
tool execution notifications and mark the invocation unsuccessful. Only formats; computes nothing.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from gapcheck.codes import lookup
from gapcheck.findings import Finding, Severity
from gapcheck.version import __version__

if TYPE_CHECKING:
    from gapcheck.report.contract import CommandResult

SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
LEVEL = {Severity.GAP: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
INFORMATION_URI = "https://github.com/gapcheck/gapcheck"
_INDENT_MAX = 10_000
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+://")  # a scheme of two letters or more: C:/x is a Windows path


def _uri(path: str) -> tuple[str, str | None]:
    """(uri, uriBaseId): relative paths under %SRCROOT%, absolute ones as file:// URIs, a URL (``s3://b/x.jpg``,
    as the finding shows it: credentials hidden) as it is."""
    if _URL.match(path):
        return path, None
    candidate = Path(path)
    if candidate.is_absolute():
        try:
            candidate = candidate.resolve().relative_to(Path.cwd().resolve())
        except ValueError:
            return candidate.resolve().as_uri(), None
    # bytes, so a file name that is not UTF-8 (lone surrogates in Python) is percent-encoded as it is on disk
    return quote(os.fsencode(PurePosixPath(*candidate.parts).as_posix()), safe="/"), "%SRCROOT%"


def _rule(code: str) -> dict[str, Any]:
    entry = lookup(code)
    if entry is None:  # not registered: still a valid rule, only undocumented
        return {"id": code, "name": code}
    return {
        "id": entry.code,
        "name": "".join(word.capitalize() for word in entry.title.replace("/", " ").split() if word.isalnum())
                or entry.code,
        "shortDescription": {"text": entry.title},
        "fullDescription": {"text": entry.explanation},
        "help": {"text": f"{entry.explanation}\nFix: {entry.fix}",
                 "markdown": f"{entry.explanation}\n\n**Fix:** {entry.fix}"},
        "defaultConfiguration": {"level": LEVEL[entry.severity]},
        "properties": {"family": entry.family, "tags": [entry.family]},
    }


def _location(finding: Finding, uris: dict[str, tuple[str, str | None]]) -> dict[str, Any] | None:
    subject = finding.subject
    if not subject.path:
        return None
    if subject.path not in uris:  # one report's findings name the same few files over and over (lint)
        uris[subject.path] = _uri(subject.path)
    uri, base = uris[subject.path]
    artifact: dict[str, Any] = {"uri": uri}
    if base:
        artifact["uriBaseId"] = base
    physical: dict[str, Any] = {"artifactLocation": artifact}
    if subject.line:
        region: dict[str, Any] = {"startLine": max(1, subject.line)}
        if subject.col:
            region["startColumn"] = max(1, subject.col)
        physical["region"] = region
    return {"physicalLocation": physical}


def _result(finding: Finding, index: dict[str, int], uris: dict[str, tuple[str, str | None]]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": finding.code,
        "ruleIndex": index[finding.code],
        "level": LEVEL[finding.severity],
        "message": {"text": finding.message},
        "partialFingerprints": {"gapcheck/v1": finding.fingerprint},
    }
    location = _location(finding, uris)
    if location is not None:
        result["locations"] = [location]
    if finding.evidence:
        result["properties"] = {"evidence": json.loads(json.dumps(finding.evidence, default=str))}
    return result


def _notifications(result: CommandResult) -> list[dict[str, Any]]:
    notes = []
    for error in result.sections().get("errors", []) or []:
        note: dict[str, Any] = {"level": "error", "message": {"text": str(error.get("message", ""))}}
        if error.get("path"):
            uri, base = _uri(str(error["path"]))
            artifact = {"uri": uri, **({"uriBaseId": base} if base else {})}
            note["locations"] = [{"physicalLocation": {"artifactLocation": artifact}}]
        notes.append(note)
    return notes


def render(result: CommandResult) -> str:
    codes = sorted({f.code for f in result.findings})
    index = {code: i for i, code in enumerate(codes)}
    uris: dict[str, tuple[str, str | None]] = {}
    notifications = _notifications(result)
    invocation: dict[str, Any] = {"executionSuccessful": not notifications}
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    run = {
        "tool": {"driver": {"name": "gapcheck", "version": __version__, "semanticVersion": __version__,
                            "informationUri": INFORMATION_URI, "rules": [_rule(c) for c in codes]}},
        "automationDetails": {"id": f"gapcheck/{result.command}/"},
        "originalUriBaseIds": {"%SRCROOT%": {"uri": Path(os.getcwd()).resolve().as_uri() + "/"}},
        "invocations": [invocation],
        "results": [_result(f, index, uris) for f in result.findings],
        "columnKind": "unicodeCodePoints",
    }
    # indented for a person reading a small report; compact past _INDENT_MAX results (json's C encoder runs only
    # without indent: 100k results took 18 s indented)
    indent = 2 if len(result.findings) <= _INDENT_MAX else None
    return json.dumps({"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}, indent=indent) + "\n"

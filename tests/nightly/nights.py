"""One night through the command line, as the tests run it: ``gapcheck nightly`` with its JSON report read back and
checked against the nightly schema."""
from __future__ import annotations

import json
from pathlib import Path

from gapcheck.cli.app import main
from tests.nightly.conftest import validate_report


def night(bundle: Path, tmp_path: Path, endpoints: list[str] | tuple[str, ...], *extra: str) -> tuple[int, dict]:
    """The exit code and the report (``{}`` when none was written) of one night of ``endpoints`` (NAME=URL) against
    ``bundle``, its history in ``tmp_path``; ``extra``: more options."""
    report = tmp_path / "night.json"
    args = ["nightly", "--golden", str(bundle), "--history", str(tmp_path / "h.sqlite"), "--retries", "1",
            "--json", str(report), *extra]
    for endpoint in endpoints:
        args += ["--endpoint", endpoint]
    code = main(args)
    document = json.loads(report.read_text()) if report.exists() else {}
    if document:
        validate_report(document, "nightly")
    return code, document

"""A pytest plugin: every finding gapcheck's own code emits during a test run must have a registered code.

Enabled for gapcheck's test suite in pyproject.toml (``-p gapcheck.codes.pytest_plugin``). It wraps
``Finding.__post_init__`` for the session: a finding built by code under the ``gapcheck`` package
whose code is not in the registry fails the test during which it was emitted (naming the file and line
that built it; this travels through pytest-xdist like any failure), and the session summary lists each
one. Findings that tests build themselves are not checked.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

_PACKAGE = Path(__file__).resolve().parents[1]
_HELPERS = {str(_PACKAGE / "findings.py"), str(_PACKAGE / "codes" / "__init__.py"), __file__}
_violations: dict[str, str] = {}  # code -> where it was built
_current: list[str] = []  # violations during the running test
_emitted: set[str] = set()


def _builder_frame() -> tuple[str, int] | None:
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith("<") and str(Path(filename).resolve()) not in _HELPERS:
            return filename, frame.f_lineno
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _check(finding: Any) -> None:
    from gapcheck.codes import lookup

    _emitted.add(finding.code)
    if lookup(finding.code) is not None:
        return
    where = _builder_frame()
    if where is None or not str(Path(where[0]).resolve()).startswith(str(_PACKAGE)):
        return  # built by a test, not emitted by gapcheck
    _violations.setdefault(finding.code, f"{where[0]}:{where[1]}")
    _current.append(f"unregistered finding code {finding.code!r} emitted at {where[0]}:{where[1]}")


def pytest_configure(config: Any) -> None:
    from gapcheck.findings import Finding

    original = Finding.__post_init__
    if getattr(original, "_gapcheck_checked", False):
        return

    def checked(self: Any) -> None:
        original(self)
        _check(self)

    checked._gapcheck_checked = True  # type: ignore[attr-defined]
    Finding.__post_init__ = checked  # type: ignore[method-assign]


def _fail_the_test(report: Any) -> None:
    if not _current:  # setup (fixtures build findings too), call or teardown
        return
    message = "\n".join(dict.fromkeys(_current)) + "\n(declare the code in gapcheck/codes/<family>.py)"
    _current.clear()
    report.outcome = "failed"
    report.longrepr = message


try:  # the hook needs pytest; the module is only loaded as a pytest plugin
    import pytest

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item: Any, call: Any) -> Any:
        outcome = yield
        _fail_the_test(outcome.get_result())

except ImportError:  # pragma: no cover
    pass


def emitted_codes() -> frozenset[str]:
    """Codes emitted so far in this process (for tests that want to look)."""
    return frozenset(_emitted)


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    if not _violations:
        return
    lines = [f"  {code!r} emitted at {where}" for code, where in sorted(_violations.items())]
    message = "unregistered finding codes (declare them in gapcheck/codes/<family>.py):\n" + "\n".join(lines)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(message, red=True)
    else:
        print(message, file=sys.stderr)

"""pytest plugin (entry point ``gapcheck-data``): data checks as tests.

Options: ``--check-data-drift`` (run tests marked ``data_check``; they are skipped otherwise),
``--p-threshold`` and ``--gapcheck-min-effect`` (checked at configure time), ``--gapcheck-fail-underpowered``
(fail when a split is too small to detect the minimum effect), ``--gapcheck-engine`` (serial by default: test data
is small), each also spelled ``--gapcheck-*``. Fixture ``gapcheck_data`` and the helpers
:func:`assert_no_leakage` / :func:`assert_no_drift` raise ``AssertionError`` with the findings table.

Importing this module imports nothing heavy (no torch, numpy or pandas): pytest loads it at
start-up for every test run in an environment where gapcheck is installed.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

MARKER = "data_check"


@dataclass(frozen=True)
class DataChecks:
    """What the ``gapcheck_data`` fixture hands a test: the session's thresholds and engine, and the assertions."""

    p_threshold: float = 0.01
    min_effect: float = 0.1
    engine: str = "serial"
    fail_underpowered: bool = False  # drift_underpowered fails the assertion only when asked

    def assert_no_leakage(self, *splits: str, **options: Any) -> Any:
        __tracebackhide__ = True  # the failure points at the test, not at gapcheck
        return assert_no_leakage(*splits, engine=self.engine, **options)

    def assert_no_drift(self, reference: str, current: str, **options: Any) -> Any:
        __tracebackhide__ = True  # the failure points at the test, not at gapcheck
        options.setdefault("p_threshold", self.p_threshold)
        options.setdefault("min_effect", self.min_effect)
        options.setdefault("fail_underpowered", self.fail_underpowered)
        return assert_no_drift(reference, current, engine=self.engine, **options)


def _table(findings: Sequence[Any]) -> str:
    from gapcheck.report.contract import findings_table

    table = findings_table(list(findings))
    width = [max(len(str(r[i])) for r in (table.columns, *table.rows)) for i in range(len(table.columns))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, width, strict=True)) for row in (table.columns, *table.rows)]
    return "\n".join(lines)


def _fail_on_gaps(result: Any, what: str) -> Any:
    __tracebackhide__ = True
    gaps = [f for f in result.findings if f.is_gap]
    if gaps:
        raise AssertionError(f"{what}: {result.headline}\n{_table(result.findings)}")
    return result


def assert_no_leakage(*splits: str, engine: str = "serial", labels_file: str | None = None, **options: Any) -> Any:
    """Fail with the findings table when the splits (``name=location``) leak into each other."""
    __tracebackhide__ = True
    from gapcheck.data.api import leakage
    from gapcheck.data.leakage import LeakageOptions
    from gapcheck.engines import open_engine

    with open_engine(engine) as opened:
        return _fail_on_gaps(leakage(list(splits), LeakageOptions(**options), labels_file=labels_file,
                                     engine=opened), "data leakage")


def assert_no_drift(reference: str, current: str, *, engine: str = "serial", **options: Any) -> Any:
    """Fail with the findings table when ``current`` drifted from ``reference``."""
    __tracebackhide__ = True
    from gapcheck.data.api import drift
    from gapcheck.data.drift import DriftOptions
    from gapcheck.engines import open_engine

    if "columns" in options and options["columns"] is not None:
        options["columns"] = tuple(options["columns"])
    with open_engine(engine) as opened:
        return _fail_on_gaps(drift(reference, current, DriftOptions(**options), engine=opened), "data drift")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gapcheck-data", "gapcheck data checks")
    group.addoption("--check-data-drift", "--gapcheck-check-data-drift", action="store_true",
                    dest="gapcheck_check_data", help=f"run tests marked {MARKER} (skipped otherwise)")
    group.addoption("--p-threshold", "--gapcheck-p-threshold", type=float, default=0.01, dest="gapcheck_p_threshold",
                    help="BH-corrected p-value below which (with the minimum effect) a feature drifted")
    group.addoption("--gapcheck-min-effect", type=float, default=0.1, dest="gapcheck_min_effect",
                    help="minimum effect size (KS D, Wasserstein/ref std, Cramér's V)")
    group.addoption("--gapcheck-fail-underpowered", action="store_true", dest="gapcheck_fail_underpowered",
                    help="fail a drift check whose splits are too small to detect the minimum effect "
                         "(drift_underpowered; reported as info otherwise)")
    group.addoption("--gapcheck-engine", default="serial", choices=("serial", "local", "ray"),
                    dest="gapcheck_engine", help="engine for the data checks")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}: a data check (leakage/drift); skipped unless --check-data-drift")
    check_options(config.getoption("gapcheck_p_threshold", 0.01), config.getoption("gapcheck_min_effect", 0.1))


def check_options(p_threshold: Any, min_effect: Any) -> None:
    """Refuse thresholds that would turn the checks off (``nan`` compares false with everything: a 3σ shift
    passed with ``--gapcheck-min-effect=nan``) as a pytest usage error (exit 4), before any test runs."""
    import math

    if not isinstance(p_threshold, (int, float)) or not (0.0 < p_threshold < 1.0):
        raise pytest.UsageError(f"--p-threshold must be a number in (0, 1), got {p_threshold!r}")
    if not isinstance(min_effect, (int, float)) or not math.isfinite(min_effect) or min_effect < 0:
        raise pytest.UsageError(f"--gapcheck-min-effect must be a finite number >= 0, got {min_effect!r}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("gapcheck_check_data"):
        return
    skip = pytest.mark.skip(reason="data check: run with --check-data-drift")
    for item in items:
        if item.get_closest_marker(MARKER) is not None:
            item.add_marker(skip)


@pytest.fixture
def gapcheck_data(request: pytest.FixtureRequest) -> DataChecks:
    config = request.config
    return DataChecks(p_threshold=config.getoption("gapcheck_p_threshold"),
                      min_effect=config.getoption("gapcheck_min_effect"), engine=config.getoption("gapcheck_engine"),
                      fail_underpowered=config.getoption("gapcheck_fail_underpowered"))

"""The pytest plugin, run in a fresh pytest with ``pytester`` (the plugin loads through its pytest11 entry point)."""
from __future__ import annotations

import pytest

# pytester restores sys.modules after each test; importing pandas' Arrow types once here keeps pyarrow from
# seeing them registered twice when a later test writes parquet.
from pandas.core.arrays.arrow import extension_types  # noqa: F401

from tests.data.conftest import shifted_tables

pytest_plugins = ["pytester"]


@pytest.fixture
def tables(tmp_path):
    return shifted_tables(tmp_path, rows=4_000)


def test_marked_tests_are_skipped_without_the_option(pytester, tables):
    pytester.makepyfile(test_data="""
        import pytest

        @pytest.mark.data_check
        def test_drift(gapcheck_data):
            raise AssertionError("must not run")
    """)
    result = pytester.runpytest_subprocess("-q")
    result.assert_outcomes(skipped=1)


def test_drift_assertion_shows_the_findings_table(pytester, tables):
    reference, current = tables
    pytester.makepyfile(test_data=f"""
        import pytest

        @pytest.mark.data_check
        def test_drift(gapcheck_data):
            assert gapcheck_data.p_threshold == 0.001
            gapcheck_data.assert_no_drift({str(reference)!r}, {str(current)!r})

        @pytest.mark.data_check
        def test_same(gapcheck_data):
            gapcheck_data.assert_no_drift({str(reference)!r}, {str(reference)!r})
    """)
    result = pytester.runpytest_subprocess("-q", "--check-data-drift", "--p-threshold=0.001")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*data drift: 1 of 4 feature(s) drifted: x1*", "*gap*drift*x1 shifted*"])
    assert "pytest_plugin.py" not in result.stdout.str()  # the failure points at the test, not gapcheck's frames


def test_gapcheck_spellings_and_leakage_helper(pytester, photo_splits):
    pytester.makepyfile(test_data=f"""
        import pytest
        from gapcheck.data.pytest_plugin import assert_no_leakage

        @pytest.mark.data_check
        def test_clean():
            assert_no_leakage("train={photo_splits['train']}", "val={photo_splits['clean_val']}")

        @pytest.mark.data_check
        def test_leaky(gapcheck_data):
            gapcheck_data.assert_no_leakage("train={photo_splits['train']}", "val={photo_splits['leaky_val']}")
    """)
    result = pytester.runpytest_subprocess("-q", "--gapcheck-check-data-drift", "--gapcheck-p-threshold=0.05")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*exact_duplicate*astronaut_copy.png*"])


def test_plugin_imports_nothing_heavy_at_startup(pytester):
    pytester.makepyfile(test_light="""
        import sys

        def test_modules():
            heavy = [m for m in ("torch", "numpy", "pandas", "scipy", "ray", "PIL") if m in sys.modules]
            assert "gapcheck.data.pytest_plugin" in sys.modules
            assert heavy == [], heavy
    """)
    result = pytester.runpytest_subprocess("-q", "-p", "no:xdist", "-p", "no:hypothesispytest", "-p", "no:anyio")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize("option", ["--gapcheck-min-effect=nan", "--gapcheck-min-effect=inf", "--gapcheck-min-effect=-1",
                                    "--p-threshold=nan", "--p-threshold nan", "--gapcheck-p-threshold=0",
                                    "--p-threshold=1.5", "--p-threshold=-0.1", "--gapcheck-min-effect=1e309"])
def test_nonsense_thresholds_are_a_usage_error_before_any_test(pytester, option):
    pytester.makepyfile(test_data="""
        def test_never():
            raise AssertionError("must not run")
    """)
    result = pytester.runpytest_subprocess("-q", "-p", "no:xdist", *option.split())
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*must be a*"])

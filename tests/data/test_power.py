"""Statistical power per drift feature: the smallest effect each test can call significant at the p-threshold and
sample sizes, ``drift_underpowered`` (info) where it exceeds the minimum effect, and the pytest plugin failing on it
only when asked. A 20-row split against a powered one."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from gapcheck.data.api import drift
from gapcheck.data.drift import DriftOptions, min_detectable_d, min_detectable_v
from gapcheck.engines import open_engine
from tests.data.conftest import validate

pytest_plugins = ["pytester"]


def _tables(root, rows: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    paths = []
    for name in ("reference", "current"):
        frame = pd.DataFrame({"x": rng.normal(size=rows), "colour": rng.choice(list("rgb"), rows)})
        frame.to_parquet(root / f"{name}_{rows}.parquet")
        paths.append(str(root / f"{name}_{rows}.parquet"))
    return paths


def test_critical_values_match_the_tests_they_describe():
    d = min_detectable_d(2_000, 3_000, 0.01)
    assert d == pytest.approx(math.sqrt(-math.log(0.005) / 2) * math.sqrt(5_000 / 6e6))
    # two samples whose KS D is just that large are significant at about the threshold (asymptotic p)
    n, m = 2_000, 3_000
    p = stats.kstwobign.sf(d * math.sqrt(n * m / (n + m)))
    assert p == pytest.approx(0.01, rel=0.02)
    v = min_detectable_v(40, 3, 0.01)
    assert v == pytest.approx(math.sqrt(stats.chi2.ppf(0.99, 2) / 40))
    assert min_detectable_d(0, 10, 0.01) is None and min_detectable_v(10, 1, 0.01) is None
    assert min_detectable_d(1, 1, 0.01) == 1.0  # capped: nothing short of total separation


def test_a_20_row_split_is_underpowered_and_a_powered_one_is_not(tmp_path):
    with open_engine("serial") as engine:
        small = drift(*_tables(tmp_path, 20), engine=engine)
        large = drift(*_tables(tmp_path, 20_000), engine=engine)
    validate(small)
    weak = [f for f in small.findings if f.code == "drift_underpowered"]
    assert small.verdict.value == "pass" and len(weak) == 3 and not any(f.is_gap for f in weak)  # ks, chi2, nulls
    assert sorted(f.evidence["test"] for f in weak) == ["chi2", "ks", "null_rate"]
    ks = next(f for f in weak if f.evidence["test"] == "ks")
    assert ks.evidence["n_reference"] == ks.evidence["n_current"] == 20
    assert ks.evidence["min_detectable_effect"]["x"] == pytest.approx(min_detectable_d(20, 20, 0.01), abs=1e-6)
    assert ks.evidence["min_detectable_effect"]["x"] > 0.5  # a 20-row split sees only huge shifts
    assert "too few rows" in small.headline
    by_name = {f.feature: f for f in small.features}
    assert by_name["x"].underpowered and by_name["colour"].underpowered
    assert large.findings == () and not any(f.underpowered for f in large.features)
    assert {f.feature: f.min_detectable_effect < 0.02 for f in large.features} == {"x": True, "colour": True}


def test_fail_underpowered_turns_the_info_into_a_gap(tmp_path):
    with open_engine("serial") as engine:
        result = drift(*_tables(tmp_path, 20), DriftOptions(fail_underpowered=True), engine=engine)
    assert result.verdict.value == "gap" and all(f.is_gap for f in result.findings)


def test_a_drifted_feature_is_not_also_underpowered(tmp_path):
    rng = np.random.default_rng(3)
    pd.DataFrame({"x": rng.normal(size=60)}).to_parquet(tmp_path / "r.parquet")
    pd.DataFrame({"x": rng.normal(size=60) + 3}).to_parquet(tmp_path / "c.parquet")
    with open_engine("serial") as engine:
        result = drift(str(tmp_path / "r.parquet"), str(tmp_path / "c.parquet"), engine=engine)
    assert [f.code for f in result.findings] == ["drift_underpowered", "drift"]
    assert result.findings[0].evidence["test"] == "null_rate"  # 60 rows: the missing-values test is the weak one
    assert not result.features[0].underpowered  # the KS test found the shift: not called underpowered


def test_the_missing_values_test_states_its_power(tmp_path):
    """The smallest change of the missing rate the z-test can see: what null_shift_p calls significant."""
    from types import SimpleNamespace

    from gapcheck.data.drift import min_detectable_null_shift, null_shift_p

    for rate, n, m in ((0.3, 300, 300), (0.9, 1_000, 50), (0.1, 5_000, 80)):  # the z-test's regime
        delta = min_detectable_null_shift(rate, n, m, 0.01)
        current = rate + delta if rate <= 0.5 else rate - delta
        p = null_shift_p(SimpleNamespace(rows=n, nulls=rate * n), SimpleNamespace(rows=m, nulls=current * m))
        assert p == pytest.approx(0.01, rel=1e-3)
    for n, m in ((20, 20), (549, 20), (300, 300)):  # few expected missing values: Fisher's exact test, whole rows
        delta = min_detectable_null_shift(0.0, n, m, 0.01)
        k = round(delta * m)
        assert delta == pytest.approx(k / m)
        assert null_shift_p(SimpleNamespace(rows=n, nulls=0), SimpleNamespace(rows=m, nulls=k)) < 0.01
        assert null_shift_p(SimpleNamespace(rows=n, nulls=0), SimpleNamespace(rows=m, nulls=k - 1)) >= 0.01
    assert min_detectable_null_shift(0.0, 20, 20, 0.01) == pytest.approx(0.35)  # 7 of 20 (the z-test said 0.285)
    assert min_detectable_null_shift(0.0, 1, 1, 0.01) == 1.0 and min_detectable_null_shift(0.0, 0, 5, 0.01) is None
    rng = np.random.default_rng(5)
    for rows in (20, 20_000):
        for name in ("r", "c"):
            x = rng.normal(size=rows)
            x[rng.random(rows) < 0.2] = np.nan  # a fifth missing on both sides: no shift, only the power differs
            pd.DataFrame({"x": x}).to_parquet(tmp_path / f"{name}{rows}.parquet")
    with open_engine("serial") as engine:
        small = drift(str(tmp_path / "r20.parquet"), str(tmp_path / "c20.parquet"), engine=engine)
        large = drift(str(tmp_path / "r20000.parquet"), str(tmp_path / "c20000.parquet"), engine=engine)
        strict = drift(str(tmp_path / "r20.parquet"), str(tmp_path / "c20.parquet"),
                       DriftOptions(fail_underpowered=True), engine=engine)
    nulls = [f for f in small.findings if f.code == "drift_underpowered" and f.evidence["test"] == "null_rate"]
    assert len(nulls) == 1 and nulls[0].evidence["min_detectable_effect"]["x"] > 0.3 and not nulls[0].is_gap
    assert "missing-values test" in nulls[0].message and "missing_values_shift" not in [f.code for f in small.findings]
    assert not [f for f in large.findings if f.code == "drift_underpowered"]
    assert any(f.is_gap and f.evidence["test"] == "null_rate" for f in strict.findings)


def test_pytest_plugin_fails_on_underpowered_only_when_asked(pytester, tmp_path):
    reference, current = _tables(tmp_path, 20)
    pytester.makepyfile(test_data=f"""
        import pytest

        @pytest.mark.data_check
        def test_small(gapcheck_data):
            gapcheck_data.assert_no_drift({reference!r}, {current!r})
    """)
    quiet = pytester.runpytest_subprocess("-q", "-p", "no:xdist", "--check-data-drift")
    quiet.assert_outcomes(passed=1)
    strict = pytester.runpytest_subprocess("-q", "-p", "no:xdist", "--check-data-drift", "--gapcheck-fail-underpowered")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(["*drift_underpowered*"])


def test_one_missing_value_in_a_20_row_split_is_no_missing_values_shift(tmp_path):
    """New-user review: breast_cancer split 549/20, one NaN in the 20-row side: the z-test's p ≈ 1e-6 made it a
    ``missing_values_shift`` gap (exit 1); Fisher's exact p is 0.035. Three NaNs (15%, exact p ≈ 4e-5) are one."""
    from sklearn.datasets import load_breast_cancer

    from gapcheck.data.drift import null_shift_p

    frame = load_breast_cancer(as_frame=True).frame
    frame.columns = [c.replace(" ", "_") for c in frame.columns]
    picked = np.random.default_rng(0).permutation(len(frame))  # a random split: no drift to find
    reference, current = frame.iloc[picked[20:]], frame.iloc[picked[:20]].copy()
    reference.to_parquet(tmp_path / "r.parquet")
    results = []
    for missing in (1, 3):
        current["mean_radius"] = frame["mean_radius"].iloc[picked[:20]].to_numpy()
        current.iloc[:missing, current.columns.get_loc("mean_radius")] = np.nan
        current.to_parquet(tmp_path / f"c{missing}.parquet")
        with open_engine("serial") as engine:
            results.append(drift(str(tmp_path / "r.parquet"), str(tmp_path / f"c{missing}.parquet"), engine=engine))
    one, three = ([f.code for f in r.findings] for r in results)
    assert "missing_values_shift" not in one and results[0].verdict.value == "pass"
    assert "missing_values_shift" in three and results[1].verdict.value == "gap"
    from types import SimpleNamespace
    p = null_shift_p(SimpleNamespace(rows=549, nulls=0), SimpleNamespace(rows=20, nulls=1))
    assert p == pytest.approx(20 / 569, rel=1e-6)  # hypergeometric: the one missing row lands in the 20 by chance

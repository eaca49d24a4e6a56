"""±inf values are counted and compared, never dropped unsaid (attacker D6).

40% of the current split's values turned +inf gave exit 0: the KS test ran on the finite 60% (n_current 1199 of
2000), the missing-values column said 0.0%, nothing was listed; a column entirely ±inf was an "all-NaN column".
Now the ±inf share is compared like the missing values (``infinite_values_shift``, a gap), a steady share is said
(``infinite_values``, info, with the counts set aside), and an all-infinite column is bad input said as such."""
from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn import datasets

from gapcheck.cli.app import main
from gapcheck.data.api import drift
from gapcheck.engines import open_engine
from tests.data.conftest import validate


@pytest.fixture(scope="module")
def serial():
    with open_engine("serial") as engine:
        yield engine


def _cancer_halves(folder, current_inf: float, reference_inf: float = 0.0, fmt: str = "csv"):
    """breast_cancer shuffled and halved (no shift), with a share of ``mean radius`` set to +inf per side."""
    table = datasets.load_breast_cancer(as_frame=True).frame.sample(frac=1.0, random_state=0)
    table = table[["mean radius", "mean texture", "mean area"]].reset_index(drop=True)
    half = len(table) // 2
    paths = []
    for name, part, share in (("ref", table.iloc[:half].copy(), reference_inf),
                              ("cur", table.iloc[half:].copy(), current_inf)):
        part.iloc[: round(share * len(part)), 0] = np.inf
        path = folder / f"{name}.{fmt}"
        part.to_csv(path, index=False) if fmt == "csv" else part.to_parquet(path)
        paths.append(str(path))
    return paths


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_rise_of_infinite_values_is_a_gap_with_the_counts(tmp_path, serial, fmt):
    reference, current = _cancer_halves(tmp_path, current_inf=0.4, fmt=fmt)
    result = drift(reference, current, engine=serial)
    validate(result)
    (shift,) = [f for f in result.findings if f.code == "infinite_values_shift"]
    assert shift.is_gap and shift.subject.output == "mean radius"
    radius = next(f for f in result.features if f.feature == "mean radius")
    assert radius.infinite_reference == 0 and radius.infinite_current == 114 and radius.n_current == 285 - 114
    assert shift.evidence["infinite_current"] == 114 and "set aside" in shift.message
    report = tmp_path / "drift.json"
    assert main(["drift", "--reference", reference, "--current", current, "--engine", "serial",
                 "--json", str(report)]) == 1
    feature = json.loads(report.read_text())["features"][0]
    assert feature["infinite_current"] == 114 and feature["infinite_rate_current"] == pytest.approx(0.4, abs=0.01)
    table = next(v for v in result.views() if getattr(v, "title", "") == "Drift per feature")
    assert "±inf 0.0% → 40.0%" in table.rows[0][-2]


def test_a_steady_share_of_infinities_is_said_not_a_gap(tmp_path, serial):
    reference, current = _cancer_halves(tmp_path, current_inf=0.02, reference_inf=0.02)
    result = drift(reference, current, engine=serial)
    (said,) = [f for f in result.findings if f.code.startswith("infinite_values")]
    assert said.code == "infinite_values" and not said.is_gap and "6 of 284 reference" in said.message
    assert said.subject.output == "mean radius"
    assert not any(f.is_gap for f in result.findings)


def test_an_all_infinite_column_is_said_as_such(tmp_path, serial):
    reference, current = _cancer_halves(tmp_path, current_inf=1.0)
    result = drift(reference, current, engine=serial)
    reasons = dict(result.bad_items)
    assert "all-infinite column" in reasons["current:mean radius"] and "NaN" not in reasons["current:mean radius"]
    assert any(f.code == "infinite_values_shift" for f in result.findings)
    assert main(["drift", "--reference", reference, "--current", current, "--engine", "serial"]) == 1

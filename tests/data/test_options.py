"""The data checks' option values refuse what would switch a check off (NaN, inf, negatives), wherever they come
from: the CLI, a config file, the pytest plugin or a Python call all build these dataclasses."""
from __future__ import annotations

import math

import pytest

from gapcheck.data.drift import DriftOptions
from gapcheck.errors import UsageError

BAD = [math.nan, math.inf, -math.inf, -1.0, 1e309]


@pytest.mark.parametrize("value", BAD)
@pytest.mark.parametrize("name", ["p_threshold", "min_effect", "min_null_shift"])
def test_drift_options_refuse_nonsense(name, value):
    with pytest.raises(UsageError) as caught:
        DriftOptions(**{name: value})
    assert caught.value.parameter == name


def test_drift_options_bounds():
    for bad in ({"p_threshold": 0.0}, {"p_threshold": 1.0}, {"min_null_shift": 1.5}, {"sample_size": 1}):
        with pytest.raises(UsageError):
            DriftOptions(**bad)
    assert DriftOptions(p_threshold=0.5, min_effect=0.0, min_null_shift=0.0).min_effect == 0.0

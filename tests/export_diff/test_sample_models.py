"""Every planted gap is found and attributed to the right module; clean models pass at default tolerances."""
from __future__ import annotations

import pytest

from gapcheck.export_diff.api import ExportDiffRequest, run_export_diff
from gapcheck.export_diff.result import FAIL, PASS
from sample_models.catalog import CASES


def _run(case, **extra):
    return run_export_diff(ExportDiffRequest(factory=case.factory, input_specs=case.inputs, **{**case.options, **extra}))


@pytest.fixture(scope="module", params=CASES, ids=[c.name for c in CASES])
def case_result(request):
    return request.param, _run(request.param)


def test_expected_codes_and_verdict(case_result):
    case, result = case_result
    gap_codes = {f.code for f in result.findings if f.is_gap}
    assert set(case.warnings) <= {f.code for f in result.findings if f.severity.value == "warning"}
    if not case.expected_codes:
        assert result.verdict == "pass", [f.message for f in result.findings]
        assert not gap_codes
        assert all(layer.status != FAIL for layer in result.layers)
        assert all(o.status == PASS for o in result.outputs)
        assert result.first_divergence is None
        return
    assert result.verdict == "gap"
    assert set(case.expected_codes) <= {f.code for f in result.findings}, [f.code for f in result.findings]


def test_attribution(case_result):
    case, result = case_result
    if case.expected_module is None:
        # Clean models, and gaps that belong to the export as a whole (a baked batch size), name no module.
        assert result.first_divergence is None
        for code in case.expected_codes:
            assert all(f.where.startswith(("export", "batch=")) for f in result.findings if f.code == code)
        return
    if case.expected_cause is None:  # a finding that names modules, not a divergence
        finding = next(f for f in result.findings if f.code == case.expected_codes[0])
        assert case.expected_module in finding.where
        return
    fd = result.first_divergence
    assert fd is not None
    assert fd.module == case.expected_module
    assert fd.cause == case.expected_cause
    assert fd.source and ":" in fd.source
    assert case.expected_module in result.headline


def test_inputs_hashed_per_backend(case_result):
    case, result = case_result
    assert result.inputs
    for record in result.inputs:
        assert set(record.sha256) >= {"torch", "onnxruntime"}
        assert len(set(record.sha256.values())) == 1  # fed the same bytes
        assert all(len(h) == 64 for h in record.sha256.values())

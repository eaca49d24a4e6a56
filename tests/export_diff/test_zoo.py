"""Real architectures with seeded weights (sample_models/zoo.py): every clean model passes at default tolerances.

The small ones run in CI; the rest (resnet50, vit_b_16, swin_t, ...) are marked slow: `pytest -m slow`,
or `scripts/zoo.py` for the table with wall time and peak RSS. An exporter that cannot export a model
must say so as an ExportError (exit 2), never as a gap.
"""
from __future__ import annotations

import pytest

from gapcheck.errors import ExitCode, ExportError, exit_code_for
from gapcheck.export_diff.api import ExportDiffRequest, run_export_diff
from gapcheck.export_diff.result import FAIL, NO_ONNX, PASS
from gapcheck.model.factory import resolve_callable
from gapcheck.model.fit import check_fit
from sample_models.zoo import ZOO


def _cases():
    for model in ZOO:
        for exporter in ("dynamo", "torchscript"):
            marks = () if model.small else (pytest.mark.slow,)
            yield pytest.param(model, exporter, id=f"{model.name}-{exporter}", marks=marks)


@pytest.mark.parametrize(("model", "exporter"), list(_cases()))
def test_zoo_model(model, exporter):
    request = ExportDiffRequest(factory=model.factory, input_specs=model.inputs, exporter=exporter, no_cache=True,
                                **model.options)
    if exporter in model.unexportable:
        with pytest.raises(ExportError) as info:
            run_export_diff(request)
        assert exit_code_for(info.value) == ExitCode.USAGE
        assert "\n" not in info.value.message and len(info.value.message) < 1200  # condensed, not a traceback
        return
    result = run_export_diff(request)
    gaps = [f"{f.code}: {f.message}" for f in result.findings if f.is_gap]
    assert result.verdict == "pass", gaps
    assert not [layer.module for layer in result.layers if layer.status == FAIL]
    assert result.outputs and all(o.status == PASS for o in result.outputs)
    if model.outputs:  # compared under the model's own keys
        assert tuple(dict.fromkeys(o.name for o in result.outputs)) == model.outputs
    mapped = sum(1 for layer in result.layers if layer.status != NO_ONNX)
    assert mapped >= len(result.layers) // 2, f"only {mapped} of {len(result.layers)} modules mapped"
    # The same graph handed back as a file from elsewhere fits the model: no false onnx_model_mismatch.
    module = resolve_callable(model.factory)()
    fit = check_fit(result.onnx_model, module, len(result.outputs))
    assert fit.fits, fit.evidence


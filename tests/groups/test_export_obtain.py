"""ExportSpec.obtain is the one export path: export-diff's library call goes through it (one cache key, one cache,
one run-once input check with the same messages)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from gapcheck.errors import InputError, UsageError
from gapcheck.export_diff.runner import ExportOptions, export_diff
from gapcheck.groups.export import ExportSpec, output_names
from gapcheck.model.cache import ExportCache


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(4, 2)

    def forward(self, x, gain):
        return {"logits": self.fc(x) * gain}


def _sample():
    return {"x": np.ones((1, 4), np.float32), "gain": np.array(2.0, np.float32)}  # gain: a 0-d input


def test_export_diff_and_obtain_share_one_cache_entry(tmp_path, monkeypatch):
    import gapcheck.model.export as model_export

    exports = []
    real = model_export.export_onnx
    monkeypatch.setattr(model_export, "export_onnx", lambda *a, **k: exports.append(1) or real(*a, **k))
    module, sample = Scaled().eval(), _sample()
    cache = ExportCache(tmp_path)
    result = export_diff(module, [sample], export=ExportOptions(exporter="torchscript", cache=cache))
    assert result.verdict == "pass" and exports == [1]
    hit, names = ExportSpec(exporter="torchscript").obtain(module, sample, cache=cache)  # golden record's call
    assert exports == [1] and names == ["logits"]  # served from the entry export-diff stored
    assert onnx.helper.printable_graph(hit.model.graph) == onnx.helper.printable_graph(result.onnx_model.graph)
    export_diff(module, [sample], export=ExportOptions(exporter="torchscript", cache=cache))
    assert exports == [1]


def test_the_input_check_keeps_a_scalar_input_0_d_and_names_what_is_wrong():
    module = Scaled().eval()
    assert output_names(module, _sample()) == ["logits"]
    with pytest.raises(InputError, match=r"does not accept the given inputs \(x:1x3:float32, gain::float32\)"):
        output_names(module, {"x": np.ones((1, 3), np.float32), "gain": np.array(2.0, np.float32)})
    exported = ExportSpec(exporter="torchscript").obtain(module, _sample())[0].model
    with pytest.raises(InputError, match="the ONNX file also needs inputs gain"):
        export_diff(module, [{"x": np.ones((1, 4), np.float32)}], onnx_model=exported)


class NoTensor(nn.Module):
    def forward(self, x):
        return None


def test_a_model_returning_no_tensor_is_a_usage_error_on_every_path():
    sample = {"x": np.ones((1, 4), np.float32)}
    with pytest.raises(UsageError, match=r"returns no tensor \(it returns NoneType\)"):
        ExportSpec(no_cache=True).obtain(NoTensor(), sample)
    with pytest.raises(UsageError, match=r"returns no tensor \(it returns NoneType\)"):
        export_diff(NoTensor(), [sample])

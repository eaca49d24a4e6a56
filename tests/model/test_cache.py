"""Export cache: a repeated run skips the export; anything the export depends on changes the key."""
from __future__ import annotations

import torch

from gapcheck.export_diff.api import ExportDiffRequest, run_export_diff
from gapcheck.model import cache as cache_module
from gapcheck.model.cache import ExportCache, default_cache_dir, export_key
from sample_models.cnn import build_small_resnet

SAMPLE = {"x": torch.zeros(1, 3, 32, 32).numpy()}


def _key(module, **overrides):
    options = {"exporter": "dynamo", "opset": None} | overrides
    return export_key(module, SAMPLE, **options)


def test_key_follows_weights_inputs_exporter_and_opset():
    module = build_small_resnet()
    base = _key(module)
    assert base == _key(build_small_resnet())  # same code, same seeded weights
    changed = build_small_resnet()
    with torch.no_grad():
        changed.fc.weight[0, 0] += 1e-3
    assert _key(changed) != base
    assert _key(module, exporter="torchscript") != base
    assert _key(module, opset=18) != base
    assert export_key(module, {"x": torch.zeros(2, 3, 32, 32).numpy()}, exporter="dynamo", opset=None) != base


def test_a_repeated_run_takes_the_export_from_the_cache(tmp_path, monkeypatch):
    calls = []
    real = cache_module.store

    def counting_store(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(cache_module, "store", counting_store)
    request = ExportDiffRequest(factory="sample_models.cnn:build_small_resnet", input_specs=("x:1x3x32x32:float32",),
                                cache_dir=tmp_path)
    first = run_export_diff(request)
    second = run_export_diff(request)
    assert len(calls) == 1 and len(list(tmp_path.glob("*.onnx"))) == 1
    assert first.verdict == second.verdict == "pass"
    assert first.timings["export_s"] > 0 and second.timings["export_s"] == 0
    assert [(x.module, x.status) for x in first.layers] == [(x.module, x.status) for x in second.layers]
    uncached = run_export_diff(ExportDiffRequest(factory=request.factory, input_specs=request.input_specs,
                                                 cache_dir=tmp_path / "unused", no_cache=True))
    assert uncached.timings["export_s"] > 0 and not (tmp_path / "unused").exists()


def test_a_corrupt_entry_is_a_miss(tmp_path):
    cache = ExportCache(tmp_path)
    (tmp_path / "abc.onnx").write_bytes(b"not onnx")
    (tmp_path / "abc.json").write_text("{}")
    assert cache.load("abc") is None


def test_default_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("GAPCHECK_CACHE_DIR", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("GAPCHECK_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert default_cache_dir() == tmp_path / "x" / "gapcheck" / "exports"


def test_a_dynamic_sequence_axis_changes_the_key_and_a_refusal_falls_back_to_a_fixed_axis(monkeypatch):
    """--pad-check exports with a dynamic sequence axis; when the exporter refuses it, the fixed-axis export is used
    and a note says why (the padding check then reports the other lengths as not checked on ONNX Runtime)."""
    import numpy as np
    import torch

    from gapcheck.errors import ExportError
    from gapcheck.model import export as export_module
    from gapcheck.model.cache import export_key

    module = torch.nn.Embedding(10, 4)
    sample = {"ids": np.ones((1, 6), dtype=np.int64)}
    plain = export_key(module, sample, exporter="dynamo", opset=None)
    assert export_key(module, sample, exporter="dynamo", opset=None, sequence_inputs=("ids",)) != plain
    assert export_key(module, sample, exporter="dynamo", opset=None, sequence_inputs=()) == plain  # old keys hold

    real = export_module._export

    def refuse_sequence(*args, sequence=(), **kwargs):
        if sequence:
            raise ExportError("Constraints violated (sequence)!")
        return real(*args, **kwargs)

    monkeypatch.setattr(export_module, "_export", refuse_sequence)
    result = export_module.export_onnx(module, sample, exporter="torchscript", sequence_inputs=("ids",))
    assert any("the sequence axis of ids stays fixed: Constraints violated" in w for w in result.warnings)

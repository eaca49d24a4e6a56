"""export_diff() in the library: localization (local vs inherited), memory chunking, batch and FP16 checks."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper
from torch import nn

from gapcheck.errors import InputError, UsageError
from gapcheck.export_diff.runner import export_diff
from gapcheck.inputs import InputSpec, random_samples
from gapcheck.model.export import export_onnx
from sample_models.cnn import build_small_resnet


class Doubler(nn.Module):
    """fc1 -> a functional op outside any module (x * 2) -> fc2: errors there are inherited by fc2."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = nn.Linear(6, 6)
        self.fc2 = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.fc1(x) * 2.0)


def _samples(shape, n=2):
    return random_samples([InputSpec("x", shape, "float32")], n, seed=3)


def _tamper(model: onnx.ModelProto, predicate, scale) -> onnx.ModelProto:
    """Change one constant in the graph the way a wrong export would (a slightly different number)."""
    tampered = onnx.ModelProto()
    tampered.CopyFrom(model)
    for init in tampered.graph.initializer:
        if predicate(init.name):
            values = numpy_helper.to_array(init)
            init.CopyFrom(numpy_helper.from_array((values * scale).astype(values.dtype), init.name))
            return tampered
    for node in tampered.graph.node:
        if node.op_type == "Constant" and predicate(node.output[0]):
            value = numpy_helper.to_array(node.attribute[0].t)
            node.attribute[0].t.CopyFrom(numpy_helper.from_array(value * scale))
            return tampered
    raise AssertionError("nothing to tamper with")


def test_local_error_is_attributed_to_the_module_that_introduces_it():
    module = Doubler().eval()
    samples = _samples((1, 6))
    exported = export_onnx(module, samples[0]).model
    weight_of_fc1 = next(i.name for i in exported.graph.initializer if "fc1" in i.name and "weight" in i.name)
    result = export_diff(module, samples, onnx_model=_tamper(exported, lambda n: n == weight_of_fc1, 1.01))
    assert result.verdict == "gap"
    fd = result.first_divergence
    assert fd.module == "fc1" and fd.cause == "local"
    assert fd.local_max_abs > 0


def test_error_from_an_op_between_modules_is_inherited_and_traced_to_its_line():
    module = Doubler().eval()
    samples = _samples((1, 6))
    exported = export_onnx(module, samples[0]).model
    mul = next(n for n in exported.graph.node if n.op_type == "Mul")
    scalar = next(name for name in mul.input if not name.startswith(("linear", "fc")) and "fc1" not in name)
    result = export_diff(module, samples, onnx_model=_tamper(exported, lambda n: n == scalar, 1.01))
    fd = result.first_divergence
    assert [layer.module for layer in result.layers if layer.status == "fail"][0] == "fc2"
    assert fd.module == "fc2" and fd.cause == "inherited"
    assert fd.input_max_abs > 0 and fd.amplification is not None
    assert fd.source.endswith("test_runner.py:" + str(Doubler.forward.__code__.co_firstlineno + 1))


def test_marked_values_split_into_several_runs_give_the_same_result():
    module = build_small_resnet()
    samples = _samples((1, 3, 32, 32), n=1)
    exported = export_onnx(module, samples[0]).model
    whole = export_diff(module, samples, onnx_model=exported)
    split = export_diff(module, samples, onnx_model=exported, max_intermediate_bytes=4096)
    assert whole.verdict == split.verdict == "pass"
    assert whole.timings["ort_runs_per_sample"] == 1 and split.timings["ort_runs_per_sample"] > 5
    assert [(x.module, x.status) for x in whole.layers] == [(x.module, x.status) for x in split.layers]
    for a, b in zip(whole.layers, split.layers, strict=True):
        if a.stats:  # ORT optimizes each split graph on its own: the same values up to float reordering
            assert abs(a.stats.max_abs - b.stats.max_abs) < 1e-5


def test_clean_model_is_batch_consistent_and_passes_in_fp16():
    module = build_small_resnet()
    samples = _samples((1, 3, 32, 32), n=3)
    batched = export_diff(module, samples[:1], batch_sizes=(1, 3), batch_pool=samples)
    assert batched.verdict == "pass"
    assert {c.batch_size for c in batched.batch_checks} == {1, 3}
    assert all(c.status == "pass" for c in batched.batch_checks)
    fp16 = export_diff(module, samples[:2], precision="fp16")
    assert fp16.verdict == "pass", [f.message for f in fp16.findings]
    assert all(layer.stats.atol > 1e-3 for layer in fp16.layers if layer.stats)  # FP16 budget, not FP32's


def test_onnx_file_with_other_input_names_is_an_input_error():
    module = Doubler().eval()
    samples = _samples((1, 6))
    exported = export_onnx(module, samples[0]).model
    renamed = [{"y": s["x"]} for s in samples]
    with pytest.raises(InputError, match="do not match the ONNX graph's inputs"):
        export_diff(module, renamed, onnx_model=exported)


def test_no_samples_is_a_usage_error():
    with pytest.raises(UsageError):
        export_diff(Doubler(), [])


def test_keep_train_mode_compares_a_training_model_as_it_is():
    from sample_models.planted import build_train_mode

    samples = _samples((1, 3, 16, 16))
    kept = export_diff(build_train_mode(), samples, keep_train_mode=True)
    assert "training_mode" in {f.code for f in kept.findings}
    assert "kept in training mode" in next(f.message for f in kept.findings if f.code == "training_mode")
    assert np.isfinite([layer.stats.max_abs for layer in kept.layers if layer.stats]).all()


def test_training_mode_without_mode_dependent_modules_is_not_a_gap():
    module = Doubler().train()  # most factories return Net() as constructed: in training mode
    result = export_diff(module, _samples((1, 6)))
    finding = next(f for f in result.findings if f.code == "training_mode")
    assert finding.severity.value == "info" and result.verdict == "pass"


class HalfPrecisionClient:
    """A deployed backend whose client quietly sends FP16: what it was fed must show in the report."""

    name = "fp16-client"

    def __init__(self, model) -> None:
        from gapcheck.backends.onnxruntime import OnnxRuntimeBackend

        self._runtime = OnnxRuntimeBackend(model, name=self.name)
        self.last_input_fingerprints: dict[str, str] = {}

    def input_specs(self):
        return self._runtime.input_specs()

    def output_specs(self):
        return self._runtime.output_specs()

    def infer(self, feeds):
        from gapcheck.tensors import fingerprint

        sent = {k: v.astype(np.float16) for k, v in feeds.items()}
        self.last_input_fingerprints = {k: fingerprint(v) for k, v in sent.items()}
        return self._runtime.infer({k: v.astype(np.float32) for k, v in sent.items()})


def test_each_backend_reports_what_it_was_fed_and_a_deployment_only_gap_is_named():
    from gapcheck.backends.base import Backend

    module = Doubler().eval()
    samples = _samples((1, 6))
    exported = export_onnx(module, samples[0]).model
    client = HalfPrecisionClient(exported)
    assert isinstance(client, Backend)
    result = export_diff(module, samples, onnx_model=exported, deployed=[client])
    record = result.inputs[0]
    assert record.sha256["torch"] == record.sha256["onnxruntime"] != record.sha256["fp16-client"]
    codes = {f.code for f in result.findings}
    assert "deployment_mismatch" in codes and "output_mismatch" not in codes


class NanTail(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)  # NaN for negative inputs, in torch and in ONNX alike


def test_nan_in_torch_outputs_is_reported_not_silently_matched():
    result = export_diff(NanTail().eval(), _samples((1, 6)))
    assert result.verdict == "pass"
    assert "nonfinite_reference" in {f.code for f in result.findings if f.severity.value == "warning"}


def test_batch_sizes_on_inputs_without_a_batch_axis_fail_before_any_work():
    with pytest.raises(UsageError, match="first axis"):
        export_diff(Doubler(), _samples((6,)), batch_sizes=(1, 2))


# --- ONNX files from elsewhere ------------------------------------------------------------------------------


def _torchscript_file(module, sample, *, folding: bool) -> onnx.ModelProto:
    """What users have: torch.onnx.export(dynamo=False), as written by their own scripts."""
    import io

    buffer = io.BytesIO()
    torch.onnx.export(module, (torch.from_numpy(sample["x"]),), buffer, dynamo=False, input_names=["x"],  # type: ignore[arg-type]
                      output_names=["logits"], do_constant_folding=folding, opset_version=17)
    return onnx.load_from_string(buffer.getvalue())


@pytest.mark.parametrize("folding", [True, False])
def test_torchscript_file_with_a_module_called_twice_fits_the_model(folding):
    module = build_small_resnet()  # BasicBlock calls self.relu twice: the exporter names the second call relu_1
    samples = _samples((1, 3, 32, 32), n=1)
    file = _torchscript_file(module, samples[0], folding=folding)
    assert any("/relu_1/" in n.name for n in file.graph.node)
    result = export_diff(module, samples, onnx_model=file)
    assert result.verdict == "pass", [f.message for f in result.findings]
    assert "onnx_model_mismatch" not in {f.code for f in result.findings}
    relu = next(layer for layer in result.layers if layer.module == "layer1.0.relu")
    assert relu.status == "pass" and "called 2 times" in relu.note


def test_changed_weight_in_a_torchscript_file_is_a_local_divergence_at_the_owning_conv():
    module = build_small_resnet()
    samples = _samples((1, 3, 32, 32), n=1)
    file = _torchscript_file(module, samples[0], folding=True)
    conv = next(n for n in file.graph.node if n.name == "/layer2/layer2.0/conv1/Conv")
    result = export_diff(module, samples, onnx_model=_tamper(file, lambda n: n == conv.input[1], 1.02))
    codes = {f.code for f in result.findings}
    assert "layer_divergence" in codes and "onnx_model_mismatch" not in codes
    fd = result.first_divergence
    assert fd.module == "layer2.0.conv1" and fd.cause == "local", fd
    assert "layer2.0.conv1" in result.headline


def test_graph_without_scopes_is_attributed_by_weights_and_says_so():
    module = Doubler().eval()
    samples = _samples((1, 6))
    stripped = export_onnx(module, samples[0]).model
    for i, node in enumerate(stripped.graph.node):  # what onnxsim / name-stripping tools leave
        node.name = f"n{i}"
        del node.metadata_props[:]
    result = export_diff(module, samples, onnx_model=stripped)
    assert result.verdict == "pass"
    note = next(f for f in result.findings if f.code == "attribution_fallback")
    assert set(note.evidence["attributed_by_weights"]) == {"fc1", "fc2"}
    assert {layer.module: layer.status for layer in result.layers} == {"fc1": "pass", "fc2": "pass"}
    broken = export_diff(module, samples, onnx_model=_tamper(stripped, lambda n: "fc2" in n and "weight" in n, 1.01))
    assert broken.first_divergence.module == "fc2" and broken.first_divergence.cause == "local"


def test_onnx_file_of_another_model_shows_the_evidence():
    samples = _samples((1, 3, 32, 32), n=1)
    other = export_onnx(build_small_resnet(num_classes=7), samples[0]).model
    result = export_diff(build_small_resnet(num_classes=10), samples, onnx_model=other)
    mismatch = next(f for f in result.findings if f.code == "onnx_model_mismatch")
    assert "fc.weight is [7, 16] in the graph, [10, 16] in the model" in mismatch.message
    assert result.first_divergence is None


# --- the caller's model, named outputs, TorchScript models ---------------------------------------------------


def test_the_callers_model_is_handed_back_in_its_own_modes():
    from sample_models.planted import build_train_mode

    module = build_train_mode().train()
    first = next(m for name, m in module.named_modules() if name)
    first.eval()  # a mixed state: one submodule frozen, the rest training
    before = [m.training for m in module.modules()]
    result = export_diff(module, _samples((1, 3, 16, 16)))
    assert [m.training for m in module.modules()] == before
    assert "training_mode" in {f.code for f in result.findings}


class NamedOutputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        from collections import namedtuple

        Pair = namedtuple("Pair", "key value")
        h = self.fc(x)
        return {"logits": h, "past": [Pair(h * 2, h + 1)], "hidden": (torch.tanh(x), torch.relu(h))}


def test_structured_outputs_are_compared_under_their_own_keys():
    result = export_diff(NamedOutputs().eval(), _samples((1, 6)))
    assert result.verdict == "pass", [f.message for f in result.findings]
    assert [o.name for o in result.outputs] == ["logits", "past.0.key", "past.0.value", "hidden.0", "hidden.1"]
    assert [o.name for o in result.onnx_model.graph.output] == [o.name for o in result.outputs]


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        return torch.relu(self.fc(x))


class HoldsScripted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.encoder = torch.jit.script(Encoder())
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        return self.head(self.encoder(x))


def test_torchscript_models_are_compared_where_they_can_be_observed():
    samples = _samples((1, 6))
    scripted = torch.jit.script(Doubler().eval())
    whole = export_diff(scripted, samples)
    assert whole.verdict == "pass" and whole.outputs[0].status == "pass"
    assert "unobservable_modules" in {f.code for f in whole.findings}
    mixed = export_diff(HoldsScripted().eval(), samples)
    assert mixed.verdict == "pass"
    note = next(f for f in mixed.findings if f.code == "unobservable_modules")
    assert "encoder" in note.evidence["unobservable"]
    assert next(layer for layer in mixed.layers if layer.module == "head").status == "pass"


def test_scalar_input_reaches_the_model_as_rank_0():
    class Scaled(nn.Module):
        def forward(self, x, gain):
            return x * gain

    samples = random_samples([InputSpec("x", (1, 4), "float32"), InputSpec("gain", (), "float32")], 2, seed=0)
    result = export_diff(Scaled().eval(), samples)
    assert result.verdict == "pass"
    assert {r.name: r.shape for r in result.inputs}["gain"] == ()


class Loud(nn.Module):
    """Activations in the thousands: fp32 rounding alone moves them by more than the fixed atol 1e-4."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = nn.Linear(64, 64)
        self.fc2 = nn.Linear(64, 8)
        with torch.no_grad():
            self.fc1.weight.mul_(300.0)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def test_layer_budget_widens_with_the_fp32_noise_floor_and_a_1_percent_weight_change_is_still_found():
    from gapcheck.compare import NOISE_FACTOR

    module = Loud().eval()
    samples = _samples((4, 64), n=2)
    exported = export_onnx(module, samples[0]).model
    assert export_diff(module, samples, onnx_model=exported).verdict == "pass"
    # fc1's weights each ~3e-6 off (ONNX Runtime and torch agree bit for bit here; make them differ by rounding, as
    # another kernel's order of sums would): |err| ~2e-3 on values ~500, over the fixed atol 1e-4 where a value is
    # near 0, inside 10x the fp32 noise
    fc1_weight = next(i.name for i in exported.graph.initializer if "fc1" in i.name and "weight" in i.name)
    jitter = 1 + 3e-6 * np.random.default_rng(0).standard_normal(tuple(module.fc1.weight.shape))
    rounded = export_diff(module, samples, onnx_model=_tamper(exported, lambda n: n == fc1_weight, jitter))
    assert rounded.verdict == "pass", [f.message for f in rounded.findings]
    fc1 = next(x for x in rounded.layers if x.module == "fc1")
    assert fc1.stats.max_abs > 1e-4 and fc1.noise_floor is not None  # the budget came from measured noise
    assert fc1.stats.atol == NOISE_FACTOR * fc1.noise_floor > 1e-4
    weight = next(i.name for i in exported.graph.initializer if "fc2" in i.name and "weight" in i.name)
    broken = export_diff(module, samples, onnx_model=_tamper(exported, lambda n: n == weight, 1.01))
    assert broken.first_divergence.module == "fc2" and broken.first_divergence.cause == "local"


def test_with_a_deployment_the_model_is_exported_once_and_its_training_mode_still_reported(monkeypatch):
    """The audit needs the export too: it is made once, in eval mode, and the caller's mode survives."""
    from types import SimpleNamespace

    import gapcheck.backends.triton as triton_backend
    import gapcheck.model.export as model_export
    import gapcheck.triton.audit as audit
    from gapcheck.backends.onnxruntime import OnnxRuntimeBackend
    from gapcheck.export_diff.api import DeploymentTarget, ExportDiffRequest, run_export_diff

    exports, audited = [], []
    real_export = model_export.export_onnx

    def counting_export(module, *args, **kwargs):
        exports.append(module.training)
        return real_export(module, *args, **kwargs)

    class ServedByOrt(OnnxRuntimeBackend):  # the served model, run locally: a context manager as TritonBackend is
        def __init__(self, endpoint, model, version=None, output_map=None, input_map=None, not_served=()):
            super().__init__(audited[0], name="triton")
            self.not_served = frozenset(not_served)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def fake_audit(endpoint, model, *, onnx_model, version=None, torch_module=None):
        audited.append(onnx_model)
        return SimpleNamespace(findings=(), served=None, onnx_outputs=(), onnx_inputs=(), model=model,
                               input_map={})

    monkeypatch.setattr(model_export, "export_onnx", counting_export)  # ExportSpec.obtain's: the one export path
    monkeypatch.setattr(audit, "audit_deployment", fake_audit)
    monkeypatch.setattr(triton_backend, "TritonBackend", ServedByOrt)
    from sample_models.planted import build_train_mode

    module = build_train_mode().train()
    monkeypatch.setattr("gapcheck.model.loading.load_model",  # what ModelSource.load calls
                        lambda *a, **k: SimpleNamespace(module=module, keys=None,
                                                                        describe_weights=lambda: None))
    request = ExportDiffRequest(factory="unused:unused", input_specs=("x:1x3x16x16:float32",), no_cache=True,
                                deployment=DeploymentTarget(endpoint=None, model="m"))
    result = run_export_diff(request)
    assert exports == [False]  # one export, in eval mode
    assert module.training  # handed back as it came
    codes = {f.code for f in result.findings}
    assert "training_mode" in codes and "layer_divergence" not in codes
    assert {o.backend for o in result.outputs} == {"onnxruntime", "triton"}


def test_a_torchscript_archive_as_checkpoint_is_compared_at_its_outputs(tmp_path):
    from gapcheck.export_diff.api import ExportDiffRequest, run_export_diff

    archive = tmp_path / "doubler.pt"
    torch.jit.save(torch.jit.script(Doubler().eval()), str(archive))
    result = run_export_diff(ExportDiffRequest(checkpoint=archive, input_specs=("x:1x6:float32",), no_cache=True))
    assert result.verdict == "pass", [f.message for f in result.findings]
    assert result.outputs and all(o.status == "pass" for o in result.outputs)
    assert "unobservable_modules" in {f.code for f in result.findings}


def test_an_onnx_dim_of_1e12_without_inputs_is_refused_before_allocating(tmp_path):
    from onnx import TensorProto, helper

    from gapcheck.export_diff.api import ExportDiffRequest, run_export_diff

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "huge",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [10**12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [10**12])])
    path = tmp_path / "huge.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with pytest.raises(UsageError, match="elements, more than the limit"):
        run_export_diff(ExportDiffRequest(factory="sample_models.cnn:build_small_resnet", onnx_file=path, no_cache=True))

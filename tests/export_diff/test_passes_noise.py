"""The float64 noise floor is measured only when a verdict could depend on it (``compare_samples(noise="auto")``).

Every test runs the same model both ways ("auto", the default, and "always", the noise floor on every run as the
tolerances define it) and checks that nothing but the skipped float64 forward differs: a clean model skips it with
the same verdicts; a model where some tensor is near its budget, or fails, gets the very same result as "always".
"""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch

import gapcheck.export_diff.runner as runner
from gapcheck.backends.torch_eager import TorchBackend
from gapcheck.compare import NOISE_CEILING_REL, TolerancePolicy, compare_arrays
from gapcheck.export_diff import passes
from gapcheck.export_diff.passes import noise_can_matter
from gapcheck.inputs import InputSpec, random_samples
from gapcheck.model.export import export_onnx
from sample_models.cnn import build_small_resnet
from sample_models.planted import build_custom_op
from sample_models.transformer import build_transformer
from tests.export_diff.test_runner import Loud, _tamper

FLOORS = (0.0, 1e-12, 1e-9, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-1, 10.0, 1e4)


def test_a_tensor_the_noise_cannot_matter_for_passes_under_every_noise_floor():
    """The rule behind skipping: checked on random tensors of many scales against a wide range of floors."""
    rng = np.random.default_rng(0)
    policy = TolerancePolicy()
    independent = dependent = 0
    for trial in range(400):
        scale = 10.0 ** rng.uniform(-4, 3)
        expected = (rng.standard_normal((4, 33)) * scale).astype(np.float32)
        expected[0, :3] = 0.0  # exact zeros: only atol allows anything there
        error = rng.standard_normal(expected.shape) * 10.0 ** rng.uniform(-9, -2)
        if trial % 3 == 0:
            error *= np.abs(expected)  # relative errors, as a kernel's rounding makes them
        actual = (expected + error).astype(np.float32)
        stats = compare_arrays(actual, expected, policy.for_name("layer", np.float32))
        if noise_can_matter(policy, "layer", np.dtype(np.float32), stats):
            dependent += 1
            continue
        independent += 1
        assert stats.max_abs <= NOISE_CEILING_REL * stats.expected_absmax
        for floor in FLOORS:
            assert compare_arrays(actual, expected, policy.for_name("layer", np.float32, floor)).passed, (trial, floor)
    assert independent > 50 and dependent > 50  # both sides of the rule were exercised


def test_failing_and_exact_comparisons_count_and_tolerances_without_the_floor_do_not():
    policy = TolerancePolicy()
    expected = np.linspace(-1, 1, 20, dtype=np.float32)
    failing = compare_arrays(expected + 1e-3, expected, policy.for_name("m", np.float32))
    assert noise_can_matter(policy, "m", np.dtype(np.float32), failing)  # a floor could widen it into a pass
    expected = np.linspace(-0.5, 0.5, 20, dtype=np.float32)
    close = compare_arrays(expected + 8e-5, expected, policy.for_name("m", np.float32))
    assert close.passed and noise_can_matter(policy, "m", np.dtype(np.float32), close)  # over 1e-4 x max|value|
    explicit = TolerancePolicy(atol=1e-3)
    assert not noise_can_matter(explicit, "m", np.dtype(np.float32), compare_arrays(expected + 5e-5, expected,
                                                                                     explicit.for_name("m")))
    ids = np.arange(5)
    assert not noise_can_matter(policy, "ids", np.dtype(np.int64), compare_arrays(ids, ids, policy.for_name("ids", ids.dtype)))
    assert noise_can_matter(policy, "ids", np.dtype(np.int64), compare_arrays(ids + 1, ids, policy.for_name("ids", ids.dtype)))


@pytest.fixture
def floor_calls(monkeypatch):
    """Counts the float64 forwards (and records the passes over the samples in ``floor_calls.passes``)."""
    calls = _Calls()
    real = TorchBackend.noise_floor
    real_run = passes._run

    def recording_run(setup, progress, noise):
        calls.passes.append(noise)
        return real_run(setup, progress, noise)

    monkeypatch.setattr(passes, "_run", recording_run)

    def counting(self, feeds, reference, modules):
        calls.append(len(modules))
        return real(self, feeds, reference, modules)

    monkeypatch.setattr(TorchBackend, "noise_floor", counting)
    return calls


class _Calls(list):
    def __init__(self) -> None:
        super().__init__()
        self.passes: list[str] = []


def _both(monkeypatch, floor_calls, module, samples, **kwargs):
    """export_diff with noise="auto" and with noise="always"; the float64 forwards each made."""
    results, calls = {}, {}
    for mode in ("auto", "always"):
        monkeypatch.setattr(runner, "compare_samples", partial(passes.compare_samples, noise=mode))
        floor_calls.clear()
        results[mode] = runner.export_diff(module, samples, **kwargs)
        calls[mode] = len(floor_calls)
    return results["auto"], results["always"], calls


def _same_verdicts(auto, always) -> None:
    assert auto.verdict == always.verdict
    assert [(x.module, x.status, x.failing_samples) for x in auto.layers] == \
        [(x.module, x.status, x.failing_samples) for x in always.layers]
    assert [(x.backend, x.name, x.status, x.failing_samples) for x in auto.outputs] == \
        [(x.backend, x.name, x.status, x.failing_samples) for x in always.outputs]
    assert [(f.code, f.where) for f in auto.findings] == [(f.code, f.where) for f in always.findings]


def _identical(auto, always) -> None:
    """The whole result apart from timings: what "always" gives, the noise floors included."""
    _same_verdicts(auto, always)
    assert auto.layers == always.layers and auto.outputs == always.outputs
    assert auto.first_divergence == always.first_divergence
    assert [f.message for f in auto.findings] == [f.message for f in always.findings]


def _samples(shape, n, seed=3):
    return random_samples([InputSpec("x", shape, "float32")], n, seed=seed)


@pytest.mark.parametrize("build,shape", [(build_small_resnet, (1, 3, 32, 32)), (build_transformer, None)])
def test_a_clean_model_skips_the_float64_forward_with_the_same_verdicts(monkeypatch, floor_calls, build, shape):
    torch.manual_seed(0)
    module = build().eval()
    if shape is None:
        samples = random_samples([InputSpec("ids", (1, 16), "int64", low=0, high=1000)], 2, seed=3)
    else:
        samples = _samples(shape, 2)
    auto, always, calls = _both(monkeypatch, floor_calls, module, samples)
    assert auto.verdict == "pass", [f.message for f in auto.findings]
    assert calls == {"auto": 0, "always": 1}
    _same_verdicts(auto, always)
    assert all(x.noise_floor is None for x in auto.layers)
    assert any(x.noise_floor is not None for x in always.layers)


def test_a_gap_found_on_the_first_sample_measures_the_floor_there_once(monkeypatch, floor_calls):
    module = build_custom_op().eval()
    samples = _samples((1, 16), 3)
    exported = export_onnx(module, samples[0], exporter="torchscript").model
    auto, always, calls = _both(monkeypatch, floor_calls, module, samples, onnx_model=exported)
    assert auto.verdict == "gap" and auto.first_divergence.module == "act"
    assert calls == {"auto": 1, "always": 1}
    assert floor_calls.passes == ["lazy", "always"]  # auto switched in place: no second pass
    _identical(auto, always)


def test_a_tensor_near_its_budget_only_on_a_later_sample_runs_again_with_the_floor(monkeypatch, floor_calls):
    """Sample 0 is all zeros (fc1 gives its bias: no difference, nothing to measure for); sample 1 meets fc1's
    rounding-level change. The floor is measured on sample 0, as always: ~0 there, so sample 1 is a gap both ways."""
    module = Loud().eval()
    samples = [{"x": np.zeros((4, 64), np.float32)}, *_samples((4, 64), 1)]
    exported = export_onnx(module, samples[1]).model
    weight = next(i.name for i in exported.graph.initializer if "fc1" in i.name and "weight" in i.name)
    jitter = 1 + 3e-6 * np.random.default_rng(0).standard_normal(tuple(module.fc1.weight.shape))
    rounded = _tamper(exported, lambda n: n == weight, jitter)
    auto, always, calls = _both(monkeypatch, floor_calls, module, samples, onnx_model=rounded)
    assert calls == {"auto": 1, "always": 1}  # the first pass found no need on sample 0; the second measured once
    assert floor_calls.passes == ["lazy", "always", "always"]  # auto: lazy, then again; then the "always" run
    _identical(auto, always)
    assert next(x for x in auto.layers if x.module == "fc1").noise_floor is not None


def test_several_groups_of_marked_values_give_what_always_gives(monkeypatch, floor_calls):
    """A small memory budget splits the marked values into groups: each measures its own floor, as before."""
    module = build_custom_op().eval()
    samples = _samples((1, 16), 2)
    exported = export_onnx(module, samples[0], exporter="torchscript").model
    auto, always, calls = _both(monkeypatch, floor_calls, module, samples, onnx_model=exported,
                                max_intermediate_bytes=300)
    assert auto.timings["ort_runs_per_sample"] > 1
    assert calls["auto"] == calls["always"] == auto.timings["ort_runs_per_sample"]
    _identical(auto, always)


def test_a_deployed_backend_is_asked_once_per_sample_even_when_the_floor_is_measured(monkeypatch, floor_calls):
    from gapcheck.backends.onnxruntime import OnnxRuntimeBackend

    module = build_custom_op().eval()
    samples = _samples((1, 16), 2)
    exported = export_onnx(module, samples[0], exporter="torchscript").model
    asked = []

    class Served(OnnxRuntimeBackend):
        def infer(self, feeds, output_names=None):
            asked.append(1)
            return super().infer(feeds, output_names)

    auto, always, _ = _both(monkeypatch, floor_calls, module, samples, onnx_model=exported,
                            deployed=[Served(exported, name="served")])
    assert len(asked) == 2 * len(samples)  # once per sample in each of the two runs: none asked twice
    _identical(auto, always)
    assert {o.backend for o in auto.outputs} == {"onnxruntime", "served"}

"""Steps from callables: real photos through tensor pipelines that differ in one step."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from torch.nn import functional as F

from gapcheck.preprocess.traced import first_divergent_traced_step, trace_stage

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


@pytest.fixture(scope="module")
def photo(tmp_path_factory):
    skimage_data = pytest.importorskip("skimage.data")
    path = tmp_path_factory.mktemp("photos") / "astronaut.png"
    Image.fromarray(skimage_data.astronaut()).save(path)
    return str(path)


def _pipeline(antialias: bool):
    def preprocess(path):
        image = np.asarray(Image.open(path).convert("RGB"))  # PIL decode: opaque to torch
        x = torch.from_numpy(image).permute(2, 0, 1).float() / 255.0
        x = F.interpolate(x[None], size=(224, 224), mode="bilinear", antialias=antialias)[0]
        return (x - MEAN) / STD
    return preprocess


def test_function_stage_is_recorded_at_runtime_with_opaque_decode(photo):
    trace = trace_stage(_pipeline(True), photo)
    assert trace.method == "runtime" and "not a tensor" in trace.reason
    assert trace.opaque and "before the first torch call" in trace.opaque[0]
    labels = trace.labels()
    assert labels[0].startswith("tensor from the decoded array") and labels[1].startswith("permute(2, 0, 1)")
    assert any(label.startswith("interpolate(") and "antialias=True" in label for label in labels)
    assert trace.steps[-1].output.shape == (3, 224, 224)


def test_first_divergent_step_names_the_antialias_difference(photo):
    train, infer = trace_stage(_pipeline(False), photo), trace_stage(_pipeline(True), photo)
    divergence = first_divergent_traced_step(train, infer)
    assert divergence is not None
    assert "interpolate(" in divergence.cand_step and "antialias=True" in divergence.cand_step
    assert "antialias=False" in divergence.ref_step
    assert divergence.max_abs is not None and divergence.max_abs > 0.01


def test_identical_pipelines_and_equivalent_float_orderings_do_not_diverge(photo):
    def scaled_by_multiplication(path):
        image = np.asarray(Image.open(path).convert("RGB"))
        x = torch.from_numpy(image).permute(2, 0, 1).float() * (1 / 255.0)
        x = F.interpolate(x[None], size=(224, 224), mode="bilinear", antialias=True)[0]
        return (x - MEAN) / STD
    assert first_divergent_traced_step(trace_stage(_pipeline(True), photo), trace_stage(_pipeline(True), photo)) is None
    assert first_divergent_traced_step(trace_stage(_pipeline(True), photo),
                                       trace_stage(scaled_by_multiplication, photo)) is None


class Normalize(torch.nn.Module):
    def __init__(self, mean):
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean).view(3, 1, 1))

    def forward(self, x):
        return (x - self.mean) / 0.25


def test_sequential_of_tensor_modules_is_split_by_fx(photo):
    image = torch.from_numpy(np.asarray(Image.open(photo).convert("RGB"))).permute(2, 0, 1).float() / 255
    ref = torch.nn.Sequential(Normalize([0.485, 0.456, 0.406]))
    cand = torch.nn.Sequential(Normalize([0.5, 0.5, 0.5]))
    trace = trace_stage(ref, image)
    assert trace.method == "compose" and len(trace.steps) == 2  # sub and div inside Normalize, via fx
    divergence = first_divergent_traced_step(trace, trace_stage(cand, image))
    assert divergence is not None and divergence.step_index == 1 and "sub" in divergence.cand_step


def test_tensor_function_is_traced_with_fx(photo):
    image = torch.from_numpy(np.asarray(Image.open(photo).convert("RGB"))).permute(2, 0, 1).float() / 255

    def tensor_stage(x):
        x = F.interpolate(x[None], size=(64, 64), mode="bilinear", antialias=False)
        return x.clamp(0, 1)
    trace = trace_stage(tensor_stage, image)
    assert trace.method == "fx" and [label.split("(")[0] for label in trace.labels()][-2:] == ["interpolate", "clamp"]


def test_torchvision_v2_compose_on_real_photo_names_the_step(photo):
    from sample_models.zoo import torchvision_models

    image = torch.from_numpy(np.asarray(Image.open(photo).convert("RGB"))).permute(2, 0, 1)
    # torchvision's pure-Python definitions (scripts/setup_zoo.sh), imported without its compiled ops.
    with torchvision_models():
        from torchvision.transforms import v2

        train = v2.Compose([v2.Resize(128, antialias=False), v2.CenterCrop(112), v2.ToDtype(torch.float32, scale=True)])
        infer = v2.Compose([v2.Resize(128, antialias=True), v2.CenterCrop(112), v2.ToDtype(torch.float32, scale=True)])
        divergence = first_divergent_traced_step(trace_stage(train, image), trace_stage(infer, image))
    assert divergence is not None and divergence.step_index == 1
    assert "antialias=True" in divergence.cand_step and "antialias=False" in divergence.ref_step

"""Golden bundles: recorded from specs, files and real photos through a stage; every file verified on load."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from gapcheck.cli.app import main
from gapcheck.errors import InputError
from gapcheck.golden import load_bundle
from gapcheck.golden.bundle import file_sha256
from tests.nightly.conftest import FACTORY, INPUT
from tests.nightly.models import build_tiny


def test_manifest_records_versions_hashes_specs_and_tolerances(recorded: Path, checkpoint: Path) -> None:
    manifest = json.loads((recorded / "manifest.json").read_text())
    assert {"gapcheck", "torch", "onnx", "onnxruntime"} <= set(manifest["versions"])
    assert manifest["model"]["checkpoint"]["sha256"] == file_sha256(checkpoint)
    assert manifest["model"]["factory"] == FACTORY
    assert manifest["onnx"]["sha256"] == file_sha256(recorded / "model.onnx")
    assert manifest["input_specs"] == [INPUT] and manifest["samples"]["count"] == 6
    [output] = manifest["outputs"]
    assert manifest["tolerances"]["outputs"][output["name"]] == {"rtol": 1e-3, "atol": 1e-5}
    assert set(manifest["files"]) == {p.name for p in recorded.iterdir() if p.name != "manifest.json"}
    assert not [p for p in recorded.iterdir() if p.suffix in (".pt", ".pkl", ".pickle", ".npy")]  # never pickles


def test_reference_is_the_checkpoint_and_onnxruntime_agrees(recorded: Path, checkpoint: Path) -> None:
    bundle = load_bundle(recorded)
    module = build_tiny()
    module.load_state_dict(torch.load(checkpoint, weights_only=True))
    with torch.no_grad():
        expected = module.eval()(torch.from_numpy(bundle.inputs["x"])).numpy()
    [name] = bundle.reference
    np.testing.assert_allclose(bundle.reference[name], expected, rtol=0, atol=0)
    np.testing.assert_allclose(bundle.onnxruntime[name], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("damage,named", [
    (lambda b: (b / "inputs.safetensors").write_bytes((b / "inputs.safetensors").read_bytes()[:-7]), "inputs.safetensors"),
    (lambda b: _flip(b / "reference_torch.safetensors"), "reference_torch.safetensors"),
    (lambda b: (b / "model.onnx").unlink(), "model.onnx"),
    (lambda b: (b / "manifest.json").write_text("{not json"), "manifest.json"),
    (lambda b: _edit(b, lambda m: m["files"].update({"../escape": {"sha256": "0", "bytes": 0}})), "../escape"),
    # an attacker edits the manifest too: every hash matches, the contents lie
    (lambda b: _edit(b, lambda m: m["files"]["inputs.safetensors"].update(bytes="lots")), "inputs.safetensors"),
    (lambda b: _edit(b, lambda m: m["files"]["inputs.safetensors"].update(bytes=10**30)), "inputs.safetensors"),
    (lambda b: _link_outside(b, "reference_torch.safetensors"), "reference_torch.safetensors"),
    (lambda b: _link_outside(b, "manifest.json"), "manifest.json"),
    (lambda b: _fifo(b / "model.onnx"), "model.onnx"),
    (lambda b: _lying_safetensors_header(b, shape_factor=1000), "inputs.safetensors"),
    (lambda b: _lying_safetensors_header(b, header_length=2**62), "inputs.safetensors"),
    (lambda b: _edit(b, lambda m: [t.update(rtol=float("inf")) for t in m["tolerances"]["outputs"].values()]),
     "tolerance"),
    (lambda b: _edit(b, lambda m: [t.update(atol=-1.0) for t in m["tolerances"]["outputs"].values()]), "tolerance"),
    (lambda b: _edit(b, lambda m: m["samples"].update(count=10**15)), "samples.count"),
])
def test_a_damaged_bundle_is_refused_with_exit_2_naming_the_file(recorded: Path, tmp_path: Path, damage, named,
                                                                  capsys: pytest.CaptureFixture) -> None:
    bundle = tmp_path / "copy"
    shutil.copytree(recorded, bundle)
    assert main(["golden", "verify", str(bundle)]) == 0
    damage(bundle)
    capsys.readouterr()
    assert main(["golden", "verify", str(bundle)]) == 2
    assert named in capsys.readouterr().err
    with pytest.raises(InputError, match=named.replace(".", r"\.")):
        load_bundle(bundle)


def _link_outside(bundle: Path, name: str) -> None:
    """The file moved out of the bundle and a symbolic link left in its place (hash and size still match)."""
    outside = bundle.parent / f"outside-{name}"
    (bundle / name).rename(outside)
    (bundle / name).symlink_to(outside)


def _fifo(path: Path) -> None:
    import os

    path.unlink()
    os.mkfifo(path)  # reading it would block forever


def _lying_safetensors_header(bundle: Path, *, shape_factor: int = 1, header_length: int | None = None) -> None:
    """A safetensors header claiming more data than the file holds; the manifest's hash and size updated to match."""
    import hashlib
    import struct

    path = bundle / "inputs.safetensors"
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    for name, entry in header.items():
        if name != "__metadata__":
            entry["shape"][0] *= shape_factor
            entry["data_offsets"][1] *= shape_factor
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", header_length or len(text)) + text + raw[8 + length:])
    _edit(bundle, lambda m: m["files"]["inputs.safetensors"].update(
        sha256=hashlib.sha256(path.read_bytes()).hexdigest(), bytes=path.stat().st_size))


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))


def _edit(bundle: Path, change) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    change(manifest)
    (bundle / "manifest.json").write_text(json.dumps(manifest))


def test_record_refuses_a_non_empty_folder_unless_overwriting(recorded: Path, tmp_path: Path) -> None:
    out = tmp_path / "g"
    shutil.copytree(recorded, out)
    args = ["golden", "record", "--model", FACTORY, "--input", INPUT, "--num-samples", "2", "--exporter",
            "torchscript", "--out", str(out)]
    assert main(args) == 2
    assert main([*args, "--overwrite"]) == 0
    assert load_bundle(out).num_samples == 2
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder left behind


def test_record_from_an_inputs_file(tmp_path: Path) -> None:
    inputs = tmp_path / "real.npz"
    np.savez(inputs, x=np.random.default_rng(1).random((5, 3, 8, 8), dtype=np.float32))
    assert main(["golden", "record", "--model", FACTORY, "--inputs", str(inputs), "--input", INPUT,
                 "--exporter", "torchscript", "--out", str(tmp_path / "g")]) == 0
    bundle = load_bundle(tmp_path / "g")
    assert bundle.num_samples == 5 and bundle.manifest["samples"]["source"] == "file"
    np.testing.assert_array_equal(bundle.inputs["x"], np.load(inputs)["x"])


def test_record_from_real_photos_through_the_inference_stage(tmp_path: Path) -> None:
    from PIL import Image
    from skimage import data

    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ("astronaut", "coffee", "chelsea"):
        Image.fromarray(getattr(data, name)()).save(photos / f"{name}.png")
    assert main(["golden", "record", "--model", FACTORY, "--input", INPUT, "--samples", str(photos),
                 "--stage", "infer=tests/golden/stages.py:preprocess", "--exporter", "torchscript",
                 "--out", str(tmp_path / "g")]) == 0
    bundle = load_bundle(tmp_path / "g")
    pre = bundle.manifest["preprocess"]
    assert [r["file"] for r in pre["raw_samples"]] == ["astronaut.png", "chelsea.png", "coffee.png"]
    assert pre["raw_samples"][0]["sha256"] == file_sha256(photos / "astronaut.png")
    assert len(pre["tensor_stats"]["channels"]) == 3 and 0 <= pre["tensor_stats"]["min"] < pre["tensor_stats"]["max"] <= 1
    assert bundle.inputs["x"].shape == (3, 3, 8, 8)


def test_a_second_recording_takes_the_export_from_the_cache(tmp_path: Path) -> None:
    args = ["golden", "record", "--model", FACTORY, "--input", INPUT, "--num-samples", "2", "--exporter", "torchscript",
            "--cache-dir", str(tmp_path / "cache")]
    assert main([*args, "--out", str(tmp_path / "cold")]) == 0
    assert main([*args, "--out", str(tmp_path / "warm")]) == 0
    cold, warm = (json.loads((tmp_path / n / "manifest.json").read_text()) for n in ("cold", "warm"))
    assert (cold["model"]["export_cached"], warm["model"]["export_cached"]) == (False, True)
    assert cold["onnx"]["sha256"] == warm["onnx"]["sha256"]
    assert main([*args, "--no-cache", "--out", str(tmp_path / "fresh")]) == 0
    assert json.loads((tmp_path / "fresh" / "manifest.json").read_text())["model"]["export_cached"] is False


def test_every_bundle_file_is_as_readable_as_the_manifest(recorded: Path) -> None:
    """safetensors writes its files 0600; a nightly pod running as another user must still read the bundle."""
    modes = {p.name: p.stat().st_mode & 0o777 for p in recorded.iterdir()}
    assert len(set(modes.values())) == 1, modes


@pytest.mark.parametrize("factory,names", [(FACTORY, ["output"]), ("tests/nightly/models.py:build_two_heads",
                                                                  ["aux", "logits"])])
def test_outputs_are_named_as_the_model_and_gapcheck_export_name_them(tmp_path: Path, factory: str,
                                                                      names: list[str]) -> None:
    """Not the exporter's node names (linear_13): a model deployed by `gapcheck export` serves these names."""
    from gapcheck.golden import RecordRequest, record_bundle

    out = tmp_path / "g"
    record_bundle(RecordRequest(out=out, factory=factory, input_specs=(INPUT,), num_samples=2, exporter="dynamo"))
    bundle = load_bundle(out)
    assert sorted(o.name for o in bundle.output_infos) == names
    import onnx

    assert sorted(o.name for o in onnx.load(str(bundle.onnx_path)).graph.output) == names


class _IgnoresMostOfItsInput(torch.nn.Module):
    """Untrained-like: its output moves by ~1e-6 whatever the input (as random-weight nets in deep layers do)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3 * 8 * 8, 5)
        with torch.no_grad():
            self.fc.weight.mul_(1e-7)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1))


def build_insensitive() -> torch.nn.Module:
    torch.manual_seed(0)
    return _IgnoresMostOfItsInput().eval()


def test_a_bundle_whose_outputs_ignore_the_inputs_is_flagged_at_record_time(tmp_path: Path) -> None:
    """A nightly check against such a bundle could not catch a deployment fed the wrong inputs (a BGR swap)."""
    from gapcheck.golden import RecordRequest, record_bundle

    outcome = record_bundle(RecordRequest(out=tmp_path / "g", factory=f"{__name__}:build_insensitive",
                                          input_specs=("x:1x3x8x8:float32",), num_samples=4, exporter="torchscript"))
    assert [f.code for f in outcome.findings] == ["golden_insensitive"]
    assert "all 4 golden samples agree" in outcome.findings[0].message
    varied = record_bundle(RecordRequest(out=tmp_path / "v", factory=FACTORY, input_specs=(INPUT,), num_samples=4,
                                         exporter="torchscript"))
    assert "golden_insensitive" not in [f.code for f in varied.findings]


def test_the_manifest_says_which_weights_of_the_checkpoint_it_recorded(tmp_path: Path) -> None:
    from tests.model.test_checkpoints import timm_checkpoint

    timm_checkpoint(tmp_path / "ckpt.pth.tar")
    out = tmp_path / "golden"
    assert main(["golden", "record", "--checkpoint", str(tmp_path / "ckpt.pth.tar"), "--model",
                 "sample_models.cnn:build_small_resnet", "--input", "x:1x3x32x32:float32", "--num-samples", "2",
                 "--exporter", "torchscript", "--state-dict-key", "state_dict_ema", "--out", str(out)]) == 0
    checkpoint = json.loads((out / "manifest.json").read_text())["model"]["checkpoint"]
    assert checkpoint["state_dict_key"] == "state_dict_ema"
    assert "'state_dict_ema'" in checkpoint["weights"] and "'state_dict'" in checkpoint["weights"]


def test_a_reference_holding_nan_is_refused_at_record_and_at_load(tmp_path: Path, recorded: Path, capsys) -> None:
    # The attacker review (D10): all-NaN inputs gave an all-NaN reference, recorded with exit 0; a deployment answering
    # NaN then passed every night (NaN compares equal to NaN).
    inputs = tmp_path / "nan.npz"
    samples = np.random.default_rng(2).random((4, 3, 8, 8), dtype=np.float32)
    samples[2] = np.nan
    np.savez(inputs, x=samples)
    assert main(["golden", "record", "--model", FACTORY, "--inputs", str(inputs), "--input", INPUT,
                 "--exporter", "torchscript", "--out", str(tmp_path / "g")]) == 2
    said = capsys.readouterr().err
    assert "holds NaN" in said and "samples 2" in said
    assert not (tmp_path / "g").exists()  # nothing written
    # a bundle made by hand (or by an older gapcheck), every hash in order, whose reference holds NaN: refused at load
    from gapcheck.golden.record import _write

    good = load_bundle(recorded)
    reference = {name: array.copy() for name, array in good.reference.items()}
    next(iter(reference.values()))[1].flat[0] = np.nan
    _write(tmp_path / "hand", json.loads(json.dumps(good.manifest)), good.onnx_bytes, good.inputs, reference,
           good.onnxruntime, overwrite=False)
    with pytest.raises(InputError, match="reference output .* holds NaN .*samples 1"):
        load_bundle(tmp_path / "hand")


class _Overflows(torch.nn.Module):
    """Scales its input past float32's range: every value of magnitude over ~0.01 becomes +-inf."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.flatten(1)[:, :5] - 0.5) * 3e38 * 10


def build_overflows() -> torch.nn.Module:
    return _Overflows().eval()


def test_a_reference_holding_infinities_is_recorded_with_a_warning(tmp_path: Path) -> None:
    # The verification review: the NaN refusal did not cover +-inf; a deployment overflowing there passes unsaid.
    from gapcheck.golden import RecordRequest, record_bundle

    outcome = record_bundle(RecordRequest(out=tmp_path / "g", factory=f"{__name__}:build_overflows",
                                          input_specs=("x:1x3x8x8:float32",), num_samples=4, exporter="torchscript"))
    infinite = [f for f in outcome.findings if f.code == "golden_reference_infinite"]
    assert len(infinite) == 1 and infinite[0].evidence["values"] == 20 and infinite[0].evidence["infinite"] > 10
    varied = record_bundle(RecordRequest(out=tmp_path / "v", factory=FACTORY, input_specs=(INPUT,), num_samples=4,
                                         exporter="torchscript"))
    assert "golden_reference_infinite" not in [f.code for f in varied.findings]

"""Every per-sample fingerprint the manifest recorded is checked against inputs.safetensors whenever a bundle is
verified (``golden verify`` and nightly: one function), and, where the manifest records the inputs file's header
SHA256, the header and the fingerprints are the byte-for-byte check of that file (it is hashed once, not twice).

Issue 23 attacker round 5 #2 (golden half): sample values changed in inputs.safetensors and the file's SHA256
re-hashed in the manifest passed (exit 0) on the file hashes alone; now exit 2 naming the first sample that differs
and how many. Issue 23 #14: the whole-file SHA256 of the inputs is no longer computed beside the fingerprints."""
from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from gapcheck.cli.app import main
from gapcheck.errors import InputError
from gapcheck.golden import bundle as fmt
from gapcheck.golden.bundle import file_sha256, load_bundle, open_bundle, sample_fingerprints
from gapcheck.tensors import fingerprint


def _tamper(bundle: Path, samples: list[int], change=None) -> None:
    """Change ``samples``' input values, re-hash the whole file in the manifest (an older recorder's entry: no header
    SHA256), keep its fingerprints (or ``change``)."""
    path = bundle / "inputs.safetensors"
    arrays = {k: v.copy() for k, v in load_file(str(path)).items()}
    for name in arrays:
        arrays[name][samples] += 100
    save_file(arrays, str(path))
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"]["inputs.safetensors"] = {"sha256": file_sha256(path), "bytes": path.stat().st_size}
    if change is not None:
        change(manifest)
    (bundle / "manifest.json").write_text(json.dumps(manifest))


def _edit(bundle: Path, change) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    change(manifest)
    (bundle / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("samples,first,differ", [([3], 3, 1), ([1, 4, 5], 1, 3)])
def test_changed_samples_with_a_rehashed_file_are_refused(recorded: Path, tmp_path: Path, samples, first, differ,
                                                          capsys: pytest.CaptureFixture) -> None:
    bundle = tmp_path / "copy"
    shutil.copytree(recorded, bundle)
    assert main(["golden", "verify", str(bundle)]) == 0
    _tamper(bundle, samples)
    pending = open_bundle(bundle)
    assert pending.unverified_inputs["x"].shape[0] == 6  # every file matches its (re-hashed) SHA256
    with pytest.raises(InputError, match=f"sample {first} of inputs.safetensors"):
        pending.result()  # only the fingerprints tell
    capsys.readouterr()
    assert main(["golden", "verify", str(bundle)]) == 2
    err = capsys.readouterr().err
    assert f"sample {first} of inputs.safetensors" in err and f"({differ} of 6 samples differ)" in err


def test_fingerprints_for_another_number_of_samples_are_refused(recorded: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "copy"
    shutil.copytree(recorded, bundle)
    _tamper(bundle, [], change=lambda m: m["samples"]["fingerprints"].pop())
    with pytest.raises(InputError, match="records 5 sample fingerprints for 6 samples"):
        load_bundle(bundle)


def test_a_bundle_without_recorded_fingerprints_still_verifies(recorded: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "copy"
    shutil.copytree(recorded, bundle)
    _tamper(bundle, [], change=lambda m: m["samples"].pop("fingerprints"))
    assert main(["golden", "verify", str(bundle)]) == 0
    assert np.array_equal(load_bundle(bundle).inputs["x"], load_bundle(recorded).inputs["x"])
    assert load_bundle(bundle).fingerprints is None


def test_the_recorder_writes_the_inputs_header_sha256(recorded: Path) -> None:
    manifest = json.loads((recorded / "manifest.json").read_text())
    entry = manifest["files"]["inputs.safetensors"]
    data = (recorded / "inputs.safetensors").read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    assert entry["header_sha256"] == hashlib.sha256(data[:8 + length]).hexdigest()
    assert entry["sha256"] == hashlib.sha256(data).hexdigest()  # kept: older readers check the whole file
    assert load_bundle(recorded).fingerprints == manifest["samples"]["fingerprints"]


def test_the_header_and_the_fingerprints_are_the_inputs_check_the_whole_file_is_not_hashed(
        recorded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A manifest whose whole-file SHA256 of the inputs is wrong, header SHA256 and fingerprints right, verifies:
    proof that the whole file is not hashed beside them (its bytes are hashed once, sample by sample)."""
    bundle = tmp_path / "copy"
    shutil.copytree(recorded, bundle)
    _edit(bundle, lambda m: m["files"]["inputs.safetensors"].update(sha256="0" * 64))
    hashed: list[int] = []
    real = fmt.hashlib.sha256

    def counting(data=b""):
        hashed.append(len(data))
        return real(data)

    monkeypatch.setattr(fmt.hashlib, "sha256", counting)
    assert np.array_equal(load_bundle(bundle).inputs["x"], load_bundle(recorded).inputs["x"])
    size = (bundle / "inputs.safetensors").stat().st_size
    assert hashed and max(hashed) < size  # no one hash over the whole inputs file


def test_a_changed_byte_in_any_sample_is_refused_without_the_whole_file_hash(recorded: Path, tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture) -> None:
    bundle = tmp_path / "copy"
    shutil.copytree(recorded, bundle)
    path = bundle / "inputs.safetensors"
    data = bytearray(path.read_bytes())
    (length,) = struct.unpack("<Q", data[:8])
    row = (len(data) - 8 - length) // 6
    data[8 + length + 2 * row + 5] ^= 0x10  # one byte of sample 2
    path.write_bytes(bytes(data))
    assert main(["golden", "verify", str(bundle)]) == 2
    assert "sample 2 of inputs.safetensors does not match the fingerprint" in capsys.readouterr().err


def test_a_changed_header_is_refused(recorded: Path, tmp_path: Path) -> None:
    """Same size and still a valid file with the same tensors (the header's keys in another order): only the
    header's SHA256 tells."""
    bundle = tmp_path / "copy"
    shutil.copytree(recorded, bundle)
    path = bundle / "inputs.safetensors"
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    reordered = {name: dict(reversed(entry.items())) for name, entry in header.items()}
    text = json.dumps(reordered, separators=(",", ":")).encode().ljust(length)
    assert len(text) == length and text != data[8:8 + length]
    path.write_bytes(data[:8] + text + data[8 + length:])
    assert open_bundle(bundle).unverified_inputs["x"].shape[0] == 6  # it parses
    with pytest.raises(InputError, match="inputs.safetensors does not match its header SHA256 .*tampered"):
        load_bundle(bundle)


def test_a_tensor_beside_the_inputs_falls_back_to_the_whole_file_hash(recorded: Path, tmp_path: Path) -> None:
    """A tensor no fingerprint covers (the header re-hashed in the manifest): the whole file's SHA256 is checked."""
    bundle = tmp_path / "copy"
    shutil.copytree(recorded, bundle)
    path = bundle / "inputs.safetensors"
    save_file({**load_file(str(path)), "extra": np.ones(3, np.float32)}, str(path))
    data = path.read_bytes()
    _edit(bundle, lambda m: m["files"]["inputs.safetensors"].update(
        bytes=len(data), header_sha256=fmt.safetensors_header_sha256(data)))
    with pytest.raises(InputError, match="inputs.safetensors does not match its SHA256"):
        load_bundle(bundle)


@pytest.mark.parametrize("array", [
    np.arange(24, dtype=np.float32).reshape(4, 2, 3), np.arange(5, dtype=np.int64), np.ones((3, 2), dtype=bool),
    np.linspace(0, 1, 12, dtype=np.float16).reshape(3, 4), np.zeros((4, 0, 2), dtype=np.float32),
    np.arange(12, dtype=">f4").reshape(3, 4), np.arange(24, dtype=np.float64).reshape(4, 6)[:, ::2],
    np.zeros((0, 3), dtype=np.float32)])
def test_sample_fingerprints_are_the_fingerprint_of_each_sample(array: np.ndarray) -> None:
    assert sample_fingerprints(array) == [fingerprint(array[i:i + 1]) for i in range(array.shape[0])]

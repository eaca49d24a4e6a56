"""`golden verify` checks every per-sample fingerprint the manifest recorded (issue 23 attacker round 5 #2, golden
half): sample values changed in inputs.safetensors and the file's SHA256 re-hashed in the manifest passed (exit 0)
on the file hashes alone; now exit 2 naming the first sample that differs and how many."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from gapcheck.cli.app import main
from gapcheck.errors import InputError
from gapcheck.golden.bundle import check_fingerprints, file_sha256, load_bundle


def _tamper(bundle: Path, samples: list[int], change=None) -> None:
    """Change ``samples``' input values, re-hash the file in the manifest, keep its fingerprints (or ``change``)."""
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


@pytest.mark.parametrize("samples,first,differ", [([3], 3, 1), ([1, 4, 5], 1, 3)])
def test_changed_samples_with_a_rehashed_file_are_refused(recorded: Path, tmp_path: Path, samples, first, differ,
                                                          capsys: pytest.CaptureFixture) -> None:
    bundle = tmp_path / "copy"
    shutil.copytree(recorded, bundle)
    assert main(["golden", "verify", str(bundle)]) == 0
    _tamper(bundle, samples)
    load_bundle(bundle)  # every file matches its (re-hashed) SHA256: only the fingerprints tell
    capsys.readouterr()
    assert main(["golden", "verify", str(bundle)]) == 2
    err = capsys.readouterr().err
    assert f"sample {first} of inputs.safetensors" in err and f"({differ} of 6 samples differ)" in err


def test_fingerprints_for_another_number_of_samples_are_refused(recorded: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "copy"
    shutil.copytree(recorded, bundle)
    _tamper(bundle, [], change=lambda m: m["samples"]["fingerprints"].pop())
    with pytest.raises(InputError, match="records 5 sample fingerprints for 6 samples"):
        check_fingerprints(load_bundle(bundle))


def test_a_bundle_without_recorded_fingerprints_still_verifies(recorded: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "copy"
    shutil.copytree(recorded, bundle)
    _tamper(bundle, [], change=lambda m: m["samples"].pop("fingerprints"))
    assert main(["golden", "verify", str(bundle)]) == 0
    assert np.array_equal(load_bundle(bundle).inputs["x"], load_bundle(recorded).inputs["x"])

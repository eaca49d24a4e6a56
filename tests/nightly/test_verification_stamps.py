"""A cron's nights (issue 23 item 14): the first night after a record verifies the golden bundle in full and stamps
it; the next nights take the stamp instead of hashing the very same files again; a bundle changed since is verified
in full again and refused (exit 2), whatever a stamp said."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from gapcheck.cli.app import main
from gapcheck.golden import load_bundle
from gapcheck.golden.manifest import INPUTS_FILE, TORCH_FILE
from gapcheck.golden.stamps import Stamps
from tests.nightly.fake_triton import FakeTriton


def _night(bundle: Path, tmp_path: Path, url: str, name: str) -> tuple[int, dict]:
    report = tmp_path / f"{name}.json"
    code = main(["nightly", "--golden", str(bundle), "--history", str(tmp_path / "h.sqlite"), "--no-audit",
                 "--retries", "0", "--endpoint", f"prod={url}", "--json", str(report)])
    return code, json.loads(report.read_text()) if report.exists() else {}


def test_nights_after_the_first_take_the_stamp_and_a_changed_bundle_is_refused(
        tiny_golden: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = tmp_path / "golden"
    shutil.copytree(tiny_golden, bundle)
    # opted in (GAPCHECK_VERIFY_STAMPS=1 is what Stamps.default reads); the copy was written a moment ago: the default
    # 60 s window would (rightly) not stamp it yet
    monkeypatch.setattr(Stamps, "default", classmethod(lambda cls: cls(tmp_path / "verified", racy_ns=0)))
    with FakeTriton(load_bundle(bundle), "ok") as fake:
        first_code, first = _night(bundle, tmp_path, fake.url, "first")
        second_code, second = _night(bundle, tmp_path, fake.url, "second")
        assert (first_code, second_code) == (0, 0), (first, second)
        assert (first["golden"]["verified_by"], second["golden"]["verified_by"]) == ("sha256", "stamp")
        # the same requests, digests and verdict either way
        assert first["endpoints"][0]["requests"]
        assert [r["input_sha256"] for r in first["endpoints"][0]["requests"]] == \
               [r["input_sha256"] for r in second["endpoints"][0]["requests"]]
        inputs = bundle / INPUTS_FILE
        data = bytearray(inputs.read_bytes())
        data[-1] ^= 1
        inputs.write_bytes(bytes(data))
        code, _ = _night(bundle, tmp_path, fake.url, "tampered")
    assert code == 2


def _stamped_night(bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setattr(Stamps, "default", classmethod(lambda cls: cls(tmp_path / "verified", racy_ns=0)))
    code, first = _night(bundle, tmp_path, url, "first")
    assert code == 0 and first["golden"]["verified_by"] == "sha256", first


def test_a_stamped_night_that_finds_a_gap_hashes_the_bundle_before_saying_so(
        tiny_golden: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A real gap on a stamped night: the bundle is hashed in full first, it verifies, and the gap stands.
    bundle = tmp_path / "golden"
    shutil.copytree(tiny_golden, bundle)
    golden = load_bundle(bundle)
    with FakeTriton(golden, "ok") as fake:
        _stamped_night(bundle, tmp_path, monkeypatch, fake.url)
        fake.bundle = dataclasses.replace(golden, reference={k: v + 1.0 for k, v in golden.reference.items()})
        code, report = _night(bundle, tmp_path, fake.url, "gap")
    assert code == 1, report
    assert report["golden"]["verified_by"] == "sha256"  # hashed tonight, before the gap was said


def test_a_stamped_bundle_rotted_on_the_disk_is_refused_not_an_alarm(
        tiny_golden: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A sector that rots keeps the file's times: the stamp still holds (forced here), the night compares against the
    # rotten reference and sees a gap, hashes the bundle before saying so, and refuses it (exit 2), naming the file.
    bundle = tmp_path / "golden"
    shutil.copytree(tiny_golden, bundle)
    with FakeTriton(load_bundle(bundle), "ok") as fake:
        _stamped_night(bundle, tmp_path, monkeypatch, fake.url)
        reference = bundle / TORCH_FILE
        data = bytearray(reference.read_bytes())
        data[-2] ^= 0x40  # a float32's high byte: a visible change
        reference.write_bytes(bytes(data))
        monkeypatch.setattr(Stamps, "holds", lambda *_args: True)
        code, report = _night(bundle, tmp_path, fake.url, "rotten")
    assert code == 2, report
    assert not report  # no report of a night on a bad bundle


def test_a_night_says_why_no_stamp_may_stand_for_the_bundle(tiny_golden: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.nightly.conftest import validate_report

    bundle = tmp_path / "golden"
    shutil.copytree(tiny_golden, bundle)
    (bundle / INPUTS_FILE).chmod(0o664)  # its group may write it: hashed every night, and the report says why
    monkeypatch.setattr(Stamps, "default", classmethod(lambda cls: cls(tmp_path / "verified", racy_ns=0)))
    with FakeTriton(load_bundle(bundle), "ok") as fake:
        code, report = _night(bundle, tmp_path, fake.url, "refused")
    assert code == 0
    validate_report(report, "nightly")
    assert report["golden"]["verified_by"] == "sha256"
    assert report["golden"]["stamp_refused"] == f"file {INPUTS_FILE}: its group or others may write it"


def test_a_gap_on_a_stamped_bundle_whose_inputs_hold_nan_is_not_called_a_changed_bundle(
        tiny_golden: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The re-hash before a gap compares the bytes judged with the bytes hashed: a sample holding NaN (inputs may) is
    # the same bytes, though NaN != NaN for numpy's array_equal.
    from types import SimpleNamespace

    from gapcheck.golden import bundle as bundle_module
    from gapcheck.nightly import run

    golden = load_bundle(tiny_golden)
    inputs = {name: array.copy() for name, array in golden.inputs.items()}
    next(iter(inputs.values())).flat[0] = np.nan
    stamped = dataclasses.replace(golden, inputs=inputs, verified_by="stamp")
    hashed = dataclasses.replace(stamped, inputs={k: v.copy() for k, v in inputs.items()}, verified_by="sha256")
    monkeypatch.setattr(bundle_module, "load_bundle", lambda _path: hashed)
    assert run._hashed_before_a_gap(stamped, SimpleNamespace(gap=True), tiny_golden) is hashed

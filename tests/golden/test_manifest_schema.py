"""The manifest is checked against its schema before any other bundle file is touched (issue 23, items 7 and 10).

Each case was an exit 3 (IsADirectoryError, RecursionError, AttributeError, ValueError, OverflowError,
TypeError) or a pass (0 samples) before the schema: now exit 2, saying what is wrong.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gapcheck.cli.app import main
from gapcheck.errors import InputError
from gapcheck.golden import bundle as bundle_module
from gapcheck.golden import load_bundle


def _edit(change):
    def apply(b: Path) -> None:
        manifest = json.loads((b / "manifest.json").read_text())
        change(manifest)
        (b / "manifest.json").write_text(json.dumps(manifest))
    return apply


def _text(change):
    def apply(b: Path) -> None:
        (b / "manifest.json").write_text(change((b / "manifest.json").read_text()))
    return apply


def _folder_for_member(b: Path) -> None:
    (b / "reference_onnxruntime.safetensors").unlink()
    (b / "reference_onnxruntime.safetensors").mkdir()


CASES = {
    "a folder where a member file should be": (_folder_for_member, "is a folder"),
    "a deeply nested manifest": (_text(lambda t: t.rstrip().rstrip("}") + ', "x": ' + "[" * 100_000 + "]" * 100_000
                                       + "}"), "nested too deeply"),
    '"model": []': (_edit(lambda m: m.update(model=[])), "model: Input should be a valid dictionary"),
    "a NUL in a member name": (_edit(lambda m: m["files"].update({"a\x00b": {"sha256": "0" * 64, "bytes": 1}})),
                               "unsafe file name 'a\\x00b'"),
    '"count": Infinity': (_text(lambda t: t.replace('"count": 6', '"count": Infinity')),
                          "samples.count: Input should be a valid integer"),
    '"onnx": "x"': (_edit(lambda m: m.update(onnx="x")), "onnx: Input should be a valid dictionary"),
    "0 samples": (_edit(lambda m: m["samples"].update(count=0)), "samples.count: Input should be greater than or equal to 1"),
    "no outputs": (_edit(lambda m: m.update(outputs=[])), "outputs: List should have at least 1 item"),
    "a tolerance as text": (_edit(lambda m: m["tolerances"]["outputs"]["output"].update(rtol="1e-3")),
                            "tolerances.outputs.output.rtol"),
    "an escape in an output name": (_edit(lambda m: m["outputs"][0].update(name="\x1b[31mred")),
                                    "outputs.0.name: Value error, must be 1-256 printable characters"),
    "an object dtype": (_edit(lambda m: m["inputs"][0].update(dtype="object")), "inputs.0.dtype"),
    "a fractional count": (_edit(lambda m: m["samples"].update(count=6.5)), "samples.count"),
    "versions as a list": (_edit(lambda m: m.update(versions=[])), "versions: Input should be a valid dictionary"),
    "an onnx entry naming another hash": (_edit(lambda m: m["onnx"].update(sha256="1" * 64)), "its onnx entry"),
    "a tensor too large for any bundle": (_edit(lambda m: m["inputs"][0].update(shape=[1, 2**31, 2**31])), "would need"),
    "a recorded fingerprint that is no SHA256": (_edit(lambda m: m["samples"]["fingerprints"][2].update(x=5)),
                                                 "samples.fingerprints.2.x: Input should be a valid string"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_malformed_manifest_is_exit_2_saying_what_is_wrong(recorded: Path, tmp_path: Path, case: str,
                                                             capsys: pytest.CaptureFixture) -> None:
    damage, said = CASES[case]
    bundle = tmp_path / "copy"
    shutil.copytree(recorded, bundle)
    damage(bundle)
    capsys.readouterr()
    assert main(["golden", "verify", str(bundle)]) == 2
    err = capsys.readouterr().err
    assert said in err, err
    assert "\x1b" not in err and "\x00" not in err
    with pytest.raises(InputError):
        load_bundle(bundle)


def test_no_bundle_file_is_opened_before_the_manifest_passes_its_schema(recorded: Path, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = tmp_path / "copy"
    shutil.copytree(recorded, bundle)
    _edit(lambda m: m["samples"].update(count="6"))(bundle)
    opened: list[str] = []
    # Every file, the manifest included, is opened through _open_member (the members' reads then run on the thread
    # that hashes them).
    real = bundle_module._open_member
    monkeypatch.setattr(bundle_module, "_open_member", lambda folder, name, *a: opened.append(name) or real(folder, name, *a))
    with pytest.raises(InputError, match="samples.count"):
        load_bundle(bundle)
    assert opened == ["manifest.json"]
    _edit(lambda m: m["samples"].update(count=6))(bundle)  # the same bundle, valid: every member is opened after it
    load_bundle(bundle)
    assert opened[:2] == ["manifest.json", "manifest.json"] and "inputs.safetensors" in opened[2:]


def _garbage_onnx(bundle: Path) -> None:
    """model.onnx replaced by bytes that are no model, the manifest rewritten so every hash and size matches."""
    import hashlib

    data = b"\x00 not a model"
    (bundle / "model.onnx").write_bytes(data)
    _edit(lambda m: (m["files"]["model.onnx"].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest()),
                     m["onnx"].update(sha256=hashlib.sha256(data).hexdigest())))(bundle)


def test_verify_parses_the_recorded_onnx_export(recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bundle = tmp_path / "copy"
    shutil.copytree(recorded, bundle)
    _garbage_onnx(bundle)
    capsys.readouterr()
    assert main(["golden", "verify", str(bundle)]) == 2
    assert "model.onnx is not a valid ONNX model" in capsys.readouterr().err


def test_a_night_on_a_bundle_whose_onnx_does_not_parse_is_exit_2_not_an_unreachable_endpoint(
        recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from tests.nightly.fake_triton import FakeTriton

    bundle = tmp_path / "copy"
    shutil.copytree(recorded, bundle)
    _garbage_onnx(bundle)
    with FakeTriton(load_bundle(bundle), "ok") as fake:
        code = main(["nightly", "--golden", str(bundle), "--history", str(tmp_path / "h.sqlite"), "--retries", "0",
                     "--endpoint", f"prod={fake.url}"])
    assert code == 2
    assert "model.onnx is not a valid ONNX model" in capsys.readouterr().err

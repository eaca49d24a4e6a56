"""Issue 23's hostile inputs that the option groups own: each refused up front (exit 2), nothing recorded or written,
no secret printed, no user folder touched."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from gapcheck.cli.app import main
from gapcheck.golden import RecordRequest, record_bundle

FACTORY = "tests/nightly/models.py:build_tiny"
INPUT = "x:1x3x8x8:float32"
SECRET = "SECRET123"


pytestmark = pytest.mark.usefixtures("isolated_cache")  # tests/cli/conftest.py; no_model too


def _everything_written(folder) -> str:
    return "".join(p.read_bytes().decode("latin-1") for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("url", [f"https://hooks.example.com/services/T0/B0/{SECRET}\r?x=1",
                                 f"https://hooks.example.com/services/T0/B0/{SECRET}\n",
                                 f"https://hooks.example.com/ser vices/{SECRET}", f"ftp://hooks.example.com/{SECRET}",
                                 f"https://hooks.example.com:99999999/{SECRET}"])
def test_a_bad_webhook_url_is_refused_before_anything_is_recorded_and_never_shown(url, tmp_path, capsys):
    history = tmp_path / "h.sqlite"
    code = main(["nightly", "--golden", str(tmp_path / "g"), "--endpoint", "a=grpc://127.0.0.1:1/m", "--history",
                 str(history), "--webhook", url, "--json", str(tmp_path / "r.json")])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert SECRET not in out + err and not history.exists() and not (tmp_path / "r.json").exists()
    assert "hooks.example.com" in err or "webhook" in err


def test_a_bad_webhook_url_in_the_config_is_refused_too(tmp_path, capsys):
    config = tmp_path / "gapcheck.toml"
    config.write_text(f'[nightly]\nwebhook = "https://hooks.example.com/services/{SECRET}\\r"\n')
    assert main(["nightly", "--golden", str(tmp_path / "g"), "--endpoint", "a=grpc://127.0.0.1:1/m",
                 "--history", str(tmp_path / "h.sqlite"), "--config", str(config)]) == 2
    out, err = capsys.readouterr()
    assert SECRET not in out + err and not (tmp_path / "h.sqlite").exists()


@pytest.mark.parametrize("header", ["x-token:abc\r\nInjected: 1", "x-token:abc\n", "x-tok en:abc", "x-token:a\x1bb"])
@pytest.mark.parametrize("flag", ["--triton-header", "--header"])
def test_a_header_with_control_characters_is_refused_up_front(header, flag, tiny_bundle, tmp_path, capsys):
    history = tmp_path / "h.sqlite"
    code = main(["nightly", "--golden", str(tiny_bundle), "--endpoint", "a=grpc://127.0.0.1:1/m", "--history",
                 str(history), flag, header])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert not history.exists() and "abc" not in out + err


def test_a_header_with_a_newline_in_the_config_or_its_variable_is_refused_up_front(tiny_bundle, tmp_path, capsys,
                                                                                  monkeypatch):
    monkeypatch.setenv("TOKEN_WITH_NEWLINE", "abc\r\nInjected: 1")
    for headers in ('{ authorization = "abc\\r\\nx: 1" }', '{ authorization = "${TOKEN_WITH_NEWLINE}" }'):
        config = tmp_path / "gapcheck.toml"
        config.write_text(f'[nightly]\n[[nightly.endpoints]]\nname = "a"\nurl = "grpc://127.0.0.1:1/m"\n'
                          f'headers = {headers}\n')
        code = main(["nightly", "--golden", str(tiny_bundle), "--history", str(tmp_path / "h.sqlite"), "--config",
                     str(config)])
        out, err = capsys.readouterr()
        assert code == 2, err
        assert not (tmp_path / "h.sqlite").exists() and "abc" not in out + err


@pytest.mark.parametrize(("flag", "value"), [("--lock-wait", "nan"), ("--deadline", "nan"), ("--triton-deadline", "inf"),
                                             ("--lock-wait", "1e309"), ("--timeout", "nan")])
def test_nightly_numbers_that_would_hang_or_disable_a_check_are_refused(flag, value, tiny_bundle, tmp_path, capsys):
    history = tmp_path / "h.sqlite"
    assert main(["nightly", "--golden", str(tiny_bundle), "--endpoint", "a=grpc://127.0.0.1:1/m", "--history",
                 str(history), flag, value]) == 2
    assert "must be" in capsys.readouterr().err and not history.exists()


@pytest.fixture
def tiny_bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "b"
    record_bundle(RecordRequest(out=out, factory=FACTORY, input_specs=(INPUT,), num_samples=2, exporter="torchscript"))
    return out


def _record(out, *extra):
    return main(["golden", "record", "--out", str(out), "--model", FACTORY, "--input", INPUT, "--num-samples", "2",
                 "--exporter", "torchscript", *extra])


def test_overwrite_refuses_a_folder_that_is_not_a_bundle(tmp_path, no_model, capsys):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "keep.txt").write_text("precious")
    assert _record(folder, "--overwrite") == 2
    assert "not a golden bundle" in capsys.readouterr().err
    assert (folder / "keep.txt").read_text() == "precious" and sorted(os.listdir(folder)) == ["keep.txt"]
    # a folder whose manifest claims to be something else is no bundle either
    (folder / "manifest.json").write_text(json.dumps({"kind": "not-gapcheck"}))
    assert _record(folder, "--overwrite") == 2 and (folder / "keep.txt").exists()


def test_overwrite_refuses_a_symbolic_link_before_any_work(tmp_path, tiny_bundle, no_model, capsys):
    link = tmp_path / "link"
    link.symlink_to(tiny_bundle, target_is_directory=True)
    assert _record(link, "--overwrite") == 2
    assert "symbolic link" in capsys.readouterr().err
    assert link.is_symlink() and (tiny_bundle / "manifest.json").exists()


def test_overwrite_replaces_a_bundle_atomically(tmp_path, tiny_bundle):
    before = json.loads((tiny_bundle / "manifest.json").read_text())
    assert _record(tiny_bundle, "--overwrite", "--seed", "7") == 0
    after = json.loads((tiny_bundle / "manifest.json").read_text())
    assert after["samples"]["seed"] == 7 and before["samples"]["seed"] == 0
    leftovers = [p.name for p in tiny_bundle.parent.iterdir() if p.name.startswith(".")]
    assert not leftovers  # no staging or set-aside folder left behind
    assert _record(tiny_bundle) == 2  # without --overwrite an existing bundle stays


def test_an_empty_bundle_is_refused_at_record(tmp_path, capsys):
    empty = tmp_path / "empty.npz"
    np.savez(empty, x=np.zeros((0, 1, 3, 8, 8), dtype=np.float32))
    code = main(["golden", "record", "--out", str(tmp_path / "b"), "--model", FACTORY, "--input", INPUT,
                 "--inputs", str(empty), "--exporter", "torchscript"])
    assert code == 2, capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_save_onnx_naming_a_folder_is_refused_before_the_export(tmp_path, no_model, capsys):
    code = main(["export-diff", "--model", FACTORY, "--input", INPUT, "--save-onnx", str(tmp_path), "--no-progress"])
    assert code == 2
    assert "--save-onnx" in capsys.readouterr().err

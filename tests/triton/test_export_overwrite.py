"""Issue 23: `gapcheck export` never replaces a deployed model without --overwrite, and never writes through a linked
repository or model folder (exit 2 before any work, the deployed files byte for byte)."""
from __future__ import annotations

import os

import pytest

from gapcheck.cli.app import main
from gapcheck.errors import UsageError
from gapcheck.triton.repository import check_model_target, check_repository_dir

FACTORY = "tests/nightly/models.py:build_tiny"
INPUT = "x:1x3x8x8:float32"
DEPLOYED = b'name: "m"\nplatform: "onnxruntime_onnx"\n'


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GAPCHECK_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def deployed(tmp_path):
    model = tmp_path / "keepdir" / "m"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_bytes(DEPLOYED)
    (model / "1" / "model.onnx").write_bytes(b"the served graph")
    return model


def _snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _export(repo, *extra):
    return main(["export", "--model", FACTORY, "--input", INPUT, "--triton-repo", str(repo), "--name", "m", *extra])


def test_an_existing_model_is_refused_before_any_work(deployed, capsys, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded: the existing deployment should have been refused first")
    monkeypatch.setattr("gapcheck.model.loading.load_model", refuse)
    before = _snapshot(deployed)
    assert _export(deployed.parent) == 2
    err = capsys.readouterr().err
    assert "already holds a model" in err and "--overwrite" in err
    assert _snapshot(deployed) == before


def test_overwrite_replaces_the_model(deployed, capsys):
    assert _export(deployed.parent, "--overwrite") == 0
    assert b'name: "m"' in (deployed / "config.pbtxt").read_bytes()
    assert (deployed / "config.pbtxt").read_bytes() != DEPLOYED
    assert (deployed / "1" / "model.onnx").read_bytes() != b"the served graph"


def test_a_new_name_beside_a_deployed_model_is_written(deployed, capsys):
    assert main(["export", "--model", FACTORY, "--input", INPUT, "--triton-repo", str(deployed.parent), "--name",
                 "other"]) == 0
    assert (deployed.parent / "other" / "config.pbtxt").is_file()
    assert (deployed / "config.pbtxt").read_bytes() == DEPLOYED


def test_an_empty_model_folder_is_not_a_deployed_model(tmp_path, capsys):
    (tmp_path / "repo" / "m").mkdir(parents=True)
    assert _export(tmp_path / "repo") == 0
    assert (tmp_path / "repo" / "m" / "1" / "model.onnx").is_file()


@pytest.mark.parametrize("overwrite", [(), ("--overwrite",)])
def test_a_linked_repository_is_refused(deployed, tmp_path, capsys, overwrite):
    link = tmp_path / "repo-link"
    os.symlink(deployed.parent, link)
    before = _snapshot(deployed)
    assert _export(link, *overwrite) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert _snapshot(deployed) == before


@pytest.mark.parametrize("overwrite", [(), ("--overwrite",)])
def test_a_linked_model_folder_is_refused(deployed, tmp_path, capsys, overwrite):
    repo = tmp_path / "repo"
    repo.mkdir()
    os.symlink(deployed, repo / "m")
    before = _snapshot(deployed)
    assert _export(repo, *overwrite) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert _snapshot(deployed) == before


def test_the_library_checks(deployed, tmp_path):
    with pytest.raises(UsageError, match="already holds a model"):
        check_model_target(deployed.parent, "m", 1, overwrite=False)
    check_model_target(deployed.parent, "m", 1, overwrite=True)
    check_model_target(deployed.parent, "new", 1, overwrite=False)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="not a directory"):
        check_model_target(tmp_path, "file", 1)
    os.symlink(deployed.parent, tmp_path / "link")
    with pytest.raises(UsageError, match="symbolic link"):
        check_repository_dir(tmp_path / "link")

"""Attacker review of preprocess-audit: a local sample's size limit (D8), the hint for a path stage declared ,bytes
(D13), and stage errors that name the user's stage file, not gapcheck's internal module name."""
from __future__ import annotations

import os
import shutil
import textwrap

import pytest

from gapcheck import limits
from gapcheck.cli.app import main
from gapcheck.codes.preprocess import UNREADABLE
from gapcheck.errors import UsageError
from gapcheck.preprocess import samples
from gapcheck.preprocess.samples import read_regular_file
from gapcheck.preprocess.stages import make_spec, resolve
from gapcheck.preprocess.worker import WorkerOptions, WorkItem, _stage_error_text, process_sample
from tests.preprocess.conftest import SKIMAGE_DATA, _png_with_size, stage

OPTIONS = WorkerOptions(max_pixels=samples.DEFAULT_MAX_PIXELS, repeats=0, ks_points=64)


def _sparse_png(path, size: int):
    """A file of ``size`` bytes that starts as a PNG and takes no disk (a hole after the header): never a real
    file of that size in a test."""
    path.write_bytes(_png_with_size(64, 64))
    os.truncate(path, size)
    return path


# --- D8: a local sample over the limit is a bad input, never read -----------------------------------------------------

def test_one_limit_for_local_and_remote_samples():
    assert samples.MAX_SAMPLE_BYTES == limits.MAX_SAMPLE_BYTES == 512 * 2**20


def test_a_local_sample_over_the_limit_is_refused_before_a_byte_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(samples, "MAX_SAMPLE_BYTES", 1000)
    big = tmp_path / "big.png"
    big.write_bytes(_png_with_size(8, 8) + b"\0" * 2000)
    reads = []
    real_read = os.read
    monkeypatch.setattr(samples.os, "read", lambda fd, n: reads.append(n) or real_read(fd, n))
    with pytest.raises(OSError) as info:
        read_regular_file(str(big))
    assert str(info.value) == (f"too large: {big.stat().st_size:,} bytes, more than the limit of 1,000 bytes "
                               f"({1000 / 2**20:g} MiB): not read")
    assert reads == []  # checked on the open descriptor (fstat), nothing read
    small = tmp_path / "small.png"
    small.write_bytes(_png_with_size(8, 8))
    assert read_regular_file(str(small)) == small.read_bytes()  # under the limit: read as before, as bytes
    assert isinstance(read_regular_file(str(small)), bytes)


def test_a_remote_sample_over_the_same_limit_says_the_same(monkeypatch):
    fsspec = pytest.importorskip("fsspec")
    monkeypatch.setattr(samples, "MAX_SAMPLE_BYTES", 1000)
    with fsspec.open("memory://gapcheck-limits/big.png", "wb") as out:
        out.write(b"\0" * 5000)
    try:
        with pytest.raises(OSError, match=r"^too large: 5,000 bytes, more than the limit of 1,000 bytes"):
            read_regular_file("memory://gapcheck-limits/big.png")
    finally:
        fsspec.filesystem("memory").rm("/gapcheck-limits", recursive=True)


def test_no_stage_is_given_a_sample_over_the_limit_path_or_bytes(tmp_path):
    """The sparse file is one byte over the real limit: the old code read all 512 MiB and gave them to both stages."""
    big = _sparse_png(tmp_path / "big.png", samples.MAX_SAMPLE_BYTES + 1)
    called = []
    by_path, by_bytes = make_spec("p", function=called.append), make_spec("b", function=called.append, accepts="bytes")
    record = process_sample([(by_path, called.append), (by_bytes, called.append)],
                            WorkItem(0, str(big), keep_arrays=False, probe=False), OPTIONS)
    assert called == [] and record.stages == ()
    assert record.issue is not None and record.issue.code is UNREADABLE and record.issue.skipped
    assert record.issue.detail == (f"too large: {samples.MAX_SAMPLE_BYTES + 1:,} bytes, more than the limit of "
                                   f"{samples.MAX_SAMPLE_BYTES:,} bytes (512 MiB): not read")


def test_cli_counts_a_sample_over_the_limit_as_a_bad_input_and_audits_the_rest(tmp_path, capsys):
    folder = tmp_path / "samples"
    folder.mkdir()
    shutil.copy(SKIMAGE_DATA / "astronaut.png", folder / "a.png")
    shutil.copy(SKIMAGE_DATA / "coffee.png", folder / "b.png")
    _sparse_png(folder / "c_big.png", 1_200_000_000)  # the review's 1.2 GB sample
    code = main(["preprocess-audit", "--samples", str(folder), "--stage", f"train={stage('train_transform')}",
                 "--stage", f"infer={stage('infer_transform')}", "--workers", "1", "--repeats", "0", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    assert "2/3 samples audited" in out and "1 bad input(s)" in out
    assert "too large: 1,200,000,000 bytes" in " ".join(out.split())


# --- D13: a stage that takes a path, declared ,bytes ----------------------------------------------------------------

def _opens_a_path(path):
    from PIL import Image

    with Image.open(path) as image:
        return __import__("numpy").asarray(image.convert("RGB"))


def test_a_path_stage_declared_bytes_gets_the_symmetric_hint(photos):
    spec = make_spec("infer", target="pkg.pre:load", accepts="bytes")
    record = process_sample([(spec, _opens_a_path)],
                            WorkItem(0, str(photos / "astronaut.png"), keep_arrays=False, probe=False), OPTIONS)
    error = record.stages[0].error
    assert error.startswith("ValueError: embedded null byte (stage infer was given the file's bytes")
    assert ",bytes / accepts = \"bytes\"" in error and "--stage infer=pkg.pre:load (without ,bytes)" in error


def test_bytes_used_as_a_file_name_are_said_not_dumped():
    spec = make_spec("infer", target="pkg.pre:load", accepts="bytes")
    with pytest.raises(OSError) as info:
        open(b"\x89PNG-no-nul" * 40, "rb")  # noqa: SIM115 - the error is the point
    error = _stage_error_text(spec, info.value)
    assert "File name too long: a file name of 440 bytes (the file's bytes?)" in error and "\\x89" not in error
    assert "was given the file's bytes" in error


def test_no_hint_for_an_error_that_is_not_about_the_argument():
    as_bytes = make_spec("infer", target="pkg.pre:load", accepts="bytes")
    as_path = make_spec("infer", target="pkg.pre:load")
    assert _stage_error_text(as_bytes, ValueError("expected an HxWx3 image")) == "ValueError: expected an HxWx3 image"
    assert _stage_error_text(as_path, ValueError("embedded null byte")) == "ValueError: embedded null byte"


# --- the user's stage file, not gapcheck's module name -------------------------------------------------------------

STAGE_FILE = textwrap.dedent("""
    import sys


    class Thing:
        pass


    class Broken(Exception):
        pass


    def raises_with_object(path):
        raise Broken(Thing())


    def missing_global(path):
        return sys.modules[__name__].missing
""")


def test_stage_errors_name_the_users_file(tmp_path, photos, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_stages.py").write_text(STAGE_FILE)
    item = WorkItem(0, str(photos / "astronaut.png"), keep_arrays=False, probe=False)
    specs = [make_spec(name, target=f"my_stages.py:{name}") for name in ("raises_with_object", "missing_global")]
    record = process_sample([(spec, resolve(spec)) for spec in specs], item, OPTIONS)
    errors = [o.error for o in record.stages]
    assert errors == ["Broken: <my_stages.py:Thing object>",
                      "AttributeError: module 'my_stages.py' has no attribute 'missing'"]


def test_a_missing_stage_function_names_the_users_file(tmp_path, photos, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_stages.py").write_text(STAGE_FILE)
    with pytest.raises(UsageError) as info:
        resolve(make_spec("b", target="my_stages.py:Thing.nope"))
    assert "'my_stages.py:Thing' has no attribute 'nope'" in str(info.value)
    code = main(["preprocess-audit", "--samples", str(photos), "--stage", f"a={stage('train_transform')}",
                 "--stage", "b=my_stages.py:raises_with_objct", "--n", "1", "--workers", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "'my_stages.py' has no attribute 'raises_with_objct'" in err
    assert "gapcheck_factory" not in err


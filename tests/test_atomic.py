"""gapcheck.atomic: the one atomic writer every layer uses (reports, cache entries, bundle files, Triton configs)."""
from __future__ import annotations

import os

import pytest

from gapcheck.atomic import check_folder, write_atomic
from gapcheck.errors import UsageError


def test_text_and_bytes_are_written_whole_and_replace_the_old_file(tmp_path):
    target = tmp_path / "deep" / "out.bin"
    write_atomic(target, "héllo\n")
    assert target.read_bytes() == "héllo\n".encode()
    write_atomic(target, b"\x00\x01raw")
    assert target.read_bytes() == b"\x00\x01raw"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.bin"]  # no temp file left behind


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "keep.txt"
    target.write_text("old")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        write_atomic(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_a_link_is_never_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("mine")
    link = tmp_path / "cache.onnx"
    link.symlink_to(victim)
    with pytest.raises(UsageError, match="cache entry path .* symbolic link"):
        write_atomic(link, b"x", what="cache entry")
    assert victim.read_text() == "mine"


def test_check_folder_names_the_first_existing_folder_and_what_is_wrong_with_it(tmp_path):
    assert check_folder(tmp_path / "a" / "b", "out") == tmp_path
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match=r"^repo: .*file is not a directory$"):
        check_folder(tmp_path / "file" / "sub", "repo")

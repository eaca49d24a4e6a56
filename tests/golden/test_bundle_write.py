"""Bundle members are written by the one atomic writer (gapcheck.atomic.write_atomic)."""
from __future__ import annotations

import os

import pytest

from gapcheck.atomic import write_atomic
from gapcheck.errors import UsageError


def test_member_written_whole_with_umask_permissions_and_no_temp_left(tmp_path):
    target = tmp_path / "manifest.json"
    write_atomic(target, b'{"a": 1}', what="golden bundle file")
    write_atomic(target, b'{"a": 2}', what="golden bundle file")
    assert target.read_bytes() == b'{"a": 2}' and [p.name for p in tmp_path.iterdir()] == ["manifest.json"]
    mask = os.umask(0)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask


def test_a_link_in_a_members_place_is_refused_and_left_alone(tmp_path):
    elsewhere = tmp_path / "user.txt"
    elsewhere.write_text("keep")
    link = tmp_path / "bundle" / "manifest.json"
    link.parent.mkdir()
    link.symlink_to(elsewhere)
    with pytest.raises(UsageError, match="symbolic link"):
        write_atomic(link, b"{}", what="golden bundle file")
    assert link.is_symlink() and elsewhere.read_text() == "keep"

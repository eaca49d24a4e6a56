"""Verification stamps (issue 23, item 14): a bundle verified in full is not hashed again while its files are the very
files verified; any change to a file (its bytes, its times, a replacement) verifies it in full again."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from gapcheck.errors import InputError
from gapcheck.golden import bundle as bundle_module
from gapcheck.golden import stamps as stamps_module
from gapcheck.golden.bundle import open_bundle
from gapcheck.golden.manifest import INPUTS_FILE, TORCH_FILE
from gapcheck.golden.stamps import Stamps


@pytest.fixture
def bundle(recorded: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "golden"
    shutil.copytree(recorded, copy)
    return copy


@pytest.fixture
def stamps(tmp_path: Path) -> Stamps:
    # racy_ns=0: the copy was just written; the default refuses to stamp files changed in the last 60 s
    return Stamps(tmp_path / "verified", racy_ns=0)


def _no_hashing(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args, **_kwargs):
        raise AssertionError("a stamped bundle is not hashed")

    monkeypatch.setattr(bundle_module, "verified_fingerprints", refuse)
    monkeypatch.setattr(bundle_module, "safetensors_header_sha256", refuse)


def test_a_verified_bundle_is_stamped_and_then_not_hashed_again(bundle, stamps, monkeypatch) -> None:
    first = open_bundle(bundle, stamps=stamps).result()
    assert first.verified_by == "sha256" and first.summary()["verified_by"] == "sha256"
    assert len(list(stamps.folder.glob("*.json"))) == 1
    _no_hashing(monkeypatch)
    second = open_bundle(bundle, stamps=stamps).result()
    assert second.verified_by == "stamp"
    for name, array in first.inputs.items():
        np.testing.assert_array_equal(second.inputs[name], array)
    assert second.fingerprints == first.fingerprints and second.bundle_hash == first.bundle_hash


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))


def test_a_changed_file_is_verified_in_full_even_with_its_times_put_back(bundle, stamps) -> None:
    open_bundle(bundle, stamps=stamps).result()
    inputs = bundle / INPUTS_FILE
    before = inputs.stat()
    _flip_last_byte(inputs)  # same size, one sample's value changed
    os.utime(inputs, ns=(before.st_atime_ns, before.st_mtime_ns))  # the change time cannot be put back
    with pytest.raises(InputError, match="fingerprint|SHA256"):
        open_bundle(bundle, stamps=stamps).result()


def test_a_replaced_file_is_verified_in_full(bundle, stamps) -> None:
    open_bundle(bundle, stamps=stamps).result()
    inputs = bundle / INPUTS_FILE
    data = bytearray(inputs.read_bytes())
    data[-1] ^= 1
    replacement = bundle / "replacement"
    replacement.write_bytes(bytes(data))
    os.replace(replacement, inputs)
    with pytest.raises(InputError):
        open_bundle(bundle, stamps=stamps).result()


def test_a_stamp_is_only_kept_for_files_older_than_the_racy_window(bundle, tmp_path) -> None:
    stamps = Stamps(tmp_path / "verified")  # the default window (60 s): the copy was written just now
    assert open_bundle(bundle, stamps=stamps).result().verified_by == "sha256"
    assert not stamps.folder.exists() or not list(stamps.folder.glob("*.json"))
    assert open_bundle(bundle, stamps=stamps).result().verified_by == "sha256"


def test_a_foreign_or_forged_stamp_is_no_stamp(bundle, stamps, monkeypatch) -> None:
    open_bundle(bundle, stamps=stamps).result()
    (stamp,) = stamps.folder.glob("*.json")
    recorded = json.loads(stamp.read_text())
    # a stamp for other files (the identity of another file) is not these files' stamp
    stamp.write_text(json.dumps({**recorded, "files": {k: [0, 0, 0, 0, 0] for k in recorded["files"]}}))
    assert open_bundle(bundle, stamps=stamps).result().verified_by == "sha256"
    # a link in the stamp's place is never followed
    target = stamp.with_name("elsewhere")
    target.write_text(json.dumps(recorded))
    stamp.unlink()
    stamp.symlink_to(target)
    assert open_bundle(bundle, stamps=stamps).result().verified_by == "sha256"
    # garbage, or a stamp of another owner, is no stamp either
    stamp.unlink()
    stamp.write_bytes(b"\x00not json")
    assert open_bundle(bundle, stamps=stamps).result().verified_by == "sha256"
    stamp.write_text(json.dumps(recorded))
    monkeypatch.setattr(os, "getuid", lambda: os.stat(stamp).st_uid + 4242)
    assert open_bundle(bundle, stamps=stamps).result().verified_by == "sha256"


def _vm(folder: Path, expire: int = 3000, every: int = 500, laptop: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, value in (("dirty_expire_centisecs", expire), ("dirty_writeback_centisecs", every),
                        ("laptop_mode", laptop)):
        (folder / name).write_text(f"{value}\n")
    return folder


def test_stamps_are_on_by_default_where_the_kernel_writes_dirty_pages_back(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("GAPCHECK_CACHE_DIR", str(tmp_path / "cache" / "exports"))
    monkeypatch.delenv("GAPCHECK_VERIFY_STAMPS", raising=False)
    monkeypatch.setattr(stamps_module, "_VM", _vm(tmp_path / "vm"))
    assert Stamps.default() == Stamps(tmp_path / "cache" / "gapcheck-verified")  # a folder named as gapcheck's
    assert Stamps.default().racy_ns == 60_000_000_000  # past the default dirty-page writeback (30 s + 5 s)
    monkeypatch.setenv("GAPCHECK_CACHE_DIR", str(tmp_path / "gapcheck" / "exports"))  # the default's layout
    assert Stamps.default().folder == tmp_path / "gapcheck" / "verified"
    monkeypatch.setenv("GAPCHECK_VERIFY_STAMPS", "0")  # turned off: every file hashed every night
    assert Stamps.default() is None
    monkeypatch.setenv("GAPCHECK_VERIFY_STAMPS", "1")
    # a slower writeback widens the racy window past it; no writeback at all (or laptop mode): no stamps
    monkeypatch.setattr(stamps_module, "_VM", _vm(tmp_path / "slow", expire=9000, every=1000))
    assert Stamps.default().racy_ns == 110_000_000_000
    for off in ({"expire": 0}, {"every": 0}, {"laptop": 5}):
        monkeypatch.setattr(stamps_module, "_VM", _vm(tmp_path / f"off-{len(str(off))}-{next(iter(off))}", **off))
        assert Stamps.default() is None, off
    monkeypatch.setattr(stamps_module, "_VM", tmp_path / "missing")  # cannot be asked: no stamps
    assert Stamps.default() is None


def test_a_file_others_can_write_is_never_taken_on_a_stamp(bundle, stamps, monkeypatch) -> None:
    # Someone who may write a file may hold a writable mapping of it, whose writes to a dirty page set no time:
    # a group-writable file, another owner's file, or a filesystem whose pages are not written back is hashed.
    inputs = bundle / INPUTS_FILE
    fd = os.open(inputs, os.O_RDONLY)
    try:
        assert Stamps.refusal(fd) is None  # the copy: ours, 0644, on this disk
        os.chmod(inputs, 0o664)
        assert "group or others" in Stamps.refusal(fd)
        os.chmod(inputs, 0o644)
        owner = os.fstat(fd).st_uid
        if owner == 0:  # root's files are trusted whoever runs: give the file to another user instead
            os.chown(inputs, 4242, -1)
        else:
            monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
        assert "another user" in Stamps.refusal(fd)
        monkeypatch.undo()
        if owner == 0:
            os.chown(inputs, 0, -1)
        monkeypatch.setattr(stamps_module, "filesystem_type", lambda _fd: 0x01021994)  # tmpfs
        assert "local disk filesystem" in Stamps.refusal(fd)
        monkeypatch.setattr(stamps_module, "filesystem_type", lambda _fd: None)
        assert "cannot be told" in Stamps.refusal(fd)
    finally:
        os.close(fd)
    monkeypatch.undo()
    os.chmod(bundle / "model.onnx", 0o666)  # one file is enough
    refused = open_bundle(bundle, stamps=stamps).result()
    assert refused.verified_by == "sha256"
    # said in the reports: a user sees why every night hashes the bundle (the verification review)
    assert refused.summary()["stamp_refused"] == "file model.onnx: its group or others may write it"
    assert not stamps.folder.exists() or not list(stamps.folder.glob("*.json"))  # nothing stamped
    os.chmod(bundle / "model.onnx", 0o644)
    open_bundle(bundle, stamps=stamps).result()
    assert len(list(stamps.folder.glob("*.json"))) == 1
    monkeypatch.setattr(stamps_module, "filesystem_type", lambda _fd: 0x01021994)
    _no_hashing(monkeypatch)
    with pytest.raises(InputError, match="a stamped bundle is not hashed"):  # it was hashed: the refusal above
        open_bundle(bundle, stamps=stamps).result()  # the stamp is there, the filesystem is not one to trust


def test_without_stamps_nothing_is_written_or_read(bundle, tmp_path) -> None:
    assert open_bundle(bundle).result().verified_by == "sha256"
    assert open_bundle(bundle).result().verified_by == "sha256"


def test_a_file_rewritten_between_its_open_and_its_read_is_hashed_not_taken_on_the_stamp(bundle, stamps,
                                                                                         monkeypatch) -> None:
    # The attacker review (D4): the stamp is looked at when the files are opened, their bytes read later; a watcher
    # that rewrites a file in between (same size, bytes changed) must not be taken on the stamp.
    open_bundle(bundle, stamps=stamps).result()
    reference = bundle / TORCH_FILE
    read = bundle_module._read_opened

    def rewritten_first(folder, name, fd, size):
        if name == TORCH_FILE:
            data = bytearray(reference.read_bytes())
            data[-2] ^= 0x40
            with open(reference, "r+b") as handle:  # in place: the descriptor already open sees the new bytes
                handle.write(bytes(data))
        return read(folder, name, fd, size)

    monkeypatch.setattr(bundle_module, "_read_opened", rewritten_first)
    with pytest.raises(InputError, match=f"{TORCH_FILE} does not match its SHA256"):
        open_bundle(bundle, stamps=stamps).result()


def test_a_stamp_folder_that_is_a_link_or_not_private_is_neither_written_nor_read(bundle, tmp_path) -> None:
    # The attacker review (D15): a link planted where the stamps live was followed and the stamp written at its target.
    elsewhere = tmp_path / "planted"
    elsewhere.mkdir(mode=0o700)
    link = tmp_path / "verified"
    link.symlink_to(elsewhere)
    stamps = Stamps(link, racy_ns=0)
    open_bundle(bundle, stamps=stamps).result()
    assert not list(elsewhere.iterdir())  # nothing written through the link
    link.unlink()
    shared = Stamps(tmp_path / "shared", racy_ns=0)
    open_bundle(bundle, stamps=shared).result()
    (stamp,) = shared.folder.glob("*.json")  # a private folder: stamped
    os.chmod(shared.folder, 0o755)  # others may now look in (and, were it theirs, plant): no stamp is taken from it
    assert open_bundle(bundle, stamps=shared).result().verified_by == "sha256"
    os.chmod(shared.folder, 0o700)
    assert open_bundle(bundle, stamps=shared).result().verified_by == "stamp"

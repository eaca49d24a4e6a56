"""The one checked open and exact read of a hostile file (``gapcheck.reading``): what is refused, that it is refused on
the open descriptor before anything is read, that a FIFO never blocks, that a file growing or shrinking while read is
caught, and that no descriptor is left open either way. The callers' own words are pinned in their tests
(tests/model/test_cache_integrity.py, tests/text/, tests/golden/)."""
from __future__ import annotations

import os
import stat
import sys
import threading
from pathlib import Path

import pytest

from gapcheck import reading
from gapcheck.reading import Opened, ReadRefused, Refusal, open_checked, read_checked, read_exact

DATA = bytes(range(256)) * 40  # 10,240 bytes

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX links, FIFOs and owners")


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else set()


@pytest.fixture
def no_leak():
    """Every descriptor the test's calls open is closed again, refused or not."""
    before = _open_fds()
    yield
    assert _open_fds() <= before


@pytest.fixture
def regular(tmp_path: Path) -> Path:
    path = tmp_path / "data.bin"
    path.write_bytes(DATA)
    return path


def _refused(reason: Refusal, path: Path, **options) -> ReadRefused:
    with pytest.raises(ReadRefused) as caught:
        read_checked(path, **options)
    assert caught.value.reason is reason and str(caught.value) == reason.value
    return caught.value


def test_an_exact_read_returns_the_bytes_in_one_buffer_and_closes_the_descriptor(regular, no_leak):
    opened = open_checked(regular, owners={os.stat(regular).st_uid}, max_bytes=len(DATA), expected_bytes=len(DATA))
    assert isinstance(opened, Opened) and opened.size == len(DATA)
    data = read_exact(*opened)
    assert type(data) is bytearray and data == DATA
    with pytest.raises(OSError):
        os.fstat(opened.fd)  # closed by the read
    assert read_checked(regular) == DATA


def test_an_empty_file_reads_as_no_bytes(tmp_path, no_leak):
    (tmp_path / "empty").write_bytes(b"")
    assert read_checked(tmp_path / "empty", expected_bytes=0) == bytearray()


def test_a_missing_file_is_the_callers_to_word(tmp_path, no_leak):
    with pytest.raises(FileNotFoundError):
        open_checked(tmp_path / "absent")


@posix_only
def test_a_symbolic_link_is_refused_unless_links_are_followed(regular, tmp_path, no_leak):
    link = tmp_path / "link.bin"
    link.symlink_to(regular)
    _refused(Refusal.LINK, link)
    assert read_checked(link, follow_links=True) == DATA  # a samples file may be a link to a data set
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    _refused(Refusal.LINK, dangling)  # a link, not a missing file


@posix_only
def test_without_o_nofollow_the_link_is_looked_for_before_the_open(regular, tmp_path, monkeypatch, no_leak):
    """Windows has no O_NOFOLLOW: the fallback looks at the name first (as the cache and the bundle always did)."""
    monkeypatch.setattr(reading, "_NOFOLLOW", 0)
    link = tmp_path / "link.bin"
    link.symlink_to(regular)
    _refused(Refusal.LINK, link)
    assert read_checked(regular) == DATA


@posix_only
def test_a_fifo_is_refused_on_its_descriptor_without_blocking(tmp_path, no_leak):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []
    worker = threading.Thread(target=lambda: _capture(outcome, fifo), daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # unblock the open so the thread ends, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("opening a FIFO waited for a writer")
    (exc,) = outcome
    assert isinstance(exc, ReadRefused) and exc.reason is Refusal.NOT_REGULAR and stat.S_ISFIFO(exc.mode)


def _capture(outcome: list[BaseException], path: Path) -> None:
    try:
        read_checked(path, follow_links=True)
    except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
        outcome.append(exc)


@posix_only
def test_a_directory_is_refused(tmp_path, no_leak):
    exc = _refused(Refusal.NOT_REGULAR, tmp_path)
    assert stat.S_ISDIR(exc.mode)


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX owners")
def test_a_file_of_an_untrusted_owner_is_refused(regular, no_leak):
    """Testable as any user (root too): the trusted set names someone else."""
    owner = os.stat(regular).st_uid
    exc = _refused(Refusal.OWNER, regular, owners={owner + 4242})
    assert exc.uid == owner
    assert read_checked(regular, owners={owner, owner + 4242}) == DATA


def test_a_file_over_the_limit_is_refused_before_anything_is_read(regular, monkeypatch, no_leak):
    def no_read(*args, **kwargs):
        raise AssertionError("the file was opened for reading")

    monkeypatch.setattr(reading, "open", no_read, raising=False)  # read_exact's only way to read
    exc = _refused(Refusal.TOO_LARGE, regular, max_bytes=len(DATA) - 1)
    assert (exc.size, exc.limit) == (len(DATA), len(DATA) - 1)


def test_a_size_other_than_the_recorded_one_is_refused_before_reading(regular, no_leak):
    exc = _refused(Refusal.SIZE, regular, expected_bytes=len(DATA) + 7, max_bytes=len(DATA) * 2)
    assert (exc.size, exc.expected) == (len(DATA), len(DATA) + 7)
    # the recorded size is checked before the limit: "truncated or replaced" is the truer word for a recorded file
    assert _refused(Refusal.SIZE, regular, expected_bytes=1, max_bytes=1).expected == 1


def test_a_file_that_grew_after_its_size_was_taken_is_caught(regular, no_leak):
    fd, size = open_checked(regular)
    with regular.open("ab") as handle:
        handle.write(b"appended while read")
    with pytest.raises(ReadRefused) as caught:
        read_exact(fd, size)
    assert caught.value.reason is Refusal.GREW and caught.value.expected == len(DATA)
    assert caught.value.size == len(DATA) + 1  # it stops one byte past: a growing file is not read to its end


def test_a_file_that_shrank_after_its_size_was_taken_is_caught(regular, no_leak):
    fd, size = open_checked(regular)
    os.truncate(regular, 100)
    with pytest.raises(ReadRefused) as caught:
        read_exact(fd, size)
    assert caught.value.reason is Refusal.SHRANK and (caught.value.size, caught.value.expected) == (100, len(DATA))


@pytest.mark.parametrize("claimed,reason", [(len(DATA) - 1, Refusal.GREW), (len(DATA) + 1, Refusal.SHRANK),
                                            (0, Refusal.GREW)])
def test_a_size_mismatch_is_caught_by_the_reads_themselves(regular, no_leak, claimed, reason):
    fd, _ = open_checked(regular)
    with pytest.raises(ReadRefused) as caught:
        read_exact(fd, claimed)
    assert caught.value.reason is reason


@posix_only
def test_short_reads_fill_the_one_buffer_in_order(no_leak):
    """A read may return less than asked (here a pipe fed in pieces): the loop fills the buffer where it left off."""
    read_end, write_end = os.pipe()

    def feed() -> None:
        for start in range(0, len(DATA), 1000):
            os.write(write_end, DATA[start:start + 1000])
        os.close(write_end)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    assert read_exact(read_end, len(DATA)) == DATA
    writer.join(10)


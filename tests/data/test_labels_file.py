"""``leakage --labels``: a FIFO, a link to /dev/zero, a folder or an oversized file is refused with exit 2 and one
line before any split is read (issue 23: a FIFO hung, /dev/zero was read forever)."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from gapcheck.cli.app import main
from gapcheck.data import api
from gapcheck.errors import InputError


def _run(photo_splits, labels: Path, capsys) -> tuple[int, str]:
    code = main(["leakage", "--split", f"train={photo_splits['train']}", "--split",
                 f"val={photo_splits['clean_val']}", "--engine", "serial", "--labels", str(labels)])
    captured = capsys.readouterr()
    return code, captured.err + captured.out


@pytest.fixture(autouse=True)
def _bounded():
    """A regression would hang (a FIFO's open waits for a writer): fail the test after 60 s instead."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def hung(*_: object) -> None:
        raise TimeoutError("the labels file check hung")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _one_error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    return lines[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_is_refused_without_waiting_for_a_writer(photo_splits, tmp_path, capsys):
    fifo = tmp_path / "fifo.pt"
    os.mkfifo(fifo)
    code, output = _run(photo_splits, fifo, capsys)
    assert code == 2
    assert "not a regular file" in _one_error_line(output)


def test_a_link_to_dev_zero_is_refused_not_read(photo_splits, tmp_path, capsys):
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero on this platform")
    zero = tmp_path / "zero.pt"
    zero.symlink_to("/dev/zero")
    code, output = _run(photo_splits, zero, capsys)
    assert code == 2
    assert "not a regular file" in _one_error_line(output)


def test_a_folder_and_a_missing_file_are_refused(photo_splits, tmp_path, capsys):
    code, output = _run(photo_splits, tmp_path, capsys)
    assert code == 2 and "not a regular file" in _one_error_line(output)
    code, output = _run(photo_splits, tmp_path / "absent.csv", capsys)
    assert code == 2 and "cannot read the labels file" in _one_error_line(output)


def test_a_file_over_the_size_limit_is_refused_before_reading(tmp_path, monkeypatch):
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label\n" + "a.png,x\n" * 100)
    monkeypatch.setattr("gapcheck.limits.MAX_FILE_BYTES", 64)
    with pytest.raises(InputError, match="over the 64 byte limit"):
        api._labels_file(str(labels))


def test_a_regular_labels_file_still_reads(tmp_path):
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label,group\ntrain/a.png,cat,g1\nb.png,dog,\n")
    assert api._labels_file(str(labels)) == {"train/a.png": ("cat", "g1"), "b.png": ("dog", None)}

"""Hostile sources: one bad CSV cell is one counted bad sample (the other rows are audited); a single-file source
that is a FIFO or a device (a symlink to /dev/zero) is refused up front with an InputError, never opened or hung on."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gapcheck.errors import InputError
from gapcheck.text import audit_text
from gapcheck.text.samples import SampleSource, iter_samples, parse_source


def _stages(minilm: Path) -> dict[str, str]:
    return {"train": f"hf:{minilm}", "serve": f"hf:{minilm},slow"}


@pytest.mark.parametrize("suffix,sep", [(".csv", b","), (".tsv", b"\t")])
def test_an_invalid_utf8_cell_is_one_bad_sample_and_the_valid_rows_are_audited(tmp_path: Path, minilm: Path,
                                                                             suffix: str, sep: bytes):
    path = tmp_path / f"bad{suffix}"
    path.write_bytes(b"a" + sep + b"b\n1" + sep + b"The quick brown fox.\n2" + sep + b"caf\xff bad\n")
    samples = list(iter_samples(f"{path}:b"))
    assert [s.id for s in samples] == [f"bad{suffix}:0", f"bad{suffix}:1"]
    assert samples[0].text == "The quick brown fox." and samples[1].text is None
    assert samples[1].issue.startswith("not valid UTF-8") and "byte 3" in samples[1].issue
    result = audit_text(f"{path}:b", _stages(minilm))
    assert result.audited == 1 and result.bad_total == 1
    bad = [f for f in result.findings if f.code == "bad_text"]
    assert [f.subject.group for f in bad] == ["not valid UTF-8"]


# Run in a child with a timeout: before the fix these calls blocked forever (a FIFO waits for a writer, /dev/zero
# never ends), and a hung test must fail, not hang the suite.
_CHILD = """
import sys
from gapcheck.errors import InputError
from gapcheck.text import audit_text
try:
    audit_text(sys.argv[1], {{"train": "hf:{tok}", "serve": "hf:{tok},slow"}})
except InputError as exc:
    print("InputError:", exc)
    sys.exit(2)
print("no error")
"""


def _run_child(spec: str, minilm: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _CHILD.format(tok=minilm), spec], capture_output=True, text=True,
                          timeout=30, cwd=Path(__file__).resolve().parents[2])


def _special_files(tmp_path: Path) -> list[tuple[str, Path]]:
    fifo = tmp_path / "fifo.txt"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.txt"
    zero.symlink_to("/dev/zero")
    table = tmp_path / "zero.csv"
    table.symlink_to("/dev/zero")
    return [("FIFO", fifo), ("character device", zero), ("character device", table)]


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(), reason="POSIX special files")
def test_a_fifo_or_a_device_as_the_single_file_source_is_refused_up_front(tmp_path: Path, minilm: Path):
    for kind, path in _special_files(tmp_path):
        spec = f"{path}:text" if path.suffix == ".csv" else str(path)
        with pytest.raises(InputError, match=f"{kind}.*not a regular file"):
            parse_source(spec)
        child = _run_child(spec, minilm)
        assert child.returncode == 2, (spec, child.stdout, child.stderr)
        assert child.stdout.count("\n") == 1 and "not a regular file" in child.stdout
    assert "(/dev/zero)" in str(pytest.raises(InputError, parse_source, tmp_path / "zero.txt").value)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_the_reader_refuses_a_file_swapped_for_a_fifo_after_the_check(tmp_path: Path):
    path = tmp_path / "texts.txt"
    path.write_text("a line\n", encoding="utf-8")
    source = parse_source(path)
    path.unlink()
    os.mkfifo(path)  # swapped after parse_source looked: the open descriptor is checked, never read
    done: list[BaseException] = []
    worker = threading.Thread(target=lambda: _collect(source, done), daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "reading a FIFO hung"
    assert isinstance(done[0], InputError) and "FIFO" in str(done[0])


def _collect(source: SampleSource, done: list[BaseException]) -> None:
    try:
        list(iter_samples(source))
    except BaseException as exc:  # noqa: BLE001 - handed to the test thread
        done.append(exc)


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(), reason="POSIX special files")
def test_special_files_in_a_folder_are_still_skipped_and_counted(tmp_path: Path, minilm: Path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text("The quick brown fox.", encoding="utf-8")
    os.mkfifo(folder / "pipe.txt")
    (folder / "zero.txt").symlink_to("/dev/zero")
    worker_result: list[object] = []
    worker = threading.Thread(target=lambda: worker_result.append(audit_text(folder, _stages(minilm))), daemon=True)
    worker.start()
    worker.join(120)
    assert not worker.is_alive(), "a special file in the folder hung the audit"
    result = worker_result[0]
    assert result.audited == 1 and result.bad_total == 2  # type: ignore[attr-defined]
    groups = [f.subject.group for f in result.findings if f.code == "bad_text"]  # type: ignore[attr-defined]
    assert groups == ["not a regular file"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_the_command_refuses_a_fifo_txt_with_exit_2_and_one_line(tmp_path: Path):
    fifo = tmp_path / "fifo.txt"
    os.mkfifo(fifo)
    code = ("import sys; from gapcheck.cli.app import main; sys.exit(main(['preprocess-audit', '--samples', sys.argv[1],"
            " '--stage', 'a=json:dumps', '--stage', 'b=json:dumps']))")
    child = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, timeout=60,
                           cwd=Path(__file__).resolve().parents[2])
    assert child.returncode == 2, child.stderr
    lines = [line for line in child.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "text samples" in lines[0] and "FIFO (named pipe), not a regular file" in lines[0]

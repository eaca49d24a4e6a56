"""``open_regular``, the text input's checked open (through ``gapcheck.reading.open_checked``): unlike the export cache
it follows links (a samples file is often a link into a data set), and it words a refusal as the text input does."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from gapcheck.errors import InputError
from gapcheck.text.samples import iter_samples, open_regular


def test_a_link_to_a_text_file_is_read_through(tmp_path: Path) -> None:
    target = tmp_path / "data" / "lines.txt"
    target.parent.mkdir()
    target.write_text("first\nsecond\n")
    link = tmp_path / "lines.txt"
    link.symlink_to(target)
    assert [s.text for s in iter_samples(link)] == ["first", "second"]
    with open_regular(link, "text samples") as handle:
        assert handle.read() == b"first\nsecond\n"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_a_link_to_a_fifo_is_refused_naming_its_target_and_never_waits(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "lines.txt"
    link.symlink_to(fifo)
    with pytest.raises(InputError, match=r"^text samples: a FIFO \(named pipe\) \(.*pipe\), not a regular file"):
        open_regular(link, "text samples")


def test_a_folder_swapped_in_is_refused_in_the_text_inputs_words(tmp_path: Path) -> None:
    """parse_source sends a folder to the folder reader; one swapped in after it looked is named as such."""
    with pytest.raises(InputError, match="^where: a folder, not a regular file; give a text file"):
        open_regular(tmp_path, "where")

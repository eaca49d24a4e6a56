"""Hostile sources: one bad CSV cell is one counted bad sample (the other rows are audited); a single-file source
that is a FIFO or a device (a symlink to /dev/zero) is refused up front with an InputError, never opened or hung on."""
from __future__ import annotations

from pathlib import Path

import pytest

from gapcheck.text import audit_text
from gapcheck.text.samples import iter_samples


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

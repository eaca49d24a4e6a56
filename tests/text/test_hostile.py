"""Hostile text: invalid UTF-8, 10 MB lines, NUL bytes, RTL marks and zero-width characters, control characters
in sample ids — counted bad-input findings or audited safely, never a crash, never raw on the terminal."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gapcheck.errors import InputError, UsageError
from gapcheck.report.formats import render
from gapcheck.text import audit_text
from gapcheck.text.samples import iter_samples
from tests.text.conftest import ORDINARY


def _stages(minilm: Path) -> dict[str, str]:
    return {"train": f"hf:{minilm}", "serve": f"hf:{minilm},slow"}


def test_txt_lines_with_invalid_utf8_nul_and_a_10mb_line(tmp_path: Path, minilm: Path):
    path = tmp_path / "texts.txt"
    with open(path, "wb") as handle:
        handle.write(b"a fine first line\n")
        handle.write(b"caf\xe9 latin-1 bytes\n")  # invalid UTF-8
        handle.write(b"binary\x00junk\x00\n")
        handle.write(b"y" * (10 * 1024 * 1024) + b"\n")  # a 10 MB line, skipped while it is read
        handle.write(b"a fine last line\n")
    samples = list(iter_samples(path))
    assert [s.text is not None for s in samples] == [True, False, False, False, True]
    result = audit_text(path, _stages(minilm))
    assert result.audited == 2 and result.bad_total == 3
    kinds = {f.subject.group for f in result.findings if f.code == "bad_text"}
    assert kinds == {"not valid UTF-8", "NUL bytes (binary data)", "over the character limit"}


def test_rtl_and_zero_width_characters_are_audited(minilm: Path):
    texts = ["abc\u200bdef zero width space", "\u202eevil override\u202c text", "\u200f\u05e9\u05dc\u05d5\u05dd mark",
             "joiner\u200dhere", "\ufeffbom first"]
    result = audit_text(texts, _stages(minilm))
    assert result.audited == len(texts) and not result.bad_total
    console = render("console", result)
    assert "\u202e" not in console and "\u200f" not in console  # bidi controls shown escaped, never applied


def test_control_characters_in_sample_ids_never_reach_the_terminal(tmp_path: Path, minilm: Path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "evil\x1b[2J\x07name.txt").write_text("Hello there", encoding="utf-8")
    (folder / "plain.txt").write_text("Hello there", encoding="utf-8")
    (folder / "bad\x1b]0;title\x07.txt").write_bytes(b"\xff\xfe\x00")
    result = audit_text(folder, {"train": f"hf:{minilm}", "serve": f"hf:{minilm},add_special_tokens=false"})
    for fmt in ("console", "junit", "html"):
        out = render(fmt, result)
        assert "\x1b" not in out and "\x07" not in out, fmt
    assert any("\\x1b" in s.id for s in result.samples)


def test_jsonl_field_csv_and_parquet_columns(tmp_path: Path, minilm: Path):
    import pandas as pd

    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text("\n".join([json.dumps({"text": t}) for t in ORDINARY] + ['{"text": 5}', "not json"]),
                     encoding="utf-8")
    frame = pd.DataFrame({"body": ORDINARY + [None]})
    frame.to_csv(tmp_path / "t.csv", index=False)
    frame.to_parquet(tmp_path / "t.parquet")
    for spec in (f"{jsonl}:text", f"{tmp_path / 't.csv'}:body", f"{tmp_path / 't.parquet'}:body"):
        result = audit_text(spec, _stages(minilm))
        assert result.audited == len(ORDINARY) and result.bad_total in (1, 2), spec
    with pytest.raises(UsageError, match="no column"):
        audit_text(f"{tmp_path / 't.csv'}:nope", _stages(minilm))
    with pytest.raises(UsageError, match="name the field"):
        audit_text(jsonl, _stages(minilm))


def test_nothing_usable_is_an_input_error(tmp_path: Path, minilm: Path):
    path = tmp_path / "bin.txt"
    path.write_bytes(b"\x00\x01\x02\n\xff\xff\n")
    with pytest.raises(InputError, match="no usable text"):
        audit_text(path, _stages(minilm))

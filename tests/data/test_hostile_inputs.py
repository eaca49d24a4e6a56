"""Hostile and broken inputs: each is counted and reported (bad_input / empty_split) or refused as bad input
(exit 2) before anything large is allocated; never a crash, a hang, or an item silently dropped."""
from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import gapcheck.data.readers as readers
from gapcheck.cli.app import main
from gapcheck.data.api import drift, leakage
from gapcheck.data.leakage import LeakageOptions
from gapcheck.engines import open_engine
from gapcheck.errors import InputError
from tests.data.conftest import validate


@pytest.fixture(scope="module")
def serial():
    with open_engine("serial") as engine:
        yield engine


@pytest.fixture
def tables(tmp_path) -> Path:
    rng = np.random.default_rng(0)
    pd.DataFrame({"a": rng.normal(size=300), "b": rng.normal(size=300), "y": rng.integers(0, 2, 300)}).to_csv(
        tmp_path / "ok.csv", index=False)
    return tmp_path


def _reasons(result) -> str:
    return " | ".join(reason for _, reason in result.bad_items)


def test_csv_in_another_encoding_is_unreadable_input_with_the_fix(tables, serial):
    text = "name,a\n" + "".join(f"caf\xe9 {i},{i}\n" for i in range(50))
    (tables / "latin1.csv").write_bytes(text.encode("latin-1"))
    with pytest.raises(InputError, match=r"split current \(.*latin1.csv\) cannot be read: .*not UTF-8 text.*iconv"):
        drift(str(tables / "ok.csv"), str(tables / "latin1.csv"), engine=serial)


def test_csv_with_some_bad_rows_counts_them_and_checks_the_rest(tables, serial):
    lines = (tables / "ok.csv").read_bytes().splitlines(keepends=True)
    lines[50:50] = [b"\xff\xfe,1,0\n"]  # bytes that are not UTF-8 in one row
    lines[120:120] = [b"1,2,3,4,5\n"]  # a row with too many fields
    (tables / "some_bad.csv").write_bytes(b"".join(lines))
    result = drift(str(tables / "ok.csv"), str(tables / "some_bad.csv"), engine=serial)
    validate(result)
    assert result.current.used == 300 and result.current.bad == 2
    assert "not UTF-8 text" in _reasons(result) and "malformed row: expected 3 fields, saw 5" in _reasons(result)
    assert [f.code for f in result.findings if f.code in ("bad_input", "empty_split")] == ["bad_input"]
    assert {f.feature for f in result.features} == {"a", "b", "y"}  # column a is numeric again without the bad row


def test_csv_with_an_overlong_line_is_refused_while_reading(tables, serial, monkeypatch):
    monkeypatch.setattr(readers, "MAX_CSV_LINE", 1 << 16)
    (tables / "long.csv").write_text("a,b\n1," + "9" * 200_000 + "\n2,3\n")
    with pytest.raises(InputError, match="a line longer than 65536 bytes"):
        drift(str(tables / "ok.csv"), str(tables / "long.csv"), engine=serial)


def test_numbers_in_one_split_and_text_in_the_other_are_reported_not_a_crash(tables, serial):
    pd.DataFrame({"a": [1.0, 2.0] * 100, "b": ["x" * 5000, "3"] * 100}).to_csv(tables / "text.csv", index=False)
    result = drift(str(tables / "ok.csv"), str(tables / "text.csv"), engine=serial)
    document = validate(result)
    assert "mixed column types: numbers in the reference, text in the current split" in _reasons(result)
    assert not any(f["feature"] == "b" and f["test"] != "none" for f in document["features"])


def test_csv_with_nul_bytes_is_read_and_the_odd_cells_counted(tables, serial):
    text = (tables / "ok.csv").read_text()
    (tables / "nul.csv").write_text(text[:200] + "\0\0" + text[200:])
    result = drift(str(tables / "ok.csv"), str(tables / "nul.csv"), engine=serial)
    assert "mixed column types" in _reasons(result)
    assert not any(f.code in ("drift", "empty_split") for f in result.findings)


def test_empty_and_header_only_csv(tables, serial):
    (tables / "zero.csv").write_bytes(b"")
    pd.DataFrame(columns=["a", "b", "y"]).to_csv(tables / "header.csv", index=False)
    options = LeakageOptions(label_column="y")
    for name in ("zero.csv", "header.csv"):
        result = leakage([f"train={tables / 'ok.csv'}", f"val={tables / name}"], options, engine=serial)
        assert "empty_split" in {f.code for f in result.findings}


def _npy_header(shape: tuple[int, ...]) -> bytes:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": shape})
    return header.getvalue()


def test_npy_with_a_lying_header_is_refused_before_planning(tables, serial):
    (tables / "lie.npy").write_bytes(_npy_header((10**12, 3)) + bytes(800))
    with pytest.raises(InputError, match=r"the header declares shape \(1000000000000, 3\)"):  # no 10^12-row plan
        drift(str(tables / "ok.csv"), str(tables / "lie.npy"), engine=serial)


def test_npz_bomb_is_refused_before_decompression(tables, serial, monkeypatch):
    import gapcheck.data.sources as sources

    monkeypatch.setattr(sources, "MAX_NPZ_BYTES", 1 << 20)
    with zipfile.ZipFile(tables / "bomb.npz", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("x.npy", _npy_header((1 << 18,)) + bytes(8 << 18))  # 2 MB of zeros, a few KB zipped
    with zipfile.ZipFile(tables / "lying.npz", "w") as archive:
        archive.writestr("x.npy", _npy_header((1000,)) + bytes(80))
    assert (tables / "bomb.npz").stat().st_size < 20_000
    with pytest.raises(InputError, match="declare more than 1048576 bytes"):
        drift(str(tables / "ok.csv"), str(tables / "bomb.npz"), engine=serial)
    with pytest.raises(InputError, match="the header declares 8000 bytes, the archive holds"):
        drift(str(tables / "ok.csv"), str(tables / "lying.npz"), engine=serial)


def test_parquet_with_a_lying_footer(tables, serial):
    pd.read_csv(tables / "ok.csv").to_parquet(tables / "ok.parquet")
    data = (tables / "ok.parquet").read_bytes()
    (tables / "lie.parquet").write_bytes(data[:-8] + (10**9).to_bytes(4, "little") + b"PAR1")
    (tables / "half.parquet").write_bytes(data[: len(data) // 2])
    for name in ("lie.parquet", "half.parquet"):
        with pytest.raises(InputError, match=f"split current .*{name}.* cannot be read: .*unreadable table"):
            drift(str(tables / "ok.parquet"), str(tables / name), engine=serial)


@pytest.fixture
def hostile(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))


def test_dataset_samples_that_raise_are_counted(hostile, serial):
    result = drift("hostile_datasets:raises", "hostile_datasets:raises", engine=serial)
    validate(result)
    assert result.reference.bad == 10 and result.reference.used == 20
    assert "RuntimeError: cannot open record 3" in _reasons(result)
    assert [f.code for f in result.findings] == ["bad_input", "bad_input"] + ["drift_underpowered"] * 2  # 20 rows: KS, nulls


def test_dataset_of_non_tensors_and_a_failing_factory_are_bad_input(hostile, serial):
    with pytest.raises(InputError, match="not a numeric tensor"):
        drift("hostile_datasets:strings", "hostile_datasets:raises", engine=serial)
    with pytest.raises(InputError, match="factory_fails\\(\\) raised ValueError: the bucket is not mounted"):
        leakage(["a=hostile_datasets:factory_fails", "b=hostile_datasets:raises"], engine=serial)
    with pytest.raises(InputError, match="len\\(\\)"):
        drift("hostile_datasets:negative_len", "hostile_datasets:raises", engine=serial)
    with pytest.raises(InputError, match="more than the 10000000 samples"):
        drift("hostile_datasets:huge", "hostile_datasets:raises", engine=serial)


def test_ragged_dataset_rows_are_reported(hostile, serial):
    result = drift("hostile_datasets:ragged", "hostile_datasets:ragged", engine=serial)
    assert result.reference.bad == 10 and "4 features, the shard's first sample has 3" in _reasons(result)


def test_a_hanging_sample_hits_its_deadline(hostile, serial, monkeypatch):
    monkeypatch.setattr(readers, "SAMPLE_DEADLINE_S", 0.3)
    result = drift("hostile_datasets:one_hangs", "hostile_datasets:raises", engine=serial)
    assert "TimeoutError: no sample within 0.3 s" in _reasons(result)
    assert result.reference.used == 5 and result.reference.bad == 1


def test_cli_exit_codes_for_hostile_inputs(hostile, tables, capsys):
    assert main(["drift", "--reference", "hostile_datasets:factory_fails", "--current", str(tables / "ok.csv"),
                 "--engine", "serial"]) == 2
    err = capsys.readouterr().err
    assert "bucket is not mounted" in err and "Traceback" not in err
    (tables / "latin1.csv").write_bytes("a\n\xe9\n".encode("latin-1"))
    report = tables / "r.json"
    assert main(["drift", "--reference", str(tables / "ok.csv"), "--current", str(tables / "latin1.csv"),
                 "--engine", "serial", "--json", str(report)]) == 2
    err = capsys.readouterr().err
    assert "split current" in err and "not UTF-8 text" in err and "Traceback" not in err
    assert not report.exists()


def test_escape_sequences_in_names_are_neutralized_in_console_and_html(tmp_path, serial, photo_splits):
    import shutil
    import warnings

    from gapcheck.report.formats import ReportFormat, render

    rng = np.random.default_rng(0)
    evil = "\x1b[2J\x1b[31mevil"
    pd.DataFrame({evil: rng.normal(size=400), "<b>x</b>": rng.normal(size=400)}).to_csv(tmp_path / "r.csv", index=False)
    pd.DataFrame({evil: rng.normal(size=400) + 1, "<b>x</b>": rng.normal(size=400)}).to_csv(tmp_path / "c.csv",
                                                                                           index=False)
    result = drift(str(tmp_path / "r.csv"), str(tmp_path / "c.csv"), engine=serial)
    assert [f.subject.output for f in result.findings if f.code == "drift"] == [evil]  # the JSON keeps the name
    val = tmp_path / "val"
    val.mkdir()
    shutil.copy(photo_splits["train"] / "astronaut.png", val / "\x1b]0;title\x07copy.png")
    leaks = leakage([f"train={photo_splits['train']}", f"val={val}"], engine=serial)
    for report in (result, leaks):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # matplotlib warns about glyphs it cannot draw: labels must be clean
            html = render(ReportFormat.HTML, report)
        console = render(ReportFormat.CONSOLE, report)
        assert "\x1b" not in html and "\x07" not in html and "<b>x</b>" not in html
        assert "\x1b" not in console and "\x07" not in console
        assert "\\x1b" in console and "\\x1b" in html


def test_a_fifo_given_as_a_split_is_refused_not_opened(tables, serial):
    import os

    os.mkfifo(tables / "pipe.csv")  # opening it would block the worker forever
    with pytest.raises(InputError, match="split current .*pipe.csv.* cannot be read: .*not a regular file"):
        drift(str(tables / "ok.csv"), str(tables / "pipe.csv"), engine=serial)
    with pytest.raises(InputError, match="not a regular file"):  # matched by a glob: refused too, not skipped
        drift(str(tables / "ok.csv"), str(tables / "p*.csv"), engine=serial)
    (tables / "folder").mkdir()
    (tables / "folder" / "ok.csv").write_bytes((tables / "ok.csv").read_bytes())
    os.mkfifo(tables / "folder" / "pipe.csv")
    partly = drift(str(tables / "ok.csv"), str(tables / "folder"), engine=serial)  # one good file: counted, checked
    assert partly.current.used == 300 and "not a regular file" in _reasons(partly)


def test_pixel_limit_is_ours_and_pils_bomb_warning_never_reaches_the_console(tmp_path, serial, monkeypatch, photo_splits):
    import warnings

    from PIL import Image

    import gapcheck.data.hashing as hashing

    Image.new("RGB", (40, 40), "red").save(tmp_path / "small.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # PIL warns above this (and refuses above twice it)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert hashing.decode_image((tmp_path / "small.png").read_bytes()).size == (40, 40)
    monkeypatch.setattr(hashing, "MAX_PIXELS", 1500)
    Image.new("RGB", (30, 30), "blue").save(tmp_path / "tiny.png")  # under the limit: the split is still read
    train = tmp_path / "train"
    train.mkdir()
    Image.new("RGB", (30, 30), "green").save(train / "tiny.png")
    result = leakage([f"train={train}", f"val={tmp_path / '*.png'}"], engine=serial)
    assert "image of 40x40 pixels is larger than the 1500 pixel limit" in _reasons(result)
    assert result.splits[1].used == 1 and result.splits[1].bad == 1


def test_a_utf8_csv_holding_the_replacement_character_is_not_called_bad(tables, serial):
    """U+FFFD is valid UTF-8 (text that went through a lossy pipeline holds it): no row of it is bad input."""
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"note": [f"caf\ufffd {i % 7}" for i in range(300)], "a": rng.normal(size=300)})
    frame.to_csv(tables / "fffd.csv", index=False, encoding="utf-8")
    result = drift(str(tables / "fffd.csv"), str(tables / "fffd.csv"), engine=serial)
    assert result.bad_items == () and result.current.used == 300


def test_csv_whose_first_row_has_more_fields_than_the_header_counts_it_as_bad(tables, serial):
    """pandas reads such a row's leading fields as an implicit index (the data shifted under the wrong columns,
    nothing counted); it is a malformed row like any other with the wrong number of fields."""
    (tables / "wide_first.csv").write_text("a,b,y\n1,2,0,9,9\n" + "".join(f"{i},{i},1\n" for i in range(40)))
    result = drift(str(tables / "ok.csv"), str(tables / "wide_first.csv"), engine=serial)
    validate(result)
    assert result.current.used == 40 and result.current.bad == 1
    assert "malformed row: more fields than the header" in _reasons(result)
    assert [f.code for f in result.findings if f.code == "bad_input"] == ["bad_input"]


def test_leakage_of_a_csv_whose_first_row_is_too_wide_reports_bad_input(tmp_path, capsys):
    (tmp_path / "a.csv").write_text("id,a\n1,2,3,4\n5\n")
    (tmp_path / "b.csv").write_text("id,a\n7,8\n9,10\n")
    report = tmp_path / "r.json"
    main(["leakage", "--split", f"a={tmp_path / 'a.csv'}", "--split", f"b={tmp_path / 'b.csv'}",
          "--engine", "serial", "--json", str(report)])
    capsys.readouterr()
    text = report.read_text()
    assert '"bad_input"' in text and "more fields than the header" in text

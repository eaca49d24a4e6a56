"""The reviewed real-code corpus table and the plant list are complete and consistent.

Running the corpus needs the fetched repositories (``python -m tests.lint.corpus.run DIR``); this fast
test checks what is checked in: every reported finding is classified, every plant names a registered
code, and the issue's shapes are all planted.
"""
from __future__ import annotations

import csv
from collections import Counter

from gapcheck.codes import all_codes
from tests.lint.corpus.plants import PLANTS
from tests.lint.corpus.repos import REPOS
from tests.lint.corpus.run import BOILERPLATE, TABLE

LINT_CODES = {c.code for c in all_codes() if c.family == "lint"}


def test_every_finding_is_classified() -> None:
    rows = list(csv.DictReader(TABLE.open(newline=""), delimiter="\t"))
    assert rows
    for row in rows:
        assert row["code"] in LINT_CODES
        assert row["verdict"] in ("TP", "FP") and row["note"], row
        assert row["where"].split("/")[0] in REPOS
    substantive = Counter(r["verdict"] for r in rows if r["code"] not in BOILERPLATE)
    assert substantive["TP"] / (substantive["TP"] + substantive["FP"]) >= 0.95


def test_plants_cover_the_issue_shapes() -> None:
    assert len(REPOS) >= 10 and len(PLANTS) >= 40
    assert {p.code for p in PLANTS} <= LINT_CODES
    assert len({p.name for p in PLANTS}) == len(PLANTS)
    names = " ".join(p.name for p in PLANTS)
    for shape in ("accumulation", "backward-helper", "native-scaler", "iterations", "while-true", "early-return",
                  "later-train", "column-scaler", "fit-then-transform", "counter-all-splits", "flag-scaler",
                  "early-return-skips-train", "helper-scaler", "vocab-helper"):
        assert shape in names, shape
    assert all(p.repo in REPOS for p in PLANTS)

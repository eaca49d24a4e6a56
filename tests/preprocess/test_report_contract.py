"""PreprocessAuditResult implements the report contract: envelope + schema, views computed here, checks by Subject."""
from __future__ import annotations

import base64

from gapcheck.codes import lookup
from gapcheck.preprocess.audit import preprocess_audit
from gapcheck.preprocess.result import MARK, differs
from gapcheck.report.contract import Chart, CommandResult, Table
from tests.preprocess.conftest import report_json, stage


def test_clean_report_validates_and_has_no_findings(photos):
    result = preprocess_audit(photos, {"train": stage("train_transform"), "val": stage("val_transform")}, n=2, workers=1)
    assert isinstance(result, CommandResult) and result.command == "preprocess-audit"
    document = report_json(result)
    assert document["verdict"] == "pass" and document["findings"] == []
    assert set(document["timings"]) == {"discover", "stages", "analysis"}  # disjoint phases: JUnit adds them up
    assert document["cpu_seconds"]["workers"] > 0
    assert document["pairs"][0]["mean_psnr_db"] == "inf"  # identical outputs
    assert [c.failure for c in result.checks()] == [None] * len(result.checks())
    table = next(v for v in result.views() if isinstance(v, Table) and v.title == "Stages")
    assert table.highlight == () and not any(MARK in str(cell) for row in table.rows for cell in row)


def test_gap_report_views_checks_and_registered_codes(photos):
    result = preprocess_audit(photos, {"train": stage("train_transform"), "infer": stage("infer_bgr"),
                                       "val": stage("val_transform")}, n=2, workers=1)
    document = report_json(result)
    assert document["verdict"] == "gap" and result.headline in document["headline"]
    for finding in document["findings"]:
        assert lookup(finding["code"]).family == "preprocess-audit"
    # The stage table: the candidate's channel cells differ from the reference by the one rule, val's do not.
    table = next(v for v in result.views() if isinstance(v, Table) and v.title == "Stages")
    infer_row, val_row = table.rows[1], table.rows[2]
    assert table.highlight == (1,)
    assert infer_row[table.columns.index("c0 mean / std")].endswith(MARK)
    assert not any(str(cell).endswith(MARK) for cell in val_row)
    # Histograms per channel and the worst sample side by side with its |Δ| heatmap, as PNGs.
    charts = [v for v in result.views() if isinstance(v, Chart)]
    assert [c.title for c in charts if c.kind == "bar"] == [f"Channel {i}: values per stage" for i in range(3)]
    # Two per failing pair (train→infer, infer→val): the worst differing sample and a typical one.
    pictures = [c for c in charts if c.kind == "images"]
    assert len(pictures) == 4
    worst = next(c for c in pictures if c.title.startswith("train→infer, worst of 2 differing sample(s) (of 2): "))
    assert [caption.split(" ")[0] for caption, _ in worst.images] == ["raw", "train", "infer", "|Δ|"]
    assert all(base64.b64decode(png).startswith(b"\x89PNG") for _, png in worst.images)
    # JUnit: one case per stage pair, matched by Subject; only train→infer fails.
    pairs = {c.name: c for c in result.checks() if c.classname == "preprocess-audit.pairs"}
    assert set(pairs) == {"train→infer", "train→val", "infer→val"}
    assert pairs["train→infer"].failure.startswith("channel_order") and pairs["train→val"].failure is None


def test_differs_is_relative_above_one_and_absolute_below():
    assert not differs(0.0005, 0.0) and differs(0.002, 0.0)
    assert not differs(1000.5, 1000.0) and differs(1002.0, 1000.0)
    assert differs(float("nan"), 1.0) and not differs(float("nan"), float("nan"))

"""The HTML format on a real preprocess-audit result: one self-contained file, inline PNG plots, everything escaped."""
from __future__ import annotations

from gapcheck.cli.app import main
from gapcheck.preprocess.audit import preprocess_audit
from gapcheck.report.formats import ReportFormat, render
from tests.preprocess.conftest import photos, stage  # noqa: F401 - the session fixture


def _hostile(path: str):
    # fails on one photo only: a stage that fails on every sample is a usage error (exit 2), not a report
    if str(path).endswith("astronaut.png"):
        raise ValueError("<script>alert(1)</script>")
    from sample_models.preprocessing import train_transform

    return train_transform(path)


def test_hostile_text_is_escaped(photos):  # noqa: F811
    result = preprocess_audit(photos, {"train": stage("train_transform"), "infer": _hostile}, n=4, workers=1)
    html = render(ReportFormat.HTML, result)
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_hostile_stage_name_is_refused_not_rendered(photos, tmp_path, capsys):  # noqa: F811
    page = tmp_path / "r.html"
    code = main(["preprocess-audit", "--samples", str(photos), "--stage", f"<script>={stage('train_transform')}",
                 "--stage", f"val={stage('val_transform')}", "--html", str(page), "--no-progress"])
    assert code == 2 and not page.exists()
    assert "may only use letters" in capsys.readouterr().err


def test_gap_report_has_charts_and_labelled_evidence(photos):  # noqa: F811
    result = preprocess_audit(photos, {"train": stage("train_transform"), "infer": stage("infer_bgr")}, n=2, workers=1)
    html = render(ReportFormat.HTML, result)
    charts = [v for v in result.views() if not hasattr(v, "rows")]
    assert html.count('src="data:image/png;base64,') >= len(charts) >= 1
    assert "channel_order" in html
    assert "{&#39;" not in html and "{'" not in html  # evidence as labelled values, never a dict repr
    assert "<dt>" in html

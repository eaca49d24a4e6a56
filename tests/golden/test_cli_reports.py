"""golden record/verify reports go through the shared report options: checked before work, --html too."""
from __future__ import annotations

from pathlib import Path

from gapcheck.cli.app import main


def test_bad_report_path_is_refused_before_recording(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    code = main(["golden", "record", "--out", str(out), "--model", "sample_models.cnn:build_small_resnet",
                 "--input", "x:1x3x32x32:float32", "--num-samples", "2", "--json", str(tmp_path)])  # a directory
    assert code == 2
    assert not out.exists()  # nothing was recorded


def test_verify_writes_html(tmp_path: Path, capsys) -> None:
    out = tmp_path / "bundle"
    assert main(["golden", "record", "--out", str(out), "--model", "sample_models.cnn:build_small_resnet",
                 "--input", "x:1x3x32x32:float32", "--num-samples", "2", "--no-cache"]) == 0
    page = tmp_path / "verify.html"
    assert main(["golden", "verify", str(out), "--html", str(page)]) == 0
    assert page.read_text().lstrip().lower().startswith("<!doctype html")

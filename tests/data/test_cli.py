from __future__ import annotations

import json
import sys

from gapcheck.cli.app import main
from tests.data.conftest import shifted_tables


def test_leakage_cli_exit_codes_and_reports(photo_splits, tmp_path):
    report = tmp_path / "r.json"
    html = tmp_path / "r.html"
    assert main(["leakage", "--split", f"train={photo_splits['train']}", "--split", f"val={photo_splits['clean_val']}",
                 "--engine", "serial"]) == 0
    assert main(["leakage", "--split", f"train={photo_splits['train']}", "--split", f"val={photo_splits['leaky_val']}",
                 "--engine", "local", "--workers", "2", "--json", str(report), "--html", str(html)]) == 1
    assert json.loads(report.read_text())["pair_counts"] == {"exact": 2, "near": 4}
    page = html.read_text()
    assert "Near duplicates side by side" in page and "data:image/png;base64" in page


def test_drift_cli_and_bad_usage(tmp_path, monkeypatch):
    reference, current = shifted_tables(tmp_path, rows=3_000)
    assert main(["drift", "--reference", str(reference), "--current", str(current), "--engine", "serial"]) == 1
    assert main(["drift", "--reference", str(reference), "--current", str(reference), "--engine", "serial"]) == 0
    assert main(["drift", "--reference", str(tmp_path / "missing.parquet"), "--current", str(current)]) == 2
    assert main(["drift", "--reference", str(reference), "--current", str(current), "--json", str(tmp_path)]) == 2
    monkeypatch.setitem(sys.modules, "ray", None)
    assert main(["drift", "--reference", str(reference), "--current", str(current), "--engine", "ray"]) == 2

"""The precision each endpoint was compared in, in the nightly and history JSON (issue 23 atk5 #10): recorded since
history v3 but refused by both schemas (no extra fields); a switch is listed under ``changes``."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from gapcheck.cli.app import main
from gapcheck.golden import load_bundle
from gapcheck.nightly.history import History
from tests.nightly.conftest import validate_report
from tests.nightly.fake_triton import FakeTriton


def test_precision_in_both_reports_and_a_switch_under_changes(tiny_golden: Path, tmp_path: Path) -> None:
    history = tmp_path / "h.sqlite"
    with FakeTriton(load_bundle(tiny_golden), "ok") as fake:
        night = ["nightly", "--golden", str(tiny_golden), "--endpoint", f"prod={fake.url}", "--history",
                 str(history), "--no-audit"]
        assert main([*night, "--json", str(tmp_path / "n1.json")]) == 0
        # The same deployment compared in FP16 the night after (a restricted config API: the same config hash)
        with History(history) as h:
            (first,) = h.endpoint_history("prod")
            h.start_run("r-fp16", "2099-01-01T00:00:00.000+00:00", str(tiny_golden), first.golden_hash, "0")
            h.add_endpoint_result(dataclasses.replace(first, run_id="r-fp16", precision="fp16",
                                                      started_at="2099-01-01T00:00:00.000+00:00"))
        assert main([*night, "--json", str(tmp_path / "n2.json")]) == 0
    one, two = (json.loads((tmp_path / f"n{i}.json").read_text()) for i in (1, 2))
    validate_report(one, "nightly")
    validate_report(two, "nightly")
    assert one["endpoints"][0]["precision"] == "fp32" and one["endpoints"][0]["changes"] == []
    (endpoint,) = two["endpoints"]
    assert endpoint["precision"] == "fp32" and endpoint["status"] == "changed"
    assert endpoint["changes"] == [{"what": "precision", "before": "fp16", "after": "fp32"}]
    assert main(["history", "--history", str(history), "--json", str(tmp_path / "h.json")]) == 0
    runs = json.loads((tmp_path / "h.json").read_text())
    validate_report(runs, "history")
    assert sorted(r["precision"] for r in runs["runs"]) == ["fp16", "fp32", "fp32"]

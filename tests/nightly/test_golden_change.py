"""Another golden bundle than the last night's is said (issue 23, attacker D16): a bundle whose tolerance was loosened
turned a broken deployment into "recovered", its new hash said nowhere but the run line."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

from gapcheck.cli.app import main
from gapcheck.golden import load_bundle
from tests.nightly.fake_triton import FakeTriton


def _night(bundle: Path, tmp_path: Path, url: str, name: str) -> tuple[int, dict]:
    report = tmp_path / f"{name}.json"
    code = main(["nightly", "--golden", str(bundle), "--history", str(tmp_path / "h.sqlite"), "--no-audit",
                 "--retries", "0", "--endpoint", f"prod={url}", "--json", str(report)])
    return code, json.loads(report.read_text())


def test_a_verdict_that_turns_with_another_golden_bundle_says_so(tiny_golden: Path, tmp_path: Path) -> None:
    strict, loose = tmp_path / "strict", tmp_path / "loose"
    shutil.copytree(tiny_golden, strict)
    shutil.copytree(tiny_golden, loose)
    manifest = json.loads((loose / "manifest.json").read_text())
    for tolerance in manifest["tolerances"]["outputs"].values():
        tolerance["rtol"], tolerance["atol"] = 1e300, 1e300  # schema-valid, and it lets anything pass
    (loose / "manifest.json").write_text(json.dumps(manifest))
    golden = load_bundle(strict)
    with FakeTriton(golden, "ok") as fake:
        fake.bundle = dataclasses.replace(golden, reference={k: v + 1.0 for k, v in golden.reference.items()})
        first_code, _ = _night(strict, tmp_path, fake.url, "first")
        code, report = _night(loose, tmp_path, fake.url, "second")
    assert (first_code, code) == (1, 0)
    endpoint = report["endpoints"][0]
    assert endpoint["status"] == "recovered"
    messages = [f["message"] for f in report["findings"]]
    assert any("the golden bundle (its manifest's SHA256) changed from" in m for m in messages), messages
    assert any("against another golden bundle than the last night's" in m for m in messages), messages

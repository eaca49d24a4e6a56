"""The JSON reports of export-diff, golden, nightly, history and the data commands on the sample models, recorded
before the option groups became library objects (issue 18), must stay the same apart from timings.

preprocess-audit's (a clean pair of stages, and a planted BGR inference stage read from ``[preprocess.stages]``)
were recorded later, at 6d11169, after the evidence change 17af15e (its evidence sections are the before-picture of
the layer fixes that follow: ``[preprocess]`` resolved by the preprocess library, results no longer importing views).

``GAPCHECK_WRITE_BASELINE=1 pytest tests/cli/test_report_baseline.py`` rewrites ``tests/cli/baseline/*.json``
(do that only on purpose: the files are the before-picture). Without it, each report is compared with its file
after the volatile fields (timings, dates, run ids, versions, temporary paths) are blanked: every value the file
holds must be the same, except the few changed on purpose by fixes listed in CHANGED_ON_PURPOSE; new keys (added
evidence, new sections) are allowed — a report may grow, never silently change.
"""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest

from gapcheck.cli.app import main
from tests.data.conftest import photo_splits, shifted_tables  # noqa: F401 - the fixture is used below
from tests.preprocess.conftest import photos, stage  # noqa: F401 - the fixture is used below

BASELINE = Path(__file__).parent / "baseline"
ROOT = Path(__file__).resolve().parents[2]
WRITE = os.environ.get("GAPCHECK_WRITE_BASELINE") == "1"
VOLATILE = {"timings", "seconds", "started_at", "finished_at", "run_id", "created_at", "gapcheck_version", "versions",
            "export_seconds", "waited_s", "lock_wait", "elapsed_s", "last_pass_at", "failing_since", "trend",
            "export_s", "compare_s", "wall_s", "cpu_s", "history", "bundle_hash", "golden_hash", "sha256",
            "file_sha256", "export_cached", "cached", "cpu_seconds"}
FACTORY = "tests/nightly/models.py:build_tiny"
#: report -> keys whose values were changed on purpose after the before-picture, and by what
CHANGED_ON_PURPOSE = {
    # issue 23 item 14: a request's input SHA256 is the recorded fingerprint (several samples: their digest)
    "nightly_ok": {"input_sha256"},
    # issue 17 (1510b46): the history stores the precision each endpoint was compared in (history v3); the JSON
    # reports carry it as a new optional field (issue 23 atk5 #10: new keys are allowed)
    "history": {"history_schema_version"},
    # the data checks' headline says where the pairs are ("across splits"); issue 23 review D10 (81dd0a9): an image
    # finding names its files (subject.path/other, where), not "split:name"
    "leakage": {"headline", "subject", "where"},
    # issue 23 item 17: a clean run skips the float64 noise forward (it cannot change any verdict), so no floor is
    # reported (null) and the budget shown is the dtype default without the floor's ceiling
    "export_diff_clean": {"noise_floor", "budget_abs"},
}

#: report -> keys whose values depend on where the test's files are: preprocess-audit's finding fingerprints hash the
#: sample's absolute path (here a pytest temporary folder), so they differ from run to run; so do leakage's
WHERE_DEPENDENT = {"preprocess_audit_planted": {"fingerprint"},
                   # an image leakage finding's fingerprint hashes its subject, now the files' paths (D10 above)
                   "leakage": {"fingerprint"}}


def _normalized(value: Any, tmp: str) -> Any:
    if isinstance(value, dict):
        return {k: ("<volatile>" if k in VOLATILE else _normalized(v, tmp)) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalized(v, tmp) for v in value]
    if isinstance(value, str):
        value = value.replace(tmp, "<tmp>")
        # where the checkout and the installed packages live is no part of the report (CI runs a fresh clone elsewhere)
        value = re.sub(r"[^\s'\"()]*/site-packages/", "<site>/", value)
        value = value.replace(str(ROOT), "<repo>")
        value = re.sub(r"\d{8}T\d{6}Z-[0-9a-f]{8}", "<run>", value)
        # pytest's own folders (under xdist one level deeper, popen-gwN) are the same place for this comparison
        value = re.sub(r"/tmp/pytest-of-[^/]+/pytest-\d+/(?:popen-gw\d+/)?[^/]+", "<tmp>", value)
        value = re.sub(r"bundle [0-9a-f]{12}", "bundle <hash>", value)
        return re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", value)
    if isinstance(value, float):
        return round(value, 6)
    return value


def _check(name: str, report: Path, tmp: Path) -> None:
    document = _normalized(json.loads(report.read_text()), str(tmp))
    stored = BASELINE / f"{name}.json"
    if WRITE:
        BASELINE.mkdir(exist_ok=True)
        stored.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
        return
    before = _normalized(json.loads(stored.read_text()), str(tmp))
    changed = _changes(before, document, CHANGED_ON_PURPOSE.get(name, set()) | WHERE_DEPENDENT.get(name, set()))
    assert not changed, f"{name}: the report changed:\n" + "\n".join(changed)


def _changes(before: Any, after: Any, allowed: set[str], path: str = "") -> list[str]:
    """Where ``after`` differs from ``before`` (keys only in ``after`` are fine; keys in ``allowed`` are skipped)."""
    if isinstance(before, dict) and isinstance(after, dict):
        out = []
        for key, value in before.items():
            if key in allowed:
                continue
            if key not in after:
                out.append(f"{path}/{key}: missing")
            else:
                out += _changes(value, after[key], allowed, f"{path}/{key}")
        return out
    if isinstance(before, list) and isinstance(after, list):
        if len(before) != len(after):
            return [f"{path}: {len(before)} items, now {len(after)}"]
        return [c for i, (b, a) in enumerate(zip(before, after, strict=True)) for c in _changes(b, a, allowed, f"{path}[{i}]")]
    if isinstance(before, float) and isinstance(after, float) and _same_float(before, after):
        return []
    return [] if before == after else [f"{path}: {before!r} -> {after!r}"]


def _same_float(before: float, after: float) -> bool:
    """A statistic may move in its last stored digit: issue 23 item 15 sums preprocess-audit's channel statistics in
    float32 (SIMD order differs between CPUs), so values rounded to 6 places can flip by one unit there."""
    return math.isclose(before, after, rel_tol=1e-5, abs_tol=2e-6)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GAPCHECK_CACHE_DIR", str(tmp_path / "cache"))


def test_export_diff_reports(tmp_path, cache):
    custom = ["--model", "sample_models.planted:build_custom_op", "--input", "x:1x16:float32", "--exporter",
              "torchscript", "--no-progress", "--num-samples", "2"]
    assert main(["export-diff", *custom, "--json", str(tmp_path / "planted.json")]) == 1
    _check("export_diff_planted", tmp_path / "planted.json", tmp_path)
    clean = ["--model", FACTORY, "--input", "x:1x3x8x8:float32", "--exporter", "torchscript", "--no-progress"]
    assert main(["export-diff", *clean, "--json", str(tmp_path / "clean.json")]) == 0
    _check("export_diff_clean", tmp_path / "clean.json", tmp_path)


def test_golden_nightly_and_history_reports(tmp_path, cache):
    from gapcheck.golden import load_bundle
    from tests.nightly.fake_triton import FakeTriton

    out = tmp_path / "bundle"
    assert main(["golden", "record", "--out", str(out), "--model", FACTORY, "--input", "x:1x3x8x8:float32",
                 "--num-samples", "4", "--exporter", "torchscript", "--json", str(tmp_path / "record.json")]) == 0
    _check("golden_record", tmp_path / "record.json", tmp_path)
    assert main(["golden", "verify", str(out), "--json", str(tmp_path / "verify.json")]) == 0
    _check("golden_verify", tmp_path / "verify.json", tmp_path)
    history = tmp_path / "history.sqlite"
    with FakeTriton(load_bundle(out)) as server:
        assert main(["nightly", "--golden", str(out), "--endpoint", f"ok={server.url}", "--history", str(history),
                     "--no-audit", "--json", str(tmp_path / "nightly.json")]) == 0
    _check("nightly_ok", tmp_path / "nightly.json", tmp_path)
    assert main(["history", "--history", str(history), "--json", str(tmp_path / "history.json")]) == 0
    _check("history", tmp_path / "history.json", tmp_path)


def test_data_reports(tmp_path, photo_splits):  # noqa: F811 - the fixture imported above
    assert main(["leakage", "--split", f"train={photo_splits['train']}", "--split",
                 f"val={photo_splits['leaky_val']}", "--engine", "serial", "--json", str(tmp_path / "leakage.json")]) == 1
    _check("leakage", tmp_path / "leakage.json", tmp_path)
    reference, current = shifted_tables(tmp_path, rows=2_000)
    assert main(["drift", "--reference", str(reference), "--current", str(current), "--engine", "serial",
                 "--json", str(tmp_path / "drift.json")]) == 1
    _check("drift", tmp_path / "drift.json", tmp_path)


def test_preprocess_audit_reports(tmp_path, photos):  # noqa: F811 - the fixture imported above
    common = ["--samples", str(photos), "--n", "4", "--engine", "serial", "--no-progress"]
    assert main(["preprocess-audit", *common, "--stage", f"train={stage('train_transform')}",
                 "--stage", f"val={stage('val_transform')}", "--json", str(tmp_path / "clean.json")]) == 0
    _check("preprocess_audit_clean", tmp_path / "clean.json", tmp_path)
    config = tmp_path / "gapcheck.toml"
    train, infer = stage("train_transform"), stage("infer_bgr")
    config.write_text(f'[preprocess.stages.train]\ncallable = "{train}"\n[preprocess.stages.infer]\ncallable = "{infer}"\n')
    assert main(["preprocess-audit", *common, "--config", str(config), "--json", str(tmp_path / "planted.json")]) == 1
    _check("preprocess_audit_planted", tmp_path / "planted.json", tmp_path)

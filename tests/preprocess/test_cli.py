"""`gapcheck preprocess-audit` through the CLI boundary: exit codes and every report format."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from gapcheck.cli.app import main
from tests.preprocess.conftest import stage


def test_clean_exit_0_and_json(photos, tmp_path, capsys):
    report = tmp_path / "r.json"
    code = main(["preprocess-audit", "--samples", str(photos), "--stage", f"train={stage('train_transform')}",
                 "--stage", f"val={stage('val_transform')}", "--n", "2", "--workers", "1", "--no-progress",
                 "--json", str(report)])
    assert code == 0
    assert "PASS" in capsys.readouterr().out
    doc = json.loads(report.read_text())
    assert doc["schema_version"] and doc["command"] == "preprocess-audit" and doc["verdict"] == "pass"
    assert {"findings", "stages", "pairs", "ks", "bad_samples", "stage_errors", "samples", "settings"} <= set(doc)
    assert len(doc["samples"][0]["raw_sha256"]) == 64


def test_gap_exit_1_with_junit_and_json_codes(photos, tmp_path, capsys):
    junit, report = tmp_path / "r.xml", tmp_path / "r.json"
    code = main(["preprocess-audit", "--samples", str(photos), "--stage", f"train={stage('train_transform')}",
                 "--stage", f"infer={stage('infer_bgr')}", "--n", "2", "--workers", "1", "--no-progress",
                 "--junit", str(junit), "--json", str(report)])
    assert code == 1
    out = capsys.readouterr().out
    assert "channel_order" in out and "GAP" in out
    suite = ET.parse(junit).getroot().find("testsuite")
    assert int(suite.get("failures")) == 1
    assert [f["code"] for f in json.loads(report.read_text())["findings"] if f["severity"] == "gap"] == ["channel_order"]


def test_html_is_one_file_and_escapes_hostile_stage_names(photos, tmp_path):
    page = tmp_path / "r.html"
    stage_file = tmp_path / "stages.py"
    stage_file.write_text("from sample_models.preprocessing import train_transform, infer_cv2_resize\n")
    code = main(["preprocess-audit", "--samples", str(photos), "--stage", f"train={stage('train_transform')}",
                 "--stage", f"infer={stage_file}:infer_cv2_resize", "--n", "2", "--workers", "2", "--no-progress",
                 "--html", str(page)])
    assert code == 1
    html = page.read_text()
    assert '<img alt="Channel 0: values per stage" src="data:image/png;base64,' in html  # histograms per channel
    worst = '<img alt="train→infer, worst of 2 differing sample(s) (of 2): '
    assert html.count(worst) == 4 and "<figcaption>|Δ| per pixel" in html  # raw, reference, candidate, heatmap
    assert "<script" not in html and "http://" not in html and "https://" not in html


def test_html_escapes_script_in_stage_errors(photos, tmp_path):
    from gapcheck.preprocess.audit import preprocess_audit
    from gapcheck.report.formats import ReportFormat, render
    from sample_models.preprocessing import train_transform

    def hostile(path: str):
        if "astronaut" in path:  # on one sample: a stage failing on every sample is a usage error, no report
            raise ValueError("<script>alert(1)</script>")
        return train_transform(path)

    # Stage names are validated (letters, digits, _ - .), so hostile text arrives through a stage's error.
    result = preprocess_audit(photos, {"train": stage("train_transform"), "infer": hostile}, n=2, workers=1)
    assert result.settings["in_process"]  # a local function cannot be sent to a worker process
    html = render(ReportFormat.HTML, result)
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_usage_errors_exit_2(photos, tmp_path, capsys):
    assert main(["preprocess-audit", "--samples", str(photos), "--stage", f"train={stage('train_transform')}",
                 "--no-progress"]) == 2  # one stage is not a comparison
    assert main(["preprocess-audit", "--samples", str(photos), "--stage", "train=no.such.module:fn",
                 "--stage", f"val={stage('val_transform')}", "--no-progress"]) == 2
    assert main(["preprocess-audit", "--samples", str(tmp_path / "missing"), "--stage", f"a={stage('train_transform')}",
                 "--stage", f"b={stage('val_transform')}", "--no-progress"]) == 2
    assert main(["preprocess-audit", "--samples", str(photos), "--stage", "bad-target", "--no-progress"]) == 2
    assert "error" in capsys.readouterr().err


def test_help_lists_every_option_the_readme_shows(capsys):
    """The README's usage line named --reference, which does not exist; --help shows --range-tolerance (the older
    --tolerance is accepted but hidden: elsewhere it means PATTERN=RTOL,ATOL)."""
    import re
    from pathlib import Path

    assert main(["preprocess-audit", "--help"]) == 0
    shown = set(re.findall(r"--[a-z][a-z-]+", capsys.readouterr().out))
    assert {"--range-tolerance", "--augmented", "--stage"} <= shown and "--tolerance" not in shown
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    usage = readme.split("## `gapcheck preprocess-audit`", 1)[1].split("```", 2)[1]
    named = set(re.findall(r"--[a-z][a-z-]+", usage))
    assert named and named <= shown, named - shown


def test_import_failure_in_a_worker_is_the_same_usage_error(photos, tmp_path, capsys):
    # With workers the parent only locates the module (no import); the attribute is checked where it is imported.
    assert main(["preprocess-audit", "--samples", str(photos), "--stage", f"train={stage('train_transform')}",
                 "--stage", f"val={stage('no_such_transform')}", "--n", "2", "--workers", "2", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "stage 'val'" in err and "no_such_transform" in err
    broken = tmp_path / "broken_stage.py"
    broken.write_text("raise RuntimeError('broken at import')\ndef pre(path): return path\n")
    assert main(["preprocess-audit", "--samples", str(photos), "--stage", f"train={stage('train_transform')}",
                 "--stage", f"infer={broken}:pre", "--n", "2", "--workers", "2", "--no-progress"]) == 2
    assert "broken at import" in capsys.readouterr().err


def test_stages_from_gapcheck_toml(photos, tmp_path, monkeypatch):
    (tmp_path / "gapcheck.toml").write_text(f"""
[preprocess]
samples = "{photos}"
n = 2
workers = 1

[preprocess.stages.train]
callable = "{stage('train_transform')}"

[preprocess.stages.mobile]
steps = [
  {{op = "decode", backend = "cv2"}}, {{op = "color", order = "rgb"}},
  {{op = "resize", size = 256, backend = "pil", interpolation = "bilinear"}}, {{op = "center_crop", size = 224}},
  {{op = "scale", factor = 0.00392156862745098}},
  {{op = "normalize", mean = [0.485, 0.456, 0.406], std = [0.229, 0.224, 0.225]}}, {{op = "layout", to = "chw"}},
]
""")
    monkeypatch.chdir(tmp_path)
    assert main(["preprocess-audit", "--no-progress"]) == 0

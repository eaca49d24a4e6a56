"""Which step, for callable stages: preprocess-audit traces both stages of a failing pair on real photos.

The pipelines (tests/preprocess/traced_pipelines.py) are torchvision v2 Composes and plain functions that
differ from the reference in exactly one step; they run in the audit's worker processes, loaded by file path.
"""
from __future__ import annotations

import html
from pathlib import Path

import pytest

from gapcheck.preprocess.audit import preprocess_audit
from gapcheck.report.formats import ReportFormat, render
from tests.preprocess.conftest import report_json

PIPELINES = str(Path(__file__).with_name("traced_pipelines.py")) + ":"


@pytest.fixture(scope="module")
def pipelines():
    try:
        from tests.preprocess import traced_pipelines
    except ImportError as exc:
        pytest.skip(f"torchvision definitions not installed (bash scripts/setup_zoo.sh): {exc}")
    return traced_pipelines


def _audit(photos, ref, cand):
    return preprocess_audit(photos, {"train": ref, "infer": cand}, n=2, workers=1, repeats=0)


def _gaps(result):
    return [f for f in result.findings if f.is_gap and f.subject.stage == "train→infer"]


def test_compose_pipelines_name_the_antialias_step_with_every_step_summarized(photos, pipelines):
    result = _audit(photos, PIPELINES + "train_v2", PIPELINES + "infer_v2")
    gaps = _gaps(result)
    assert gaps and all(f.subject.step.startswith("step 3: Resize(") for f in gaps)
    assert "First divergent step: step 3 `Resize(size=[128], interpolation=bilinear, antialias=True)` in infer vs " \
           "`Resize(size=[128], interpolation=bilinear, antialias=False)` in train" in gaps[0].message
    divergence = result.pairs[0].first_divergent_step
    assert divergence.method == "compose/compose" and divergence.max_abs > 10 and not divergence.opaque
    assert [s.label.split("(")[0] for s in divergence.cand_steps] == [
        "load_rgb", "PILToTensor", "Resize", "CenterCrop", "ToDtype", "Normalize"]
    assert len(divergence.ref_steps) == len(divergence.cand_steps) == 6
    # the steps before the divergence produce the same bytes in both stages; the divergent one does not
    same = [r.sha256 == c.sha256 for r, c in zip(divergence.ref_steps, divergence.cand_steps, strict=True)]
    assert same == [True] * 2 + [False] * 4
    assert divergence.cand_steps[-1].shape == (3, 112, 112) and divergence.cand_steps[-1].dtype == "float32"
    document = report_json(result)  # schema-valid, with every step's fingerprint in the pairs section
    steps = document["pairs"][0]["first_divergent_step"]
    assert steps["step_index"] == 3 and len(steps["cand_steps"]) == 6 and len(steps["cand_steps"][2]["sha256"]) == 64
    table = next(v for v in result.views() if getattr(v, "title", "").startswith("Steps of train→infer"))
    assert table.highlight == (6 + 2,) and table.rows[8][2].startswith("Resize(")
    page = render(ReportFormat.HTML, result)
    assert "Steps of train→infer" in html.unescape(page) and "antialias=True" in html.unescape(page)


def test_function_against_compose_is_recorded_at_runtime_and_names_the_opaque_decode(photos, pipelines):
    result = _audit(photos, PIPELINES + "train_v2", PIPELINES + "infer_functional")
    gaps = _gaps(result)
    assert gaps and all(f.subject.step.split(": ", 1)[1].startswith("interpolate(") for f in gaps)
    finding = gaps[0]
    assert "antialias=True" in finding.subject.step and "antialias=False" in finding.evidence["first_divergent_step"]
    assert finding.evidence["step_method"] == "compose/runtime"
    assert finding.evidence["opaque_parts"] == [
        "infer: everything before the first torch call (decoding, PIL/OpenCV steps) is observed only at its end"]
    assert "torch.fx cannot trace it" in finding.evidence["fx_fallback"][0]
    assert "Observed only at their boundaries: infer:" in finding.message
    cand_steps = result.pairs[0].first_divergent_step.cand_steps
    assert cand_steps[0].label == "tensor from the decoded array (boundary)" and cand_steps[0].dtype == "uint8"


def test_function_against_declared_steps_names_the_normalization_step(photos, pipelines):
    result = _audit(photos, pipelines.PIL_STEPS, PIPELINES + "infer_pil_half_mean")
    gaps = _gaps(result)
    assert {f.code for f in gaps} >= {"normalization"}
    divergence = result.pairs[0].first_divergent_step
    assert divergence.method == "steps/runtime"
    # the constant mean is shown, not recorded as a step of its own
    assert divergence.cand_step == "sub((0.5, 0.5, 0.5))" and divergence.ref_step.startswith("normalize(mean=(0.485")
    assert not any(s.label.startswith("tensor(") for s in divergence.cand_steps)
    assert all(f.subject.step == "step 5: sub((0.5, 0.5, 0.5))" for f in gaps)


def test_clean_pair_of_separately_built_pipelines_has_no_finding(photos, pipelines):
    result = _audit(photos, PIPELINES + "train_v2", PIPELINES + "train_v2_again")
    assert result.verdict == "pass" and not result.findings
    assert result.pairs[0].first_divergent_step is None

"""Issue #7 (12): a resize that several candidates explain on one sample is not pinned on the wrong backend."""
from __future__ import annotations

from gapcheck.preprocess.audit import preprocess_audit
from tests.preprocess.conftest import stage

STAGES = {"train": stage("train_direct_resize"), "infer": stage("infer_cv2_area")}


def resize_finding(result):
    (finding,) = [f for f in result.findings if f.code == "resize"]
    return finding


def test_one_exact_2x_sample_cannot_separate_the_candidates_and_says_so(exact_2x):
    result = preprocess_audit(exact_2x, STAGES, workers=1, repeats=0)
    finding = resize_finding(result)
    ev = finding.evidence
    # cv2 INTER_LINEAR (no antialias) gives the very same pixels as INTER_AREA on an exact 2x downscale.
    assert ev["cand_candidates"] == ["cv2 INTER_AREA", "cv2 INTER_LINEAR"]
    assert ev["separated"] is False and ev["cand_method"] is None and ev["cand_antialias"] is None
    assert "cannot separate cv2 INTER_AREA, cv2 INTER_LINEAR" in finding.message
    assert ev["ref_method"] == "PIL bilinear" and ev["ref_antialias"] is True
    # The stage table says so too, instead of naming whichever candidate scored first.
    assert "cv2 INTER_AREA" in result.stages[1].resize_method and "cannot separate" in result.stages[1].resize_method


def test_a_sample_that_separates_the_candidates_decides(exact_2x_and_photos):
    result = preprocess_audit(exact_2x_and_photos, STAGES, workers=1, repeats=0)
    finding = resize_finding(result)
    ev = finding.evidence
    assert ev["cand_method"] == "cv2 INTER_AREA" and ev["cand_candidates"] == ["cv2 INTER_AREA"]
    assert ev["separated"] is True and ev["cand_antialias"] is True
    assert "antialias on" in finding.message and "cannot separate" not in finding.message
    # The evidence comes from a sample that separates them, not from the ambiguous exact-2x one.
    assert not finding.subject.sample.endswith("a_exact2x.png")
    assert [s.rsplit("/", 1)[-1] for s in ev["ambiguous_samples"]] == ["a_exact2x.png"]


def test_resize_finding_says_when_antialias_is_off(photos):
    result = preprocess_audit(photos, {"train": stage("train_transform"), "infer": stage("infer_cv2_resize")},
                              n=2, workers=1, repeats=0)
    finding = resize_finding(result)
    assert finding.evidence["cand_antialias"] is False and "(no antialias)" in finding.message

"""Every finding code with a planted bug on real photographs; clean and equivalent pipelines pass."""
from __future__ import annotations

import pytest

from gapcheck.preprocess.audit import preprocess_audit
from gapcheck.preprocess.stages import make_spec
from sample_models import preprocessing
from tests.preprocess.conftest import stage


def gap_codes(result) -> set[str]:
    return {f.code for f in result.findings if f.is_gap}


def test_clean_pipelines_pass(photos):
    result = preprocess_audit(photos, {"train": stage("train_transform"), "val": stage("val_transform"),
                                       "infer": stage("infer_transform")}, workers=2)
    assert result.verdict == "pass" and bool(result)
    assert gap_codes(result) == set()
    assert all(p.within_tolerance and p.max_abs == 0.0 for p in result.pairs)
    assert len(result.pairs) == 3
    assert result.stages[0].resize_method.startswith("PIL bilinear")
    # Per sample, per stage: the raw SHA256 and the output fingerprint, joined by sample.
    sample = result.samples[0]
    assert len(sample.raw_sha256) == 64 and {o.stage for o in sample.stages} == {"train", "val", "infer"}
    assert len({o.sha256 for o in sample.stages}) == 1


def test_equivalent_but_different_pipeline_passes(photos):
    result = preprocess_audit(photos, {"train": stage("train_transform"), "infer": stage("infer_equivalent")}, workers=1)
    assert result.verdict == "pass", [f.message for f in result.findings]
    pair = result.pairs[0]
    assert pair.within_tolerance and 0 < pair.max_abs < 1e-5


@pytest.mark.parametrize(
    "cand, code, evidence_key, evidence_value",
    [
        ("infer_bgr", "channel_order", "cand_order", "BGR"),
        ("infer_hwc", "layout", "cand_layout", "HWC"),
        ("infer_wrong_normalization", "normalization", "cand_implied_mean", [0.5, 0.5, 0.5]),
        ("infer_cv2_resize", "resize", "cand_method", "cv2 INTER_LINEAR"),
        ("infer_no_crop", "crop", "cand_geometry", "resize to 224x224"),
        ("infer_float64", "dtype", "cand_dtype", "float64"),
    ],
)
def test_planted_bug_is_named(photos, cand, code, evidence_key, evidence_value):
    result = preprocess_audit(photos, {"train": stage("train_transform"), "infer": stage(cand)}, n=3, workers=1)
    assert result.verdict == "gap"
    assert gap_codes(result) == {code}, [f.message for f in result.findings]
    finding = next(f for f in result.findings if f.code == code)
    assert finding.evidence[evidence_key] == evidence_value
    assert finding.subject.stage == "train→infer" and finding.subject.sample is not None


def test_an_extra_batch_axis_of_one_is_an_info_not_a_gap(photos):
    # a server's x[None] is not a behaviour gap (review D5): compared squeezed, said as an info
    result = preprocess_audit(photos, {"train": stage("train_transform"), "infer": stage("infer_batched")}, n=2, workers=1)
    assert result.verdict == "pass" and gap_codes(result) == set()
    assert [(f.code, f.severity.value) for f in result.findings if f.code == "shape"] == [("shape", "info")]


def test_normalization_reports_implied_constants_of_both_stages(photos):
    result = preprocess_audit(photos, {"train": stage("train_transform"), "infer": stage("infer_wrong_normalization")},
                              n=2, workers=1)
    finding = next(f for f in result.findings if f.code == "normalization")
    assert finding.evidence["ref_implied_mean"] == pytest.approx([0.485, 0.456, 0.406], abs=2e-3)
    assert finding.evidence["ref_implied_std"] == pytest.approx([0.229, 0.224, 0.225], abs=2e-3)


def test_scale_bug(photos):
    result = preprocess_audit(photos, {"train": stage("train_unnormalized"), "infer": stage("infer_unscaled")},
                              n=3, workers=1)
    assert gap_codes(result) == {"scale"}, [f.message for f in result.findings]
    assert next(f for f in result.findings if f.code == "scale").evidence["factor_cand_to_ref"] == pytest.approx(1 / 255)


def test_resize_replay_evidence_names_the_backend(photos):
    result = preprocess_audit(photos, {"train": stage("train_transform"), "infer": stage("infer_cv2_resize")}, n=2, workers=1)
    finding = next(f for f in result.findings if f.code == "resize")
    assert finding.evidence["ref_method"] == "PIL bilinear"
    assert finding.evidence["cand_replay_psnr_db"] > finding.evidence["cand_psnr_with_ref_method_db"] + 10


def test_nondeterministic_validation(photos):
    result = preprocess_audit(photos, {"train": stage("train_transform"), "val": stage("val_random_flip")},
                              workers=1, repeats=3)
    assert gap_codes(result) == {"nondeterministic"}
    pair = result.pairs[0]
    assert not pair.diagnosed  # a random stage is never diagnosed per sample
    assert pair.within_tolerance or "random" in pair.note
    assert [row.deterministic for row in result.stages] == [True, False]
    # the message says how to declare intended augmentation (the user did not find --augmented)
    finding = next(f for f in result.findings if f.code == "nondeterministic")
    assert "--augmented val" in finding.message and "augmented = true in [preprocess.stages.val]" in finding.message


def test_augmented_training_stage_is_not_a_gap(photos):
    specs = [make_spec("train", target=stage("train_augmented"), augmented=True), make_spec("val", target=stage("val_transform"))]
    result = preprocess_audit(photos, specs, workers=1, repeats=3)
    assert gap_codes(result) == set()
    assert any(f.code == "nondeterministic" and f.severity.value == "info" for f in result.findings)


def test_unexplained_difference_is_reported_with_its_size(photos):
    result = preprocess_audit(photos, {"train": stage("train_transform"), "infer": stage("infer_gamma")}, n=2, workers=1)
    assert gap_codes(result) == {"unexplained"}
    finding = next(f for f in result.findings if f.code == "unexplained")
    assert finding.evidence["max_abs"] > 0.5


def test_recipe_stages_report_first_divergent_step(photos):
    result = preprocess_audit(
        photos, {"train": preprocessing.TRAIN_STEPS, "mobile": preprocessing.MOBILE_STEPS}, n=2, workers=1)
    assert "resize" in gap_codes(result)
    divergence = result.pairs[0].first_divergent_step
    assert divergence is not None and divergence.step_index == 3  # mobile step 3, after decode + colour
    assert "cv2" in divergence.cand_step and "pil" in divergence.ref_step
    assert result.stages[1].resize_method == "cv2 INTER_LINEAR (declared)"


def test_recipe_reproduces_the_python_pipeline(photos):
    result = preprocess_audit(photos, {"train": stage("train_transform"), "recipe": preprocessing.TRAIN_STEPS}, workers=1)
    assert result.verdict == "pass", [f.message for f in result.findings]


def test_ks_flags_shifted_channels_with_effect_size(photos):
    result = preprocess_audit(photos, {"train": stage("train_transform"), "infer": stage("infer_bgr")}, workers=1)
    flagged = [k for k in result.ks if k.flagged]
    assert {k.channel for k in flagged} >= {0, 2}
    assert all(k.p_value < 0.01 and k.statistic >= 0.1 for k in flagged)
    assert not any(k.flagged for k in result.ks if k.channel == 1)  # green stays green


def test_min_effect_keeps_trivia_out(photos):
    result = preprocess_audit(photos, {"train": stage("train_transform"), "infer": stage("infer_bgr")},
                              workers=1, min_effect=0.99)
    assert not any(k.flagged for k in result.ks)

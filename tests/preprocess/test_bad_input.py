"""Hostile and unusual inputs are counted and listed, never a crash and never silently dropped."""
from __future__ import annotations

from gapcheck.codes.preprocess import DECOMPRESSION_BOMB
from gapcheck.preprocess.audit import preprocess_audit
from gapcheck.preprocess.samples import screen_bytes
from tests.preprocess.conftest import stage


def test_every_bad_input_is_listed_and_good_ones_audited(mixed_inputs):
    result = preprocess_audit(mixed_inputs, {"train": stage("train_transform"), "infer": stage("infer_transform")}, workers=2)
    codes = {b.path.rsplit("/", 1)[-1]: b.code for b in result.bad_samples}
    assert codes == {
        "c_grayscale.png": "grayscale_input",
        "d_rgba.png": "alpha_input",
        "e_16bit.png": "high_bit_depth_input",
        "f_truncated.jpg": "corrupt_image",
        "g_notes.txt": "not_image",
        "h_bomb.png": "decompression_bomb",
        "i_garbage.png": "corrupt_image",
    }
    assert len(result.samples) == 9  # nothing dropped
    assert result.audited_samples == 5  # 2 photos + grayscale, RGBA, 16-bit (decodable, still audited)
    skipped = {b.code for b in result.bad_samples if b.skipped}
    assert skipped == {"corrupt_image", "not_image", "decompression_bomb"}
    warning_codes = {f.code for f in result.findings if f.severity.value == "warning"}
    assert {"grayscale_input", "corrupt_image", "not_image", "decompression_bomb"} <= warning_codes
    assert result.verdict == "pass"  # the clean pipelines agree on every decodable sample
    # only inputs that were not audited are bad in the headline (review: "PASS 8/8 samples ... 4 bad input(s)")
    assert "5/9 samples audited" in result.headline and "4 bad input(s) (3 unusual one(s) audited" in result.headline


def test_stage_that_raises_is_reported_with_sample_and_error(mixed_inputs):
    result = preprocess_audit(mixed_inputs, {"train": stage("train_transform"), "infer": stage("infer_fragile")}, workers=1)
    errors = {e.sample.rsplit("/", 1)[-1]: e.error for e in result.stage_errors}
    assert set(errors) == {"c_grayscale.png", "d_rgba.png"}
    assert all(e.startswith("ValueError: expected an HxWx3 image") for e in errors.values())
    finding = next(f for f in result.findings if f.code == "stage_error")
    assert finding.is_gap and finding.evidence["count"] == 2
    assert result.verdict == "gap"


def test_bomb_header_rejected_without_decoding():
    from tests.preprocess.conftest import _png_with_size

    screening = screen_bytes(_png_with_size(40000, 40000))
    assert screening.issue.code is DECOMPRESSION_BOMB and "exceeds" in screening.issue.detail
    assert screen_bytes(_png_with_size(100, 100), max_pixels=50).issue.code is DECOMPRESSION_BOMB

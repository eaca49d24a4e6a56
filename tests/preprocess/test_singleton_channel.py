"""A grayscale output as (H, W) in one stage and (1, H, W) or (H, W, 1) in another is the same picture: compared with
the channel axis squeezed and said as one info naming the stage with the extra axis; values that then differ are gaps
as usual, and grayscale against three channels stays a real shape difference. Real scikit-image photos."""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from gapcheck.preprocess.layout import detect_layout, lone_channel_apart
from gapcheck.preprocess.summary import summarize_output
from gapcheck.preprocess.worker import pair_delta
from tests.preprocess.conftest import audit_pair, gap_codes, report_json, skimage_folder

STAGES_FILE = Path(__file__).with_name("opencv_stages.py")
STAGES = f"{STAGES_FILE}:"


@pytest.fixture(scope="module")
def gray_photos(tmp_path_factory) -> Path:
    """Two grayscale photos (camera, coins) and a colour one (astronaut), as they ship with scikit-image."""
    return skimage_folder(tmp_path_factory, "gray_photos", ("camera.png", "coins.png", "astronaut.png"))


_audit, _gaps = functools.partial(audit_pair, STAGES_FILE), gap_codes  # (samples, train stage, infer stage)


def _channel_notes(result) -> list:
    return [f for f in result.findings if "channel_axis" in f.evidence]


@pytest.mark.parametrize("cand, where, shape", [("gray_chw", "leading", [1, 64, 64]),
                                                ("gray_hwc", "trailing", [64, 64, 1])])
def test_a_lone_channel_axis_is_compared_squeezed_and_said_as_one_info(gray_photos, cand, where, shape):
    result = _audit(gray_photos, "gray_hw", cand)
    assert result.verdict == "pass" and _gaps(result) == set(), [f.message for f in result.findings]  # was a layout gap
    [note] = _channel_notes(result)
    assert note.code == "shape" and note.severity.value == "info" and note.subject.stage == "train→infer"
    assert note.message.startswith("infer keeps a channel axis of size 1 that train has not")
    assert note.evidence["extra_axis_stage"] == "infer" and note.evidence["channel_axis"] == where
    assert note.evidence["cand_shape"] == shape and note.evidence["ref_shape"] == [64, 64]
    assert note.evidence["samples"] == 3 and note.evidence["compared_samples"] == 3
    assert result.pairs[0].within_tolerance and result.pairs[0].max_abs == 0.0
    [said] = [f for f in report_json(result)["findings"] if "channel_axis" in f["evidence"]]  # schema-valid JSON
    assert said["severity"] == "info" and said["evidence"]["extra_axis_stage"] == "infer"


def test_the_info_names_the_reference_when_it_has_the_axis(gray_photos):
    result = _audit(gray_photos, "gray_chw", "gray_hw")
    assert result.verdict == "pass" and _gaps(result) == set()
    [note] = _channel_notes(result)
    assert note.evidence["extra_axis_stage"] == "train" and "train keeps a channel axis of size 1" in note.message


def test_values_that_differ_once_squeezed_are_still_a_gap_without_a_layout_one(gray_photos):
    result = _audit(gray_photos, "gray_hw", "gray_chw_halved")
    assert result.verdict == "gap" and _gaps(result) == {"normalization"}, [f.message for f in result.findings]
    assert len(_channel_notes(result)) == 1


def test_an_opencv_grayscale_stage_keeps_its_resize_gap_and_loses_the_layout_one(gray_photos):
    result = _audit(gray_photos, "gray_hw", "cv2_gray_hwc")  # cv2 INTER_LINEAR against PIL bilinear
    assert _gaps(result) == {"resize"}, [f.message for f in result.findings]
    assert [n.evidence["channel_axis"] for n in _channel_notes(result)] == ["trailing"]


def test_grayscale_against_three_channels_stays_a_shape_gap(gray_photos):
    result = _audit(gray_photos, "gray_chw", "gray_as_rgb")
    finding = next(f for f in result.findings if f.code == "shape")
    assert finding.is_gap and "infer outputs 3 channel(s) of 64x64, train 1 of 64x64" in finding.message
    assert _channel_notes(result) == [] and not result.pairs[0].comparable_samples


def test_a_transposed_picture_with_a_channel_axis_is_a_shape_gap_without_the_channel_axis_info(gray_photos):
    result = _audit(gray_photos, "rect_hw", "rect_whc")  # (48, 64) against (64, 48, 1): squeezed, still other sizes
    shape = next(f for f in result.findings if f.code == "shape" and f.is_gap)
    assert "infer outputs 1 channel(s) of 64x48, train 1 of 48x64" in shape.message
    assert "channel axis" not in shape.message  # was "infer keeps a channel axis of size 1, train outputs (H, W)"
    assert _channel_notes(result) == []  # was an info saying they "were compared with it squeezed, on 3 of 3"
    assert not any("squeezed" in f.message for f in result.findings), [f.message for f in result.findings]
    assert result.verdict == "gap" and not result.pairs[0].comparable_samples


def test_a_batch_of_one_is_labelled_with_its_batch_axis(gray_photos):
    result = _audit(gray_photos, "gray_hw", "gray_bchw")
    assert result.verdict == "pass" and _gaps(result) == set()
    [note] = _channel_notes(result)
    assert "infer: [1, 1, 64, 64] (1, 1, H, W), train: [64, 64] (H, W)" in note.message  # was "(1, H, W)"


def test_pair_deltas_squeeze_a_lone_channel_axis_only_against_hw():
    plane = np.random.default_rng(0).random((8, 8), dtype=np.float32)

    def delta(a: np.ndarray, b: np.ndarray):
        a_info, b_info = detect_layout(a.shape), detect_layout(b.shape)
        return pair_delta("a", a, summarize_output(a, a_info.channel_axis), "b", b,
                          summarize_output(b, b_info.channel_axis))

    for extra in (plane[None], plane[..., None], plane[None, None]):  # (1, H, W), (H, W, 1), batch + channel
        assert delta(plane, extra).comparable and delta(plane, extra).max_abs == 0.0
        assert delta(extra, plane).comparable
    assert delta(plane, plane[None] + 1).max_abs == pytest.approx(1.0)  # compared, so the values still count
    assert not delta(plane, np.repeat(plane[None], 3, axis=0)).comparable  # grayscale against RGB
    assert not delta(plane[None], plane[..., None]).comparable  # CHW against HWC stays a layout difference
    assert not delta(plane, plane[None, :, :7].copy()).comparable  # another size stays another size


def test_lone_channel_apart_is_one_channel_with_and_without_its_axis():
    hw, chw, hwc, rgb = (detect_layout(s) for s in ((8, 8), (1, 8, 8), (8, 8, 1), (3, 8, 8)))
    assert lone_channel_apart(hw, chw) and lone_channel_apart(hwc, hw)
    assert not lone_channel_apart(hw, rgb) and not lone_channel_apart(chw, hwc) and not lone_channel_apart(hw, hw)
    assert not lone_channel_apart(detect_layout((48, 64)), detect_layout((64, 48, 1)))  # transposed: another size
    assert not lone_channel_apart(detect_layout((1, 48, 64)), detect_layout((64, 48)))


def test_cli_exits_0_with_the_info_line(gray_photos, capsys):
    from gapcheck.cli.app import main

    code = main(["preprocess-audit", "--samples", str(gray_photos), "--stage", f"train={STAGES}gray_hw",
                 "--stage", f"infer={STAGES}gray_chw", "--n", "3", "--workers", "1", "--repeats", "0", "--no-progress"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0 and any(line.startswith("INFO") and "infer keeps a channel axis of size 1" in line for line in lines)
    assert not any(line.startswith("GAP") for line in lines)  # was "GAP layout ... infer is CHW, train is HW", exit 1

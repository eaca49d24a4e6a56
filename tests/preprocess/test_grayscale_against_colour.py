"""One stage converts photos to grayscale, the other keeps colour: one `shape` gap that says so, names the stage
(and the step, for declared step lists and traced stages) and whether the grayscale values are a standard luminance of
the colour ones; no `layout` or `channel_order` gap next to it (a lone plane has neither to compare). Real
scikit-image photos."""
from __future__ import annotations

import functools
import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from PIL import Image

from gapcheck.preprocess.audit import preprocess_audit
from gapcheck.preprocess.layout import colour_apart, detect_layout
from gapcheck.preprocess.luminance import luminance_match
from gapcheck.preprocess.recipe import parse_steps
from gapcheck.preprocess.stages import make_spec
from tests.preprocess.conftest import SKIMAGE_DATA, audit_pair, gap_codes, report_json, skimage_folder

STAGES_FILE = Path(__file__).with_name("colour_stages.py")
STAGES = f"{STAGES_FILE}:"
SCHEMA = Path(__file__).resolve().parents[2] / "gapcheck" / "schemas" / "preprocess-audit.schema.json"


@pytest.fixture(scope="module")
def colour_photos(tmp_path_factory) -> Path:
    """Three colour photos as they ship with scikit-image."""
    return skimage_folder(tmp_path_factory, "colour_photos", ("astronaut.png", "coffee.png", "chelsea.png"))


_audit, _gaps = functools.partial(audit_pair, STAGES_FILE), gap_codes  # (samples, train stage, infer stage)


def _shape(result):
    [finding] = [f for f in result.findings if f.code == "shape"]
    return finding


@pytest.mark.parametrize("ref, cand", [("pil_rgb_chw", "pil_gray_hw"), ("pil_rgb_chw", "pil_gray_hwc"),
                                       ("pil_rgb_hwc", "pil_gray_chw"), ("pil_rgb_hwc", "pil_gray_hw")])
def test_grayscale_against_rgb_is_one_shape_gap_that_names_the_conversion(colour_photos, ref, cand):
    result = _audit(colour_photos, ref, cand)
    assert _gaps(result) == {"shape"}, [f.message for f in result.findings]  # was shape + layout + channel_order
    finding = _shape(result)
    assert finding.message.startswith("infer gives 1 channel (grayscale), train 3 (RGB): infer converts the picture "
                                      "to grayscale and train keeps its colour; infer outputs 1 channel(s) of 64x64, "
                                      "train 3 of 64x64; infer's values are the luminance of train's: ITU-R 601 luma"
                                      ), finding.message
    assert finding.evidence["grayscale_stage"] == "infer" and finding.evidence["colour_stage"] == "train"
    assert finding.evidence["luminance"].startswith("ITU-R 601") and finding.evidence["luminance_order"] == "RGB"
    assert finding.evidence["luminance_samples"] == 2 and finding.evidence["luminance_max_abs_rel"] < 3 / 255
    assert finding.subject.stage == "train→infer" and result.verdict == "gap"
    assert not result.ks and [f.code for f in result.findings] == ["shape"]  # no KS of the gray plane against red


def test_the_reference_can_be_the_grayscale_stage(colour_photos):
    result = _audit(colour_photos, "pil_gray_chw", "pil_rgb_chw")
    assert _gaps(result) == {"shape"}, [f.message for f in result.findings]
    assert _shape(result).message.startswith("train gives 1 channel (grayscale), infer 3 (RGB): train converts")
    assert "train's values are the luminance of infer's" in _shape(result).message


def test_opencv_gray_against_an_unconverted_bgr_decode_says_bgr(colour_photos):
    result = _audit(colour_photos, "cv2_bgr_hwc", "cv2_gray")
    assert _gaps(result) == {"shape"}, [f.message for f in result.findings]  # was + layout + "BGR vs [0]" order
    finding = _shape(result)
    assert finding.message.startswith("infer gives 1 channel (grayscale), train 3 (BGR)")
    assert "of train's channels read as BGR" in finding.message and finding.evidence["luminance_order"] == "BGR"


def test_scikit_image_rgb2gray_is_named_as_the_709_luma(colour_photos):
    finding = _shape(_audit(colour_photos, "pil_rgb_chw", "skimage_gray"))
    assert finding.evidence["luminance"].startswith("ITU-R 709") and "rgb2gray" in finding.message


def test_another_resize_too_is_said_and_keeps_its_own_gap(colour_photos):
    result = _audit(colour_photos, "pil_rgb_chw", "cv2_gray")  # cv2 INTER_AREA against PIL bilinear
    assert _gaps(result) == {"shape", "resize"}, [f.message for f in result.findings]
    finding = _shape(result)
    assert "infer's values are not a standard luminance of train's" in finding.message
    assert finding.evidence["luminance"] is None and finding.evidence["luminance_samples"] >= 1  # stops at the first


def test_a_value_map_on_top_is_said_with_the_map(colour_photos):
    result = _audit(colour_photos, "pil_rgb_chw", "pil_gray_halved")
    finding = _shape(result)
    assert "infer's values are the luminance of train's up to a value map (infer ≈ 0.5" in finding.message
    assert not {"layout", "channel_order", "unexplained"} & _gaps(result), [f.message for f in result.findings]


def test_a_grayscale_plane_repeated_into_three_channels_is_said_so(colour_photos):
    result = _audit(colour_photos, "pil_gray_hw", "pil_gray_repeated")
    assert _gaps(result) == {"shape"}, [f.message for f in result.findings]
    finding = _shape(result)
    assert finding.message.startswith("train gives 1 channel (grayscale), infer 3 (one grayscale plane repeated): both "
                                      "are grayscale, infer repeats its plane into 3 channels"), finding.message
    assert "train's values are that plane; max |Δ| 0 of the range" in finding.message  # no weighting is named
    assert finding.evidence["luminance"] == "one plane repeated in every channel"


def test_a_traced_torch_stage_names_the_step_that_drops_the_colour(colour_photos):
    result = _audit(colour_photos, "torch_rgb", "torch_gray")
    assert _gaps(result) == {"shape"}, [f.message for f in result.findings]
    finding = _shape(result)
    assert finding.subject.step is not None and finding.subject.step.startswith("step 8: __getitem__(0)")
    assert "First divergent step: step 8 `__getitem__(0)` in infer" in finding.message
    assert finding.evidence["luminance_max_abs_rel"] < 1e-6  # the same weights, in float: exact


def test_cli_json_is_schema_valid_with_one_gap(colour_photos, tmp_path, capsys):
    from gapcheck.cli.app import main

    report = tmp_path / "r.json"
    code = main(["preprocess-audit", "--samples", str(colour_photos), "--stage", f"train={STAGES}pil_rgb_chw",
                 "--stage", f"infer={STAGES}pil_gray_hw", "--n", "3", "--workers", "1", "--repeats", "0",
                 "--no-progress", "--json", str(report)])
    out = capsys.readouterr().out
    document = json.loads(report.read_text())
    jsonschema.validate(document, json.loads(SCHEMA.read_text()))
    gaps = [f for f in document["findings"] if f["severity"] == "gap"]
    assert code == 1 and [f["code"] for f in gaps] == ["shape"], [f["message"] for f in document["findings"]]
    assert gaps[0]["evidence"]["grayscale_stage"] == "infer" and gaps[0]["evidence"]["luminance"].startswith("ITU-R 601")
    assert "infer gives 1 channel (grayscale), train 3 (RGB)" in " ".join(out.split())  # the console wraps lines
    assert "GAP     shape" in out and "GAP     layout" not in out and "GAP     channel_order" not in out


def test_the_library_json_carries_the_luminance_evidence(colour_photos):
    [said] = [f for f in report_json(_audit(colour_photos, "cv2_bgr_hwc", "cv2_gray"))["findings"] if f["code"] == "shape"]
    assert said["evidence"]["colour_channels"] == 3 and said["evidence"]["luminance_order"] == "BGR"


def test_colour_apart_is_one_channel_against_three_or_four():
    hw, chw1, hwc1, rgb, hwc3, rgba, two = (detect_layout(s) for s in (
        (8, 8), (1, 8, 8), (8, 8, 1), (3, 8, 8), (8, 8, 3), (4, 8, 8), (2, 8, 8)))
    assert all(colour_apart(g, c) and colour_apart(c, g) for g in (hw, chw1, hwc1) for c in (rgb, hwc3, rgba))
    assert not colour_apart(rgb, hwc3) and not colour_apart(hw, chw1) and not colour_apart(hw, two)


def test_luminance_match_picks_the_weights_and_order_and_refuses_others():
    rgb = np.random.default_rng(0).random((3, 16, 16))
    gray = 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]
    match = luminance_match(gray, rgb)
    assert match is not None and match.luma.name.startswith("ITU-R 601") and match.order == "RGB" and match.same_values
    flipped = luminance_match(gray, rgb[::-1])
    assert flipped is not None and flipped.order == "BGR"
    scaled = luminance_match(gray * 255 + 3, rgb)
    assert scaled is not None and not scaled.same_values and scaled.slope == pytest.approx(255)
    assert luminance_match(rgb[0], rgb) is None  # one channel is no luminance
    assert luminance_match(gray[:8], rgb) is None  # another size is not weighed
    with_alpha = np.concatenate([rgb, np.ones((1, 16, 16))])
    assert luminance_match(gray, with_alpha) is not None  # the alpha channel is not weighted


# --- declared step lists: {op = "color", order = "gray"} --------------------------------------------------------------

TAIL = [{"op": "resize", "size": [64, 64]}, {"op": "scale", "factor": 1 / 255}, {"op": "layout", "to": "chw"}]


def _audit_steps(samples: Path, ref: list, cand: list):
    return preprocess_audit(samples, [make_spec("train", steps=ref), make_spec("infer", steps=cand)], n=3, workers=1,
                            repeats=0)


@pytest.mark.parametrize("decode, ref_step", [({"op": "decode"}, "resize(size=(64, 64))"),
                                              ({"op": "decode", "backend": "cv2"}, "color(order=rgb)")])
def test_declared_step_lists_name_the_step_that_drops_the_colour(colour_photos, decode, ref_step):
    colour = [decode, {"op": "color", "order": "rgb"}] if decode.get("backend") == "cv2" else [decode]
    result = _audit_steps(colour_photos, colour + TAIL, [decode, {"op": "color", "order": "gray"}, *TAIL])
    assert _gaps(result) == {"shape"}, [f.message for f in result.findings]
    finding = _shape(result)
    assert finding.subject.step == "step 2: color(order=gray)"
    assert f"First divergent step: step 2 `color(order=gray)` in infer vs `{ref_step}` in train" in finding.message
    assert "infer's values are the luminance of train's: ITU-R 601 luma" in finding.message


def test_grayscale_made_after_the_resize_is_no_resize_gap(colour_photos):
    """The grayscale stage replays on the file's own grayscale (converted before resizing) only a few levels off, and
    a torch resize fitted that better than PIL's: a luminance of the colour output has the colour output's geometry."""
    after = [{"op": "decode"}, TAIL[0], {"op": "color", "order": "gray"}, *TAIL[1:]]
    result = _audit_steps(colour_photos, [{"op": "decode"}, *TAIL], after)
    assert _gaps(result) == {"shape"}, [f.message for f in result.findings]  # was shape + resize (torch bilinear)
    assert _shape(result).subject.step == "step 3: color(order=gray)"
    callable_result = _audit(colour_photos, "pil_rgb_chw", "pil_gray_after_resize")
    assert _gaps(callable_result) == {"shape"}, [f.message for f in callable_result.findings]


def test_the_gray_step_is_pils_convert_l_and_keeps_a_channel_axis_where_the_layout_puts_it():
    path = str(SKIMAGE_DATA / "coffee.png")
    pil_l = np.asarray(Image.open(path).convert("L"))
    for backend in ("pil", "cv2"):  # OpenCV's BGR decode is weighed in its own order
        gray = parse_steps([{"op": "decode", "backend": backend}, {"op": "color", "order": "gray"}])(path)
        assert gray.dtype == np.uint8 and np.array_equal(gray, pil_l)  # bit for bit
    chw = parse_steps([{"op": "decode"}, {"op": "color", "order": "gray"}, *TAIL])(path)
    assert chw.shape == (1, 64, 64)
    for backend in ("pil", "cv2", "torch"):  # PIL cannot hold (H, W, 1) and cv2.resize drops its axis: kept here
        hwc = parse_steps([{"op": "decode"}, {"op": "color", "order": "gray"}, {"op": "layout", "to": "hwc"},
                           {"op": "resize", "size": [32, 32], "backend": backend}])(path)
        assert hwc.shape == (32, 32, 1)
    with pytest.raises(ValueError, match="a grayscale image has no channels to put in rgb order"):
        parse_steps([{"op": "decode"}, {"op": "color", "order": "gray"}, {"op": "color", "order": "rgb"}])(path)
    with pytest.raises(ValueError, match="order must be 'rgb', 'bgr' or 'gray'"):
        parse_steps([{"op": "decode"}, {"op": "color", "order": "grey"}])

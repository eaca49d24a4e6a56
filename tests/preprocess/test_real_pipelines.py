"""A new user's real pipelines (issue 23 follow-up): timm's eval transforms at every common crop_pct, torchvision's
classic 256/224, OpenCV ports, BGR decodes, EXIF, grayscale readers. Each differing pair is explained by its cause,
never "unexplained", and one cause gives one finding. The pipelines are tests/preprocess/real_pipelines.py.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from gapcheck.errors import UsageError
from gapcheck.preprocess.affine import AffineFit
from gapcheck.preprocess.audit import preprocess_audit
from gapcheck.preprocess.diagnoses.normalization import same_map_after_swap
from gapcheck.preprocess.diagnoses.traced_steps import align
from gapcheck.preprocess.layout import to_chw
from gapcheck.preprocess.replay import fit_profile, shorter_sides
from gapcheck.preprocess.samples import decode_rgb
from gapcheck.preprocess.traced import BOUNDARY_LABEL, trace_stage
from tests.preprocess import phone_photos
from tests.preprocess.conftest import SKIMAGE_DATA

PIPELINES = str(Path(__file__).with_name("real_pipelines.py")) + ":"


@pytest.fixture(scope="module")
def pipes():
    from tests.preprocess import real_pipelines

    return real_pipelines


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory) -> Path:
    """Three real photos as JPEGs without EXIF (saturated colours: astronaut's suit, coffee's cup)."""
    folder = tmp_path_factory.mktemp("jpegs")
    for name in ("astronaut.png", "coffee.png", "chelsea.png"):
        Image.open(SKIMAGE_DATA / name).convert("RGB").save(folder / f"{Path(name).stem}.jpg", quality=92)
    return folder


@pytest.fixture(scope="module")
def exif_photos(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("exif")
    phone_photos.exif_jpegs(folder)
    return folder


def _audit(samples, ref, cand, **options):
    stages = {"train": ref if isinstance(ref, list) else PIPELINES + ref, "infer": PIPELINES + cand}
    return preprocess_audit(samples, stages, n=options.pop("n", 3), workers=1, repeats=0, **options)


def _codes(result, severity: str = "gap") -> list[str]:
    return sorted(f.code for f in result.findings if f.severity.value == severity and f.subject.stage == "train→infer")


def _finding(result, code: str):
    return next(f for f in result.findings if f.code == code)


# --- 1. resize sizes as timm and torchvision compute them ----------------------------------------------------------

def test_resize_sizes_are_tried_floored_and_rounded():
    sides = shorter_sides(224)
    assert {235, 236, 248, 249, 256, 224, 232} <= set(sides)  # floor(224/.95), round(...), floor(224/.9), ...
    assert sides.index(256) < sides.index(232)  # crop ratios first, then the presets


@pytest.mark.parametrize("pct", [0.875, 0.9, 0.95, 1.0])
def test_timm_eval_transform_replays_to_its_floored_size(pipes, pct):
    path = SKIMAGE_DATA / "coffee.png"
    output = to_chw(pipes.TIMM_EVAL[pct](Image.open(path).convert("RGB")).numpy())
    profile = fit_profile(decode_rgb(path.read_bytes()), output)
    assert profile is not None, f"crop_pct {pct}: timm's transform not replayed"
    assert profile.geometry.kind == "resize_crop" and profile.geometry.shorter_side == math.floor(224 / pct)
    assert "PIL bicubic" in profile.equivalent_methods and profile.psnr_db >= 100


def test_two_timm_crop_pcts_are_a_crop_finding_naming_both_sizes(photos):
    result = _audit(photos, "timm_0950", "timm_0900", n=2)
    assert _codes(result) == ["crop"]  # same method (PIL bicubic), same normalization: only the size differs
    evidence = _finding(result, "crop").evidence
    assert "to 248," in evidence["cand_geometry"] and "to 235," in evidence["ref_geometry"]


def test_torchvision_256_against_235_is_a_crop_finding(photos):
    result = _audit(photos, "tv_235", "tv_256", n=2)
    assert _codes(result) == ["crop"]
    finding = _finding(result, "crop")
    assert "resize shorter side to 256" in finding.message and "resize shorter side to 235" in finding.message


def test_opencv_cubic_port_of_timm_is_a_resize_finding(photos):
    result = _audit(photos, "timm_0950", "cv2_cubic_235", n=2)
    assert _codes(result) == ["resize"]
    evidence = _finding(result, "resize").evidence
    assert evidence["cand_method"] == "cv2 INTER_CUBIC" and evidence["ref_method"] == "PIL bicubic"
    assert evidence["antialias_differs"] is True


def test_exif_applied_by_one_stage_is_orientation_and_the_rest_still_compared(exif_photos):
    # timm on the stored pixels vs timm after exif_transpose: the tag, nothing else
    result = _audit(exif_photos, "timm_0950", "timm_0950_exif", n=5)
    assert _codes(result) == ["orientation"]
    # both apply the tag, but resize differently: replayed on the oriented picture, named, not "unexplained"
    result = _audit(exif_photos, "timm_0950_exif", "pil_bilinear_256_exif", n=5)
    assert _codes(result) == ["crop", "resize"]
    resize = _finding(result, "resize")
    assert resize.evidence["cand_method"] == "PIL bilinear" and resize.evidence["ref_method"] == "PIL bicubic"
    assert resize.evidence["cand_psnr_with_ref_method_db"] > 30  # replayed on the picture the stage saw


# --- 2. and 3. BGR: one finding, at the decode -----------------------------------------------------------------------

def test_bgr_decode_under_timm_is_one_channel_order_finding_at_the_boundary(photos):
    result = _audit(photos, "timm_0950", "timm_0950_bgr", n=2)
    assert _codes(result) == ["channel_order"]
    finding = _finding(result, "channel_order")
    assert finding.subject.step == f"step 1: {BOUNDARY_LABEL}"  # not the Normalize's sub_ (step 14 before)
    assert finding.evidence["first_divergent_step"].endswith(f"(vs train: {BOUNDARY_LABEL})")


def test_bgr_without_replay_is_still_one_finding(photos):
    result = _audit(photos, "blurred_rgb", "blurred_bgr", n=2)
    assert _codes(result) == ["channel_order"]  # the normalization seen through the swap is not a second cause
    assert "permuting infer's channels as [2, 1, 0]" in _finding(result, "channel_order").message


def test_a_swap_composed_with_another_normalization_is_still_named():
    ref_mean, ref_std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])

    def direct_fit(cand_mean, cand_std) -> AffineFit:
        """cand = N'(swap(x)), ref = N(x): channel c of ref from channel 2 - c of cand."""
        slope = tuple(cand_std[2 - c] / ref_std[c] for c in range(3))
        offset = tuple((cand_mean[2 - c] - ref_mean[c]) / ref_std[c] for c in range(3))
        return AffineFit((2, 1, 0), slope, offset, 0.0, 0.0)

    assert same_map_after_swap(direct_fit(ref_mean, ref_std), 4.5)
    assert not same_map_after_swap(direct_fit(np.array([0.5, 0.5, 0.5]), ref_std), 4.5)
    assert not same_map_after_swap(direct_fit(ref_mean, ref_std * 2), 4.5)


def test_runtime_trace_skips_the_normalize_constants(pipes):
    path = str(SKIMAGE_DATA / "coffee.png")
    ref, cand = trace_stage(pipes.timm_0950, path), trace_stage(pipes.timm_0950_bgr, path)
    assert not any(label.startswith(("as_tensor", "__eq__", "any")) for label in ref.labels())
    found = align(ref, cand, 1.5 / 255)
    assert found is not None and found[0].label == found[1].label == BOUNDARY_LABEL


def test_callable_against_declared_steps_names_the_step_of_the_cause(photos, pipes):
    result = _audit(photos, pipes.TIMM_095_STEPS, "numpy_bilinear_235", n=2)
    assert _codes(result) == ["resize"]
    step = _finding(result, "resize").evidence["first_divergent_step"]
    assert step.startswith("step 1: the stage's output (it makes no torch call)")
    assert "(vs train: resize(" in step  # the opaque part spans decode..layout: the resize is the cause's step
    result = _audit(photos, pipes.TIMM_095_STEPS, "numpy_bgr_235", n=2)
    assert _codes(result) == ["channel_order"]
    assert "(vs train: decode(" in _finding(result, "channel_order").evidence["first_divergent_step"]


# --- 4. grayscale ------------------------------------------------------------------------------------------------------

def test_opencv_grayscale_read_of_a_jpeg_is_a_named_gap(jpegs):
    result = _audit(jpegs, "gray_pil", "gray_cv2_imread")
    assert _codes(result) == ["grayscale_conversion"] and result.verdict == "gap"
    finding = _finding(result, "grayscale_conversion")
    assert "luma (Y) plane" in finding.message and finding.evidence["cand_reading"] == "gray_jpeg_luma"
    assert finding.evidence["effect_levels"] > 2


def test_opencv_luma_rounding_is_a_warning_under_a_tight_tolerance(jpegs):
    result = _audit(jpegs, "gray_pil", "gray_cv2_cvtcolor", tolerance=0.001)
    assert _codes(result) == [] and result.verdict == "pass"
    finding = _finding(result, "grayscale_conversion")
    assert finding.severity.value == "warning" and finding.evidence["cand_reading"] == "gray_cv2_weights"
    assert finding.evidence["effect_levels"] <= 2 and "two levels or less" in finding.message


# --- 5. a stage that takes bytes ------------------------------------------------------------------------------------

def test_a_bytes_stage_given_a_path_says_what_it_was_given(photos):
    # failing on every sample, nothing was compared: a usage error naming the stage's error and the ,bytes spelling
    # (review D9: it was a stage_error gap, exit 1, under "2/2 samples audited")
    with pytest.raises(UsageError) as info:
        _audit(photos, "timm_0950", "from_bytes", n=2)
    said = str(info.value)
    assert said.startswith("nothing could be audited: no sample went through two stages to compare")
    assert "stage infer failed on 2 of 2 sample(s)" in said and "TypeError" in said
    assert "was given the sample's path (a str)" in said and f"--stage infer={PIPELINES}from_bytes,bytes" in said


def test_a_stage_failing_on_every_sample_exits_2_without_a_headline(photos, capsys):
    from gapcheck.cli.app import main

    code = main(["preprocess-audit", "--samples", str(photos), "--stage", f"train={PIPELINES}timm_0950",
                 "--stage", f"infer={PIPELINES}from_bytes", "--n", "2", "--workers", "1", "--repeats", "0",
                 "--no-progress"])
    out = capsys.readouterr()
    assert code == 2 and "samples audited" not in out.out + out.err and ",bytes" in out.err


def test_bytes_suffix_on_the_command_line(photos, capsys):
    from gapcheck.cli.app import main

    code = main(["preprocess-audit", "--samples", str(photos), "--stage", f"train={PIPELINES}timm_0950",
                 "--stage", f"infer={PIPELINES}from_bytes,bytes", "--n", "2", "--workers", "1", "--repeats", "0",
                 "--no-progress"])
    assert code == 0 and "PASS" in capsys.readouterr().out



# --- 6. the second review: batch axis, steps of a declared BGR list, a tensor resize, grayscale, squash -------------

def test_a_leading_batch_axis_of_one_is_compared_squeezed_and_said_as_info(photos):
    result = _audit(photos, "timm_0950", "timm_0950_batched", n=2)
    assert result.verdict == "pass" and _codes(result) == []  # was a shape gap, exit 1 (review D5)
    note = _finding(result, "shape")
    assert note.severity.value == "info" and "infer adds a leading batch axis of size 1" in note.message
    assert note.evidence["cand_shape"] == [1, 3, 224, 224] and note.evidence["samples"] == 2
    assert result.pairs[0].within_tolerance and result.pairs[0].max_abs == 0.0


def test_another_size_with_a_batch_axis_is_still_a_shape_gap(photos, pipes):
    steps = [{**step, "size": 200} if step["op"] == "center_crop" else step for step in pipes.TIMM_095_STEPS]
    result = _audit(photos, [*steps, {"op": "batch"}], "timm_0950", n=2)
    finding = _finding(result, "shape")
    assert finding.is_gap and "infer has 0 leading batch dimension(s), train has 1" in finding.message
    assert "infer outputs 3 channel(s) of 224x224, train 3 of 200x200" in finding.message


def test_pair_deltas_squeeze_only_a_leading_batch_axis():
    from gapcheck.preprocess.summary import summarize_output
    from gapcheck.preprocess.worker import pair_delta, unbatched

    image = np.random.default_rng(0).random((3, 8, 8), dtype=np.float32)
    same = pair_delta("a", image, summarize_output(image, 0), "b", image[None], summarize_output(image[None], 1))
    assert same.comparable and same.max_abs == 0.0
    other = image[:, :, :7].copy()  # another width stays another shape, batched or not
    assert not pair_delta("a", image, summarize_output(image, 0), "b", other[None], summarize_output(other[None], 1)).comparable
    gray = image[:1]  # a one-channel CHW image keeps its channel axis: (1, 8, 8) is not (8, 8) with a batch axis
    assert unbatched(gray).shape == (1, 8, 8)  # (compared with (8, 8) as one channel: test_singleton_channel.py)


def test_declared_steps_without_the_colour_conversion_name_it_and_hash_what_was_produced(photos):
    from gapcheck.preprocess.diagnoses.steps import first_divergent_step
    from gapcheck.preprocess.recipe import parse_steps

    tail = [{"op": "resize", "size": 235, "backend": "cv2", "interpolation": "linear"}, {"op": "center_crop", "size": 224},
            {"op": "scale", "factor": 1 / 255}, {"op": "normalize", "mean": [0.485, 0.456, 0.406],
                                                  "std": [0.229, 0.224, 0.225]}, {"op": "layout", "to": "chw"}]
    rgb = parse_steps([{"op": "decode", "backend": "cv2"}, {"op": "color", "order": "rgb"}, *tail])
    bgr = parse_steps([{"op": "decode", "backend": "cv2"}, *tail])
    data = (photos / "coffee.png").read_bytes()
    found = first_divergent_step(rgb, bgr, data, "coffee.png")
    assert found is not None and found.ref_step == "color(order=rgb)"  # was step 5 normalize (review D6a)
    assert found.step_index == 2 and found.cand_step.startswith("resize(")
    # the steps table hashes what each step produced: the BGR decode is not the RGB image (it showed the same SHA256)
    assert found.ref_steps[0].sha256 != found.ref_steps[1].sha256 and found.cand_steps[0].sha256 == found.ref_steps[0].sha256
    # a PIL decode against a cv2 decode + conversion still lines up, and a real difference after it is named there
    pil = parse_steps([{"op": "decode", "backend": "pil"}, {**tail[0], "interpolation": "cubic"}, *tail[1:]])
    later = first_divergent_step(rgb, pil, data, "coffee.png")
    assert later is not None and later.step_index == 2 and later.ref_step.startswith("resize(")


def test_a_tensor_resize_against_timm_names_the_interpolate_step(photos):
    result = _audit(photos, "timm_0950", "torch_tensor_resize", n=2)
    assert _codes(result) == ["resize"]
    step = _finding(result, "resize").subject.step
    assert step.startswith("step ") and "interpolate(" in step  # was step 1, the boundary (review D6b)


@pytest.mark.parametrize("ref, cand, methods", [
    ("gray_pil", "gray_l_cv2_linear", ("PIL bilinear", "cv2 INTER_LINEAR")),
    ("gray3_pil", "gray3_cv2_linear", ("PIL bilinear", "cv2 INTER_LINEAR")),
    ("gray_cv2_gray_linear", "gray_cv2_gray_area", ("cv2 INTER_LINEAR", "cv2 INTER_AREA")),
])
def test_grayscale_outputs_resized_two_ways_are_a_resize_finding(photos, ref, cand, methods):
    result = _audit(photos, ref, cand, n=2)
    assert _codes(result) == ["resize"]  # was unexplained (review D7): replayed on the grayscale reading now
    evidence = _finding(result, "resize").evidence
    assert (evidence["ref_method"], evidence["cand_method"]) == methods


def test_timm_squash_crop_mode_is_replayed_and_named_as_a_crop(photos, pipes):
    path = SKIMAGE_DATA / "coffee.png"
    profile = fit_profile(decode_rgb(path.read_bytes()), to_chw(pipes.timm_squash_091(str(path)).numpy()))
    assert profile is not None and profile.geometry.kind == "squash_crop" and profile.geometry.shorter_side == 246
    result = _audit(photos, "timm_0950", "timm_squash_091", n=2)
    assert _codes(result) == ["crop"]  # was unexplained (review D7b)
    assert "resize to 246x246 (aspect ratio not kept" in _finding(result, "crop").evidence["cand_geometry"]


def test_each_cause_names_its_own_step_inside_an_opaque_part(photos, pipes):
    # timm resizes in PIL before its first torch call; a declared cv2 list never converts its BGR decode and resizes
    # with INTER_LINEAR: two causes, each at its own step (both were "step 1 decode" before the review)
    steps = [{"op": "decode", "backend": "cv2"},
             {"op": "resize", "size": 235, "backend": "cv2", "interpolation": "linear"},
             *[step for step in pipes.TIMM_095_STEPS if step["op"] not in ("decode", "resize")]]
    result = preprocess_audit(photos, {"train": PIPELINES + "timm_0950", "infer": steps}, n=2, workers=1, repeats=0)
    assert _codes(result) == ["channel_order", "resize"]
    assert _finding(result, "resize").subject.step.startswith("step 2: resize(")
    assert _finding(result, "channel_order").subject.step.startswith("step 1: decode(backend=cv2)")

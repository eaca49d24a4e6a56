"""Evidence on the samples that differ, and the causes phone photos expose (issue 17 items 6-7).

Real photographs from scikit-image, written as a phone or an export tool writes them (EXIF orientation
tags with Pillow, transparency, palette PNGs, sizes where int() and round() differ), through pipelines
as users write them (tests/preprocess/evidence_pipelines.py). Each pair differs in one way; the
finding must name that way, its evidence must be a sample that differs, and clean pairs must pass.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from gapcheck.preprocess import sources
from gapcheck.preprocess.audit import preprocess_audit
from gapcheck.preprocess.diagnoses.rounding import _rounding_of
from gapcheck.preprocess.pairs import _worst_and_typical
from gapcheck.report.contract import Chart
from tests.preprocess import phone_photos

PIPELINES = str(Path(__file__).with_name("evidence_pipelines.py")) + ":"


def _audit(folder: Path, ref: str, cand: str):
    return preprocess_audit(folder, {"train": PIPELINES + ref, "infer": PIPELINES + cand}, repeats=0, workers=1)


def _pair_findings(result):
    return [f for f in result.findings if f.subject.stage == "train→infer"]


def _names(paths) -> set[str]:
    return {Path(p).name for p in paths}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    made = {}
    for name, maker in (("exif", phone_photos.exif_jpegs), ("rgba", phone_photos.rgba_pngs),
                        ("palette", phone_photos.palette_pngs), ("rounding", phone_photos.rounding_crops),
                        ("color", phone_photos.color_photos)):
        made[name] = tmp_path_factory.mktemp(name)
        maker(made[name])
    return made


def _assert_evidence_differs(result, differing: set[str]) -> None:
    """Every per-sample pair finding (all but the pooled KS test), and every picture, is about a sample that differs."""
    for finding in [f for f in _pair_findings(result) if f.code != "distribution_shift"]:
        assert Path(finding.subject.sample).name in differing, finding
        assert finding.evidence["differing_samples"] == len(differing)
    assert result.worst_samples and _names(w.sample for w in result.worst_samples) <= differing


def test_exif_orientation_applied_by_cv2_only_is_named_on_rotated_samples(folders):
    result = _audit(folders["exif"], "pil_rgb", "cv2_imread")
    tagged = {name for name, tag in phone_photos.exif_jpegs(folders["exif"]).items() if tag}
    finding = next(f for f in result.findings if f.code == "orientation")
    assert finding.evidence["applied_by"] == "infer" and finding.evidence["not_applied_by"] == "train"
    assert finding.evidence["tagged_differing_samples"] == 4 and finding.evidence["compared_samples"] == 5
    assert "4 of 5" in finding.message and "infer applies the EXIF orientation tag" in finding.message
    assert "unexplained" not in {f.code for f in result.findings}
    _assert_evidence_differs(result, tagged)
    assert result.pairs[0].note == "differs on 4 of 5 sample(s)"
    assert [w.role for w in result.worst_samples] == ["worst", "typical"]


def test_exif_orientation_applied_by_both_stages_passes(folders):
    assert _audit(folders["exif"], "pil_exif_transposed", "cv2_imread")


def test_rgba_composited_on_white_vs_convert_rgb(folders):
    result = _audit(folders["rgba"], "pil_rgb", "composite_on_white")
    finding = next(f for f in result.findings if f.code == "alpha_composite")
    assert finding.evidence["cand_reading"] == "alpha_on_white" and finding.evidence["ref_reading"] == "rgb"
    assert "infer composites transparent pixels on white" in finding.message and "drops the alpha" in finding.message
    _assert_evidence_differs(result, {"a_chelsea_rgba.png", "b_coffee_rgba.png"})


def test_palette_png_read_as_indices(folders):
    result = _audit(folders["palette"], "pil_rgb", "palette_as_indices")
    finding = next(f for f in result.findings if f.code == "palette_indices")
    assert finding.evidence["cand_reading"] == "palette_indices" and "infer reads the palette" in finding.message
    assert "unexplained" not in {f.code for f in result.findings}
    _assert_evidence_differs(result, {"a_coffee_p.png", "b_astronaut_p.png"})


def test_shorter_side_int_vs_round_differs_on_two_of_eight(folders):
    result = _audit(folders["rounding"], "pil_rgb", "rounded_resize")
    differ = set(phone_photos.rounding_crops(folders["rounding"]))
    assert len(differ) == 2
    finding = next(f for f in result.findings if f.code == "size_rounding")
    assert (finding.evidence["ref_rounding"], finding.evidence["cand_rounding"]) == ("int", "round")
    assert "2 of 8" in finding.message
    assert {f.code for f in result.findings if f.is_gap} == {"size_rounding"}
    _assert_evidence_differs(result, differ)
    assert _names(w.sample for w in result.worst_samples) == differ


def test_bgr2gray_on_an_rgb_array_is_a_channel_order_mistake(folders):
    result = _audit(folders["color"], "gray_rgb", "gray_bgr_on_rgb")
    finding = next(f for f in result.findings if f.code == "channel_order")
    assert finding.evidence["conversion"] == "grayscale" and finding.evidence["swapped_weights_in"] == "infer"
    assert "COLOR_BGR2GRAY" in finding.message
    assert "unexplained" not in {f.code for f in result.findings}


def test_interpolate_without_antialias_names_antialiasing(folders):
    result = _audit(folders["color"], "pil_direct_resize", "torch_resize_no_antialias")
    finding = next(f for f in result.findings if f.code == "resize")
    assert finding.evidence["antialias_differs"] is True and finding.evidence["cand_antialias"] is False
    assert finding.message.startswith("antialiasing differs: infer does not low-pass filter")


def test_clean_pairs_pass_on_every_phone_style_file(folders, tmp_path):
    """The same reading written two ways, and cv2 done right in gray: no false alarm on any of these files."""
    for name, folder in folders.items():
        for path in folder.iterdir():
            shutil.copy(path, tmp_path / f"{name}_{path.name}")
    result = _audit(tmp_path, "pil_rgb", "pil_rgb_twice")
    assert result and not [f for f in _pair_findings(result) if f.is_gap]
    assert _audit(folders["color"], "gray_rgb", "gray_rgb_cv2")


def test_html_shows_each_evidence_sample_side_by_side(folders):
    result = _audit(folders["exif"], "pil_rgb", "cv2_imread")
    charts = [v for v in result.views() if isinstance(v, Chart) and v.kind == "images"]
    assert [c.title.split(",")[1].split(":")[0].strip() for c in charts] == ["worst of 4 differing sample(s) (of 5)",
                                                                "typical of 4 differing sample(s) (of 5)"]
    for chart in charts:
        captions = [caption for caption, _ in chart.images]
        assert captions[0].startswith("raw file") and captions[1] == "train (reference)" and captions[2] == "infer"
        assert captions[3].startswith("|Δ| per pixel") and "de-normalized" in chart.note
    # De-normalized: the reference picture is the photo's own pixels (resized and cropped), not a min-max stretch.
    worst = result.worst_samples[0]
    from tests.preprocess import evidence_pipelines as pipes

    shown = pipes.pil_rgb(worst.sample).numpy().transpose(1, 2, 0) * pipes.STD + pipes.MEAN
    assert np.abs(worst.ref_image - shown).max() < 1e-3 and worst.raw_image is not None


def test_worst_first_then_the_median_of_the_rest():
    assert _worst_and_typical(["w", "a", "b", "c", "d"]) == ["w", "b"]
    assert _worst_and_typical(["w", "a"]) == ["w", "a"]
    assert _worst_and_typical(["w"]) == ["w"]


def test_readings_of_a_file_list_only_what_applies(folders):
    exif = (folders["exif"] / "a_astronaut.jpg").read_bytes()
    assert list(sources.sources(exif, 3, 10**8)) == ["rgb", "exif_oriented"]
    plain = (folders["exif"] / "e_motorcycle.jpg").read_bytes()
    assert list(sources.sources(plain, 3, 10**8)) == ["rgb"]
    # one channel: PIL's and OpenCV's luma of the RGB decode, a JPEG's own luma plane, BGR weights
    assert list(sources.sources(plain, 1, 10**8)) == ["gray_rgb_weights", "gray_cv2_weights", "gray_jpeg_luma",
                                                       "gray_bgr_weights"]
    png = sources.sources((folders["palette"] / "a_coffee_p.png").read_bytes(), 1, 10**8)
    assert "gray_jpeg_luma" not in png  # a PNG has no luma plane of its own
    readings = sources.sources((folders["palette"] / "a_coffee_p.png").read_bytes(), 3, 10**8)
    assert list(readings) == ["rgb", "palette_indices"] and readings["palette_indices"].max() <= 255
    rgba = sources.sources((folders["rgba"] / "a_chelsea_rgba.png").read_bytes(), 3, 10**8)
    assert np.array_equal(rgba["alpha_on_white"][0, 0], [255, 255, 255])  # a transparent corner
    assert sources.file_facts(b"not an image") is None


def test_rounding_is_read_from_the_shapes():
    assert _rounding_of((300, 451), (256, 384)) == "int" and _rounding_of((300, 451), (256, 385)) == "round"
    assert _rounding_of((300, 450), (256, 384)) is None  # 384.0: both give the same size


def test_fit_does_not_depend_on_memory_layout(folders):
    """The same output as a contiguous CHW array and as an HWC array seen as CHW (what the serial engine keeps) replays
    to the same bits: the engines' reports must not depend on which one a diagnosis got (issue 23 item 16)."""
    from gapcheck.preprocess.layout import to_chw
    from gapcheck.preprocess.replay import fit_profile
    from gapcheck.preprocess.samples import decode_rgb
    from tests.preprocess import evidence_pipelines as pipes

    path = folders["color"] / "chelsea.png"
    chw = pipes.rounded_resize(str(path)).numpy()
    strided = np.ascontiguousarray(chw.transpose(1, 2, 0)).transpose(2, 0, 1)
    raw = decode_rgb(path.read_bytes())
    assert fit_profile(raw, to_chw(chw)) == fit_profile(raw, to_chw(strided))


def test_a_stage_identical_to_an_earlier_one_is_summarized_once(folders, monkeypatch):
    """train and val without augmentation agree bit for bit: val's summary, KS values and deltas are train's, not
    computed again (issue 23 item 15: the audit's own per-sample cost is mostly hashing and statistics)."""
    from gapcheck.preprocess import worker
    from gapcheck.preprocess.stages import make_spec
    from tests.preprocess import evidence_pipelines as pipes

    calls = []
    real = worker.summarize_output
    monkeypatch.setattr(worker, "summarize_output", lambda *a, **k: calls.append(1) or real(*a, **k))
    stages = [(make_spec(name, function=fn), fn) for name, fn in
              (("train", pipes.pil_rgb), ("val", pipes.pil_rgb_twice), ("infer", pipes.rounded_resize))]
    item = worker.WorkItem(0, str(folders["rounding"] / sorted(phone_photos.rounding_crops(folders["rounding"]))[0]),
                           False, True)
    record = worker.process_sample(stages, item, worker.WorkerOptions(10**8, 1, 16))
    assert len(calls) == 2  # train and infer; val is train's twin
    train, val, infer = record.stages
    assert val.stage == "val" and val.stats == train.stats and np.array_equal(val.ks_values, train.ks_values)
    assert val.repeat_fingerprints and val.repeat_fingerprints[0] == val.stats.sha256  # its own probe still runs
    deltas = {(d.a, d.b): d for d in record.deltas}
    assert deltas[("train", "val")].max_abs == 0.0 and deltas[("train", "infer")].max_abs > 0
    direct = worker.pair_delta("val", val.array if val.array is not None else pipes.pil_rgb_twice(item.path).numpy(),
                               val.stats, "infer", pipes.rounded_resize(item.path).numpy(), infer.stats)
    assert (deltas[("val", "infer")].max_abs, deltas[("val", "infer")].psnr_db) == (direct.max_abs, direct.psnr_db)

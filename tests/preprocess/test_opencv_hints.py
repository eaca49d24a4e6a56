"""OpenCV stages given the wrong kind of argument: cv2.imread handed the file's bytes returns None, cv2.imdecode handed
bytes (not a uint8 array) or cv2.cvtColor handed the path raise "Expected Ptr<cv::UMat>" / "Expected 'filename'". The
stage error says what the stage was given and how to declare its input kind, on one line. Real scikit-image photos;
the stages are tests/preprocess/opencv_stages.py, loaded by path as a user's file is."""
from __future__ import annotations

import shutil
from pathlib import Path

import cv2
import pytest

from gapcheck.errors import InputError, UsageError
from gapcheck.preprocess.audit import preprocess_audit
from gapcheck.preprocess.stages import make_spec
from gapcheck.preprocess.worker import RETURNED_NONE, _stage_error_text
from tests.preprocess.conftest import SKIMAGE_DATA

STAGES = str(Path(__file__).with_name("opencv_stages.py")) + ":"
DECODE = "cv2.imdecode(np.frombuffer(data, np.uint8), flags)"


@pytest.fixture(scope="module")
def photos2(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("opencv_photos")
    for name in ("camera.png", "coffee.png"):
        shutil.copy(SKIMAGE_DATA / name, folder / name)
    return folder


def _failure(samples: Path, cand: str) -> str:
    """The usage error of an audit whose candidate fails on every sample."""
    target, _, accepts = cand.partition(",")
    stages = [make_spec("train", target=STAGES + "gray_hw"),
              make_spec("infer", target=STAGES + target, accepts=accepts or "path")]
    with pytest.raises(UsageError) as info:
        preprocess_audit(samples, stages, n=2, workers=1, repeats=0)
    said = str(info.value)
    assert said.startswith("nothing could be audited") and "stage infer failed on 2 of 2 sample(s)" in said
    assert "\n" not in said  # OpenCV's messages span lines; the stage error is one
    return said


def test_imread_given_bytes_names_the_declaration_after_an_empty_image_assertion(photos2):
    said = _failure(photos2, "imread_then_gray,bytes")  # was only "(-215:Assertion failed) !_src.empty() ..."
    assert "cv2.error: OpenCV(" in said and "!_src.empty()" in said
    assert "stage infer was given the file's bytes" in said and "an OpenCV call got an empty image" in said
    assert f"--stage infer={STAGES}imread_then_gray (without ,bytes)" in said and DECODE in said


def test_a_stage_returning_none_says_so_and_what_it_was_given(photos2):
    said = _failure(photos2, "imread_only,bytes")  # was "stage returned ndarray of dtype object"
    assert "TypeError: stage returned None, not an array" in said and "it returned None" in said
    assert "cv2.imread takes a path (it returns None for bytes)" in said and "(without ,bytes)" in said


def test_bytes_handed_to_imdecode_unwrapped_name_np_frombuffer(photos2):
    said = _failure(photos2, "imdecode_unwrapped,bytes")
    assert "Expected Ptr<cv::UMat> for argument 'buf'" in said and " :-1: " not in said
    assert "an OpenCV call wanted a numpy array: decode the bytes with " + DECODE in said


def test_a_path_handed_to_cvtcolor_names_imread_and_the_bytes_declaration(photos2):
    said = _failure(photos2, "gray_of")
    assert "stage infer was given the sample's path (a str) and an OpenCV call wanted a numpy array" in said
    assert "cv2.imread(path)" in said and f"--stage infer={STAGES}gray_of,bytes" in said


def test_the_cli_exits_2_with_the_hint_on_one_line(photos2, capsys):
    from gapcheck.cli.app import main

    code = main(["preprocess-audit", "--samples", str(photos2), "--stage", f"train={STAGES}gray_hw",
                 "--stage", f"infer={STAGES}imread_then_gray,bytes", "--n", "2", "--workers", "1", "--repeats", "0",
                 "--no-progress"])
    err = capsys.readouterr().err
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and "an OpenCV call got an empty image" in line and "(without ,bytes)" in line
    assert "hint:" not in err  # the stage's error already says what it was given; no second, generic hint


@pytest.mark.parametrize("accepts, exc, expected", [
    # no stage code to read: what it was given and the usual causes of None, no declaration advised
    ("path", TypeError(RETURNED_NONE), "was given the sample's path (a str) and it returned None: a function without"),
    # OpenCV 4.1-4.4 raised its argument errors as TypeError
    ("path", TypeError("Expected Ptr<cv::UMat> for argument 'src'"), "an OpenCV call wanted a numpy array"),
    ("bytes", cv2.error("OpenCV(4.5.5) :-1: error: (-5:Bad argument) in function 'imread'\n> Overload resolution "
                        "failed:\n>  - Can't convert object of type 'bytes' to 'str' for 'filename'\n"),
     "was given the file's bytes (a bytes object: it is declared ,bytes / accepts = \"bytes\") and an OpenCV call "
     "wanted a file name"),
])
def test_opencv_wrong_argument_messages_get_the_hint(accepts, exc, expected):
    said = _stage_error_text(make_spec("infer", target="st.py:pre", accepts=accepts), exc)
    assert expected in said and "\n" not in said


@pytest.mark.parametrize("exc", [
    cv2.error("OpenCV(5.1.0) :-1: error: (-5:Bad argument) in function 'resize'\n> Overload resolution failed:\n"
              ">  - Can't parse 'dsize'. Input argument doesn't provide sequence protocol\n"),  # a wrong size
    cv2.error("OpenCV(5.1.0) color.cpp:199: error: (-2:Unspecified error) Invalid number of channels in input image"),
    ValueError("Expected Ptr<cv::UMat> for argument 'src'"),  # not OpenCV's exception
])
def test_other_opencv_errors_get_no_hint(exc):
    assert "was given" not in _stage_error_text(make_spec("infer", target="st.py:pre", accepts="path"), exc)


def test_control_characters_in_a_stage_error_are_neutralised():
    said = _stage_error_text(make_spec("infer", target="st.py:pre"), ValueError("bad\x1b[2J\r\nPASS all good\x07"))
    assert said == "ValueError: bad\\x1b[2J PASS all good\\x07"


@pytest.fixture(scope="module")
def grayscale_only(tmp_path_factory) -> Path:
    """A folder of grayscale photos only, as scikit-image ships them (PNG mode L): valid inputs, unusual ones."""
    folder = tmp_path_factory.mktemp("grayscale_only")
    for name in ("camera.png", "coins.png", "moon.png", "page.png"):
        shutil.copy(SKIMAGE_DATA / name, folder / name)
    return folder


def test_a_stage_failing_on_grayscale_photos_only_says_its_error_and_hint(grayscale_only, capsys):
    from gapcheck.cli.app import main

    code = main(["preprocess-audit", "--samples", str(grayscale_only), "--stage", f"train={STAGES}gray_hw",
                 "--stage", f"infer={STAGES}imread_then_gray,bytes", "--n", "4", "--workers", "1", "--repeats", "0",
                 "--no-progress"])
    err = capsys.readouterr().err
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and "bad input" not in line  # was "... which are all bad inputs; first: camera.png (PNG mode L)"
    assert "stage infer failed on 4 of 4 sample(s), first on " in line and "!_src.empty()" in line
    assert "stage infer was given the file's bytes" in line and "(without ,bytes)" in line and DECODE in line


def test_corrupt_files_only_are_still_bad_inputs(tmp_path):
    for name in ("camera.png", "coins.png"):  # headers intact, pixel data cut short: stages fail, full decode fails
        data = (SKIMAGE_DATA / name).read_bytes()
        (tmp_path / name).write_bytes(data[: len(data) // 3])
    stages = [make_spec("train", target=STAGES + "gray_hw"),
              make_spec("infer", target=STAGES + "imread_then_gray", accepts="bytes")]
    with pytest.raises(InputError) as info:
        preprocess_audit(tmp_path, stages, n=2, workers=1, repeats=0)
    assert info.value.message == "none of the 2 sample(s) could be audited"
    assert info.value.hint is not None and "camera.png: corrupt_image" in info.value.hint


NEUTRAL = "an OpenCV call got an empty image: a crop or ROI outside the image, or a read that returned None"


@pytest.mark.parametrize("cand, given", [
    ("imread_bad_crop", "was given the sample's path (a str)"),  # was told to declare ,bytes
    ("imdecode_bad_crop,bytes", "was given the file's bytes (a bytes object: it is declared ,bytes / accepts = \"bytes\")"),
    # ^ was told that cv2.imread takes a path and to drop ,bytes
    ("fromfile_bad_crop", "was given the sample's path (a str)"),  # imdecode named, but nothing it gave is None
])
def test_an_empty_crop_gets_the_neutral_hint_not_the_declaration(photos2, cand, given):
    said = _failure(photos2, cand)
    assert "!_src.empty()" in said and f"stage infer {given} and {NEUTRAL}" in said
    assert ",bytes," not in said and "without ,bytes" not in said and "cv2.imdecode returns None" not in said
    assert "cv2.imread takes a path" not in said


def test_a_path_decoded_as_bytes_keeps_the_bytes_declaration(photos2):
    said = _failure(photos2, "imdecode_of_path")  # imdecode named and it returned None: the input kind
    assert "an OpenCV call got an empty image (None from cv2.imread / cv2.imdecode)" in said
    assert f"--stage infer={STAGES}imdecode_of_path,bytes" in said


def test_the_cli_gives_no_bytes_hint_for_an_empty_crop(photos2, capsys):
    from gapcheck.cli.app import main

    code = main(["preprocess-audit", "--samples", str(photos2), "--stage", f"train={STAGES}gray_hw",
                 "--stage", f"infer={STAGES}imread_bad_crop", "--n", "2", "--workers", "2", "--repeats", "0",
                 "--no-progress"])
    err = capsys.readouterr().err
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and NEUTRAL in line and "bytes" not in line
    assert "hint:" not in err  # the generic 'declare ,bytes' hint neither


@pytest.mark.parametrize("cand, expected", [
    ("imread_no_return", "was given the sample's path (a str) and it returned None: a function without a return "
                         "statement returns None, and cv2.imread / cv2.imdecode return None for what they cannot open"),
    ("imread_via_helper,bytes", "and it returned None: cv2.imread takes a path (it returns None for bytes)"),
    ("imdecode_of_path_returned", "and it returned None: cv2.imdecode returns None unless given the file's bytes"),
])
def test_a_none_gets_the_declaration_only_when_the_stage_reads_the_other_kind(photos2, cand, expected):
    said = _failure(photos2, cand)
    assert "TypeError: stage returned None, not an array" in said and expected in said
    declared = ",bytes," in said or "(without ,bytes)" in said
    assert declared == (cand != "imread_no_return"), said  # was told to declare ,bytes for a missing return

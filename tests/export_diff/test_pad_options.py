"""export-diff --pad-check: the --pad-* flags and the token/mask inputs are refused (exit 2) when unusable."""
from __future__ import annotations

import numpy as np
import pytest

from gapcheck.cli.export_diff import parse_pad_check
from gapcheck.errors import UsageError
from gapcheck.export_diff.pad_run import token_and_mask

T = 32
SPECS = ("ids:1x32:int64:1,100", "mask:1x32:int64:1,2")


def _sample():
    rng = np.random.default_rng(0)
    return {"ids": rng.integers(1, 100, (1, T)), "mask": np.ones((1, T), dtype=np.int64)}


@pytest.mark.parametrize("inputs", ["ids,ids", ",mask", "ids,", ",", "a,b,c", " "])
def test_pad_inputs_need_two_different_non_empty_names(inputs):
    with pytest.raises(UsageError, match="pad-inputs"):
        parse_pad_check(True, "right", None, inputs)


def test_pad_lengths_are_deduplicated_and_sorted():
    request = parse_pad_check(True, "right", "64,32,64", "ids,mask")
    assert request.lengths == (32, 64)
    assert (request.token_input, request.mask_input) == ("ids", "mask")
    with pytest.raises(UsageError, match="pad-lengths"):
        parse_pad_check(True, "right", ",", None)


@pytest.mark.parametrize("token,mask,match", [
    ("mask", "ids", "looks like a mask"),
    ("mask", None, "looks like a mask"),  # the mask found by name would be the token itself
    ("ids", "ids", "both 'ids'"),
    ("nope", None, "not a model input"),
    ("ids", "nope", "not a model input"),
])
def test_unusable_token_or_mask_inputs_are_refused(token, mask, match):
    with pytest.raises(UsageError, match=match):
        token_and_mask(_sample(), token, mask, SPECS)


def test_a_mask_like_token_is_found_from_the_values_without_a_declared_range():
    with pytest.raises(UsageError, match="looks like a mask"):
        token_and_mask(_sample(), "mask", "ids")
    assert token_and_mask(_sample(), None, None, SPECS) == ("ids", "mask")


def test_a_float_token_input_is_refused():
    sample = {"x": np.zeros((1, 8), dtype=np.float32)}
    with pytest.raises(UsageError, match="must be an integer sequence input"):
        token_and_mask(sample, "x", None)


def _cli(*extra: str) -> int:
    from gapcheck.cli.app import main

    return main(["export-diff", "--model", "sample_models.padding:build_clean", "--input", SPECS[0], "--input",
                 SPECS[1], "--exporter", "torchscript", "--pad-check", "--no-progress", "--no-cache", *extra])


def test_cli_refusals_exit_2_with_one_line(capsys):
    assert _cli("--pad-lengths", "1") == 2
    assert "at least" in capsys.readouterr().err
    assert _cli("--pad-lengths", "65536") == 2
    assert "longer than 128" in capsys.readouterr().err
    assert _cli("--pad-inputs", "mask,ids") == 2
    err = capsys.readouterr().err
    assert "looks like a mask" in err and "Traceback" not in err


def test_cli_non_integer_token_input_exits_2_not_3(capsys):
    from gapcheck.cli.app import main

    code = main(["export-diff", "--model", "sample_models.planted:build_branch", "--input", "x:1x8:float32",
                 "--pad-check", "--pad-inputs", "x", "--no-progress", "--no-cache"])
    assert code == 2
    assert "must be an integer sequence input" in capsys.readouterr().err


def test_cli_duplicate_lengths_run_once_and_too_short_ones_are_stated(tmp_path):
    import json

    from gapcheck.report.envelope import validate

    junit, report = tmp_path / "r.xml", tmp_path / "r.json"
    assert _cli("--pad-lengths", "1,32,32", "--junit", str(junit), "--json", str(report)) == 0
    assert junit.read_text().count('name="torch:pad right to 32"') == 1
    doc = json.loads(report.read_text())
    validate(doc)
    assert [v["length"] for v in doc["padding"]["variants"] if v["backend"] == "torch"] == [32]
    dropped = [f for f in doc["findings"] if f["code"] == "padding_not_checked" and "dropped_lengths" in f["evidence"]]
    assert dropped and dropped[0]["severity"] == "info" and dropped[0]["evidence"]["dropped_lengths"] == [1]

"""``--text-samples FILE[:field] --tokenizer hf:PATH`` (the InputSource group): export-diff feeds a text model real
sentences tokenized by the given stage — the JSON's input SHA256 is the fingerprint of the tokenizer's own ids."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gapcheck.cli.app import main
from gapcheck.errors import ExitCode, InputError, UsageError
from gapcheck.groups import InputSource
from gapcheck.tensors import fingerprint
from tests.text.conftest import ORDINARY

L = 24
SPECS = (f"input_ids:1x{L}:int64", f"attention_mask:1x{L}:int64", f"token_type_ids:1x{L}:int64")


def _jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return path


def _expected(minilm: Path, text: str) -> dict[str, np.ndarray]:
    """What the tokenizer itself gives, padded to L: the reference the fed samples must equal."""
    from transformers import AutoTokenizer

    out = AutoTokenizer.from_pretrained(str(minilm))(text, padding="max_length", max_length=L, truncation=True)
    return {k: np.asarray([out[k]], np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}


def test_samples_are_the_tokenized_sentences(tmp_path: Path, minilm: Path):
    path = tmp_path / "texts.txt"
    path.write_bytes(b"caf\xe9 is not UTF-8\n" + "\n".join(ORDINARY[:3]).encode() + b"\n")
    group = InputSource(specs=SPECS, text_samples=str(path), tokenizer=f"hf:{minilm}", num_samples=2)
    samples = group.samples()
    assert len(samples) == 2  # the bad line is skipped, as the text audit skips it
    for sample, text in zip(samples, ORDINARY, strict=False):
        expected = _expected(minilm, text)
        assert set(sample) == set(expected)
        for name in expected:
            np.testing.assert_array_equal(sample[name], expected[name])
    assert samples[0]["input_ids"][0, 0] == 101 and 102 in samples[0]["input_ids"][0]  # [CLS] ... [SEP]


def test_spec_order_maps_other_names_and_left_padding(tmp_path: Path, minilm: Path):
    path = _jsonl(tmp_path / "texts.jsonl", ORDINARY[:1])
    group = InputSource(specs=(f"ids:1x{L}:int32", f"mask:1x{L}:int32"), text_samples=f"{path}:text",
                        tokenizer=f"hf:{minilm},padding_side=left")
    (sample,) = group.samples()
    expected = _expected(minilm, ORDINARY[0])
    n = int(expected["attention_mask"].sum())
    assert sample["ids"].dtype == np.int32
    np.testing.assert_array_equal(sample["ids"][0, L - n:], expected["input_ids"][0, :n])
    assert sample["mask"][0].tolist() == [0] * (L - n) + [1] * n


@pytest.mark.parametrize("values, message", [
    (dict(text_samples="missing.jsonl:text", tokenizer="hf:x"), "no such file"),
    (dict(text_samples="TEXTS"), "needs --tokenizer"),
    (dict(tokenizer="hf:TOK"), "give the sentences"),
    (dict(text_samples="TEXTS", tokenizer="hf:TOK", specs=("x:1x8:float32",)), "integers"),
    (dict(text_samples="TEXTS", tokenizer="hf:TOK,max_length=abc", specs=SPECS), "max_length"),
])
def test_validated_up_front(tmp_path: Path, minilm: Path, values: dict, message: str):
    texts = _jsonl(tmp_path / "texts.jsonl", ORDINARY)
    values = {k: (v.replace("TEXTS", f"{texts}:text").replace("TOK", str(minilm)) if isinstance(v, str) else v)
              for k, v in values.items()}
    with pytest.raises((UsageError, InputError), match=message) as caught:
        InputSource(**values)
    assert caught.value.exit_code == ExitCode.USAGE


def test_export_diff_feeds_the_tokenized_sentences(tmp_path: Path, minilm: Path):
    texts = _jsonl(tmp_path / "texts.jsonl", ORDINARY)
    report = tmp_path / "report.json"
    args = ["export-diff", "--model", "tests.text.text_models:build_bert", *(a for s in SPECS for a in ("--input", s)),
            "--text-samples", f"{texts}:text", "--tokenizer", f"hf:{minilm},max_length={L},padding=max_length",
            "--num-samples", "2", "--json", str(report), "--no-progress"]
    code = main(args)
    document = json.loads(report.read_text())
    assert code == 0, document["headline"]
    fed = {(row["sample"], row["name"]): row["sha256"] for row in document["inputs"]}
    for k in range(2):
        for name, array in _expected(minilm, ORDINARY[k]).items():
            assert set(fed[(k, name)].values()) == {fingerprint(array)}, (k, name)


def test_export_diff_usage_errors_exit_2(tmp_path: Path, minilm: Path):
    base = ["export-diff", "--model", "tests.text.text_models:build_bert", "--no-progress"]
    assert main([*base, "--input", "input_ids:1x8:int64", "--text-samples", str(tmp_path / "none.txt"),
                 "--tokenizer", f"hf:{minilm}"]) == 2
    texts = _jsonl(tmp_path / "texts.jsonl", ORDINARY)
    assert main([*base, "--input", "input_ids:1x8:int64", "--text-samples", f"{texts}:text"]) == 2
    assert main([*base, "--input", "input_ids:1x8:float32", "--text-samples", f"{texts}:text",
                 "--tokenizer", f"hf:{minilm}"]) == 2


def test_a_callable_tokenizer_without_mask_gets_ones_then_zeros(tmp_path: Path):
    path = tmp_path / "texts.txt"
    path.write_text("abc\nlonger than eight characters\n", encoding="utf-8")
    group = InputSource(specs=("input_ids:2x8:int64", "attention_mask:2x8:int64"), text_samples=str(path),
                        tokenizer="tests.text.text_models:char_ids", num_samples=5)
    (sample,) = group.samples()  # one 2x8 sample: both lines; no third and fourth line for a second one
    assert sample["input_ids"].tolist() == [[ord(c) % 97 + 1 for c in "abc"] + [0] * 5,
                                            [ord(c) % 97 + 1 for c in "longer t"]]
    assert sample["attention_mask"].tolist() == [[1, 1, 1, 0, 0, 0, 0, 0], [1] * 8]


def test_golden_record_says_its_samples_are_tokenized_text(tmp_path: Path, minilm: Path):
    """The bundle's manifest names the text source and tokenizer (it said "random" before)."""
    texts = _jsonl(tmp_path / "texts.jsonl", ORDINARY)
    out = tmp_path / "bundle"
    code = main(["golden", "record", "--model", "tests.text.text_models:build_bert",
                 *(a for s in SPECS for a in ("--input", s)), "--text-samples", f"{texts}:text",
                 "--tokenizer", f"hf:{minilm},max_length={L},padding=max_length", "--num-samples", "2",
                 "--out", str(out)])
    assert code == 0
    samples = json.loads((out / "manifest.json").read_text())["samples"]
    assert samples["source"] == "text" and samples["text_samples"] == "texts.jsonl:text"
    assert samples["tokenizer"].startswith("hf:") and samples["count"] == 2

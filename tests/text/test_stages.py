"""Stages as callables (module:fn, file.py:fn, Python functions) returning lists, tensors or BatchEncodings; stage
errors; nondeterminism (a real BPE with dropout left on); recipe parsing; fingerprints equal tensors.fingerprint."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from gapcheck.errors import UsageError
from gapcheck.tensors import fingerprint
from gapcheck.text import audit_text
from gapcheck.text.shard import list_fingerprint
from gapcheck.text.stages import parse_stage
from tests.text.conftest import ORDINARY

STAGE_FILE = '''
import torch
from transformers import AutoTokenizer

TOKENIZER = AutoTokenizer.from_pretrained({folder!r})


def as_tensor(text):
    return torch.tensor([TOKENIZER(text)["input_ids"]])  # a batch of one


def as_encoding(text):
    return TOKENIZER(text)


def as_list(text):
    return TOKENIZER(text)["input_ids"]


def broken(text):
    if "?" in text:
        raise ValueError("no questions")
    return "not ids" if "$" in text else TOKENIZER(text)["input_ids"]
'''


@pytest.fixture()
def stage_file(tmp_path: Path, minilm: Path) -> Path:
    path = tmp_path / "serving_tok.py"
    path.write_text(STAGE_FILE.format(folder=str(minilm)), encoding="utf-8")
    return path


def test_file_callables_returning_tensor_encoding_list_equal_the_recipe(stage_file: Path, minilm: Path):
    stages = {"train": f"hf:{minilm}", "tensor": f"{stage_file}:as_tensor", "encoding": f"{stage_file}:as_encoding",
              "list": f"{stage_file}:as_list"}
    result = audit_text(ORDINARY, stages)
    assert result, [f.message for f in result.findings]
    assert all(p.differing == 0 and p.compared == len(ORDINARY) for p in result.pairs)


def test_stage_errors_are_findings_and_the_rest_is_audited(stage_file: Path, minilm: Path):
    result = audit_text(ORDINARY, {"train": f"hf:{minilm}", "serve": f"{stage_file}:broken"})
    errors = [f for f in result.findings if f.code == "text_stage_error"]
    assert len(errors) == 1 and errors[0].evidence["failed_samples"] == 2  # "?" raises, "$" returns a str
    assert result.pairs[0].compared == len(ORDINARY) - 2 and result.pairs[0].differing == 0


def test_subword_dropout_left_on_is_nondeterministic():
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(ORDINARY * 20, trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"]))
    serving = Tokenizer.from_str(tokenizer.to_str())
    serving.model.dropout = 0.5  # BPE dropout (subword regularization) left on at serving
    random.seed(0)
    result = audit_text(ORDINARY, {"train": lambda t: tokenizer.encode(t).ids,
                                   "serve": lambda t: serving.encode(t).ids}, repeats=3)
    flagged = {f.subject.stage for f in result.findings if f.code == "text_nondeterministic"}
    assert flagged == {"serve"}
    assert [s.deterministic for s in result.stages] == [True, False]


@pytest.mark.parametrize("option, message", [
    ("serve", "NAME=TARGET"), ("serve=hf:", "tokenizer folder"), ("serve=hf:./x,max_length=abc", "integer"),
    ("serve=hf:./x,padding=longest", "batch"), ("serve=hf:./x,padding=max_length", "needs max_length"),
    ("serve=hf:./x,bogus=1", "unknown hf: setting"), ("serve=nocolon", "module:fn"), ("bad name!=hf:./x", "stage name"),
])
def test_stage_options_are_checked(option: str, message: str):
    with pytest.raises(UsageError, match=message):
        parse_stage(option)


def test_missing_tokenizer_folder_is_a_usage_error(tmp_path: Path):
    with pytest.raises(UsageError, match="not a tokenizer folder"):
        audit_text(ORDINARY, {"a": f"hf:{tmp_path / 'nope'}", "b": f"hf:{tmp_path / 'nope'}"})


def test_list_fingerprint_is_tensors_fingerprint():
    rng = np.random.default_rng(0)
    for values in ([], [0], [101, 7592, 102], rng.integers(-2**40, 2**40, 300).tolist()):
        assert list_fingerprint(values) == fingerprint(np.asarray(values, np.int64))


@pytest.fixture(scope="module")
def byte_bpe():
    """A byte-level BPE (GPT-2's pre-tokenizer: whitespace and every code point matter), trained by tokenizers."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(ORDINARY * 20, trainer)
    return tokenizer


def _codes(result) -> set[str]:
    return {f.code for f in result.findings if f.is_gap}


def test_nfkc_before_serving_is_unicode_normalization(byte_bpe):
    import unicodedata

    texts = [*ORDINARY, "The ﬁnal ﬁgure", "Ｗｉｄｅ letters"]
    result = audit_text(texts, {"train": lambda t: byte_bpe.encode(t).ids,
                                "serve": lambda t: byte_bpe.encode(unicodedata.normalize("NFKC", t)).ids})
    assert _codes(result) == {"unicode_normalization"}
    assert result.pairs[0].differing == 2


def test_whitespace_and_zero_width_cleaning_is_whitespace_control(byte_bpe):
    texts = [*ORDINARY, "two  spaces   here ", "zero\u200bwidth\u200bjoin"]

    def serve(text: str) -> list[int]:
        return byte_bpe.encode(" ".join(text.replace("\u200b", "").split())).ids

    result = audit_text(texts, {"train": lambda t: byte_bpe.encode(t).ids, "serve": serve})
    assert _codes(result) == {"whitespace_control"}
    details = {d.detail for d in result.divergences}
    assert any("whitespace" in d for d in details) and any("zero-width" in d for d in details)


def test_a_dropped_word_is_unexplained_not_guessed(byte_bpe):
    texts = ["keep every word here", "drop the last word here"]
    result = audit_text(texts, {"train": lambda t: byte_bpe.encode(t).ids,
                                "serve": lambda t: byte_bpe.encode(t.replace(" here", "") if "drop" in t else t).ids})
    assert _codes(result) == {"text_unexplained"}


def test_a_callable_that_caps_the_length_is_truncation(byte_bpe):
    long_text = " ".join(ORDINARY)
    result = audit_text([long_text, *ORDINARY[:3]], {"train": lambda t: byte_bpe.encode(t).ids,
                                                     "serve": lambda t: byte_bpe.encode(t).ids[:16]})
    assert _codes(result) == {"truncation"}

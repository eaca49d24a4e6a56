"""Real MiniLM tokenizer files: slow and fast agree on ordinary text; each planted mismatch is named right."""
from __future__ import annotations

from pathlib import Path

from gapcheck.text import audit_text
from tests.text.conftest import ORDINARY

LONG = " ".join(ORDINARY * 12)  # ~ 600 tokens: over 128 and 512


def codes(result, severity="gap"):
    return {f.code for f in result.findings if f.severity.value == severity}


def test_slow_and_fast_agree_on_ordinary_text(minilm: Path):
    result = audit_text(ORDINARY, {"train": f"hf:{minilm},fast", "serve": f"hf:{minilm},slow"})
    assert result, [f.message for f in result.findings]
    assert result.pairs[0].compared == len(ORDINARY) and result.pairs[0].differing == 0
    assert [s.backend for s in result.stages] == ["fast", "slow"]
    assert result.stages[0].vocab_sha256 == result.stages[1].vocab_sha256  # the same files hash the same


def test_lowercasing_mismatch_is_text_normalization(minilm: Path):
    texts = [*ORDINARY, "Hello World From Paris"]
    result = audit_text(texts, {"train": f"hf:{minilm}", "serve": f"hf:{minilm},do_lower_case=false"})
    assert codes(result) == {"text_normalization"}
    finding = next(f for f in result.findings if f.code == "text_normalization")
    assert "lowercase" in finding.message and finding.subject.stage == "train→serve"
    first = result.divergences[0]
    assert first.cause == "text_normalization" and first.span is not None  # fast offsets give the characters
    assert first.ref_token != first.cand_token


def test_missing_cls_sep_is_special_tokens(minilm: Path):
    result = audit_text(ORDINARY, {"train": f"hf:{minilm}", "serve": f"hf:{minilm},add_special_tokens=false"})
    assert codes(result) == {"special_tokens"}
    finding = next(f for f in result.findings if f.code == "special_tokens")
    assert "[CLS]" in finding.message and "[SEP]" in finding.message
    assert result.divergences[0].position == 0 and result.divergences[0].ref_token == "[CLS]"


def test_truncation_512_vs_128(minilm: Path):
    result = audit_text([LONG, *ORDINARY], {"train": f"hf:{minilm},max_length=512",
                                            "serve": f"hf:{minilm},max_length=128"})
    assert codes(result) == {"truncation"}
    finding = next(f for f in result.findings if f.code == "truncation")
    assert finding.evidence["max_length"] == [512, 128]
    train, serve = result.stages
    assert (train.truncation_length, train.at_truncation_length) == (512, 1)
    assert (serve.truncation_length, serve.at_truncation_length) == (128, 1)
    assert result.divergences[0].position == 127  # [SEP] at 127 in serve, a word piece in train


def test_truncation_side(minilm: Path):
    result = audit_text([LONG], {"train": f"hf:{minilm},max_length=128,truncation_side=right",
                                 "serve": f"hf:{minilm},max_length=128,truncation_side=left"})
    assert codes(result) == {"truncation"}
    assert "left" in next(f for f in result.findings if f.code == "truncation").message


def test_left_vs_right_padding(minilm: Path):
    result = audit_text(ORDINARY, {"train": f"hf:{minilm},max_length=64,padding=max_length,padding_side=right",
                                   "serve": f"hf:{minilm},max_length=64,padding=max_length,padding_side=left"})
    assert codes(result) == {"padding"}
    finding = next(f for f in result.findings if f.code == "padding")
    assert finding.evidence["padding_side"] == ["right", "left"]
    assert result.pairs[0].differing == len(ORDINARY)
    assert result.stages[0].mean_length == result.stages[1].mean_length  # attended lengths are the same


def test_vocabulary_with_one_changed_line(minilm: Path, minilm_copy: Path):
    vocab = minilm_copy / "vocab.txt"
    lines = vocab.read_text(encoding="utf-8").split("\n")
    index = lines.index("capital")
    lines[index] = "capitalz"  # one line changed; tokenizer.json dropped so the vocabulary comes from vocab.txt
    vocab.write_text("\n".join(lines), encoding="utf-8")
    (minilm_copy / "tokenizer.json").unlink()
    result = audit_text(ORDINARY, {"train": f"hf:{minilm}", "serve": f"hf:{minilm_copy}"})
    assert codes(result) == {"vocabulary"}
    finding = next(f for f in result.findings if f.code == "vocabulary")
    assert [index, "capital", "capitalz"] in finding.evidence["ids_meaning_differently"]
    assert result.pairs[0].differing == 1  # only the sentence with "capital"


def test_added_token_missing_in_serving(minilm: Path, tmp_path: Path):
    from transformers import AutoTokenizer

    trained = AutoTokenizer.from_pretrained(str(minilm))
    trained.add_tokens(["gapcheckium"])
    trained.save_pretrained(tmp_path / "trained")
    texts = [*ORDINARY, "the new element gapcheckium is stable"]
    result = audit_text(texts, {"train": f"hf:{tmp_path / 'trained'}", "serve": f"hf:{minilm}"})
    assert codes(result) == {"added_tokens_missing"}
    assert "gapcheckium" in next(f for f in result.findings if f.code == "added_tokens_missing").message


def test_two_causes_at_once_are_both_named(minilm: Path, tmp_path: Path):
    """A serving callable that pads to 32 and does not lowercase: padding must not hide the lowercasing."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(minilm), do_lower_case=False)

    def serve(text: str):
        return tokenizer(text, max_length=32, truncation=True, padding="max_length")

    serve.tokenizer = tokenizer  # type: ignore[attr-defined]
    result = audit_text([*ORDINARY, "Great Product, Would Buy Again!"], {"train": f"hf:{minilm}", "serve": serve})
    assert codes(result) == {"padding", "text_normalization"}
    assert set(result.divergences[0].causes) == {"padding", "text_normalization"}

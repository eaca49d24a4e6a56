"""Hostile tokenizer folders and settings (the reviewer's attack cases): files transformers would silently skip,
a vocabulary id that makes the tokenizers serializer walk four billion ids, settings out of range — each a one-line
exit 2 (or a finished audit), never a hang, a false gap or a traceback."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gapcheck.errors import InputError, UsageError
from gapcheck.text import audit_text
from gapcheck.text.samples import parse_source
from gapcheck.text.stages import load_stage, make_stage, parse_stage
from tests.text.conftest import ORDINARY


def _audit(folder: Path, reference: Path, **options: object):
    return audit_text(ORDINARY[:2], {"train": f"hf:{folder}", "serve": f"hf:{reference}"}, repeats=0, **options)


@pytest.mark.parametrize("name", ["vocab.txt", "tokenizer.json", "tokenizer_config.json"])
def test_a_tokenizer_file_linked_to_a_device_is_refused(minilm_copy: Path, minilm: Path, name: str):
    # transformers skips a non-regular file (os.path.isfile) and builds another tokenizer: with vocab.txt on
    # /dev/zero (tokenizer.json gone) the fast stage had an empty vocabulary and the audit reported a false gap
    if name == "vocab.txt":
        (minilm_copy / "tokenizer.json").unlink()
    (minilm_copy / name).unlink()
    (minilm_copy / name).symlink_to("/dev/zero")
    with pytest.raises(InputError, match=f"{name} is not a regular file"):
        _audit(minilm_copy, minilm)


def test_a_tokenizer_file_that_is_a_fifo_or_a_link_loop_is_refused(minilm_copy: Path, minilm: Path):
    (minilm_copy / "tokenizer_config.json").unlink()
    os.mkfifo(minilm_copy / "tokenizer_config.json")
    with pytest.raises(InputError, match="not a regular file"):
        load_stage(parse_stage(f"serve=hf:{minilm_copy},slow"))
    (minilm_copy / "tokenizer_config.json").unlink()
    (minilm_copy / "tokenizer.json").unlink()
    (minilm_copy / "tokenizer.json").symlink_to("tokenizer.json")
    with pytest.raises(InputError, match="cannot be read"):
        load_stage(parse_stage(f"loop=hf:{minilm_copy}"))


def test_a_vocabulary_id_of_four_billion_does_not_hang(minilm_copy: Path, minilm: Path):
    # tokenizers' serializer (to_str, used for the merges hash) walks every id up to the largest: it never returned
    path = minilm_copy / "tokenizer.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    document["model"]["vocab"]["zzzhuge"] = 4_000_000_000
    path.write_text(json.dumps(document), encoding="utf-8")
    result = _audit(minilm_copy, minilm)
    assert result.audited == 2 and result.stages[0].vocab_size == 4_000_000_001


@pytest.mark.parametrize("value", ["²", "١٢", "-1", "1e309", "nan"])
def test_max_length_must_be_ascii_digits(value: str):
    with pytest.raises(UsageError, match="must be an integer from 1"):  # int("²") raised ValueError (exit 3)
        make_stage("serve", f"hf:./tok,max_length={value}")


@pytest.mark.parametrize("setting", [{"repeats": 99_999_999_999}, {"probe": 10**10}, {"diagnose": 10**10},
                                     {"max_chars": 10**18}, {"chunk_size": 10**9}])
def test_huge_settings_are_refused_before_work(minilm: Path, setting: dict[str, int]):
    with pytest.raises(UsageError, match="must be an integer from"):  # --repeats 99999999999 ran for days
        audit_text(ORDINARY[:2], {"a": f"hf:{minilm}", "b": f"hf:{minilm}"}, **setting)


@pytest.mark.parametrize("spec", ["", "  "])
def test_an_empty_samples_path_is_not_the_working_directory(spec: str):
    with pytest.raises(UsageError, match="an empty path"):  # Path("") is ".": it audited every .txt under cwd
        parse_source(spec)


def test_the_text_feed_counts_and_says_the_strings_it_skips(tmp_path: Path, minilm: Path, caplog):
    from gapcheck.inputs import parse_input_spec
    from gapcheck.text.feed import tokenized_samples

    path = tmp_path / "texts.txt"
    path.write_bytes(b"caf\xe9 latin-1\nbinary\x00junk\n" + ORDINARY[0].encode() + b"\n" + ORDINARY[1].encode() + b"\n")
    specs = [parse_input_spec("input_ids:1x16:int64")]
    with caplog.at_level("WARNING", logger="gapcheck.text.feed"):
        fed = tokenized_samples(str(path), f"hf:{minilm}", specs, 2)
    assert len(fed) == 2 and [sample_id for sample_id, _ in fed.skipped] == ["texts.txt:1", "texts.txt:2"]
    assert "2 bad or blank string(s) skipped" in caplog.text  # were dropped without a word


def test_the_text_feed_refuses_specs_of_different_shapes(tmp_path: Path, minilm: Path):
    from gapcheck.inputs import parse_input_spec
    from gapcheck.text.feed import check_text_feed

    path = tmp_path / "texts.txt"
    path.write_text("\n".join(ORDINARY), encoding="utf-8")
    specs = [parse_input_spec(s) for s in ("input_ids:2x16:int64", "attention_mask:1x16:int64")]
    with pytest.raises(UsageError, match="one BATCHxSEQUENCE shape"):  # the 1x16 mask was fed as 2x16
        check_text_feed(str(path), f"hf:{minilm}", specs)


def test_a_bundle_never_makes_gapcheck_import_the_code_it_names(tmp_path: Path, minilm: Path):
    """A golden bundle is input: its manifest's recorded tokenizer ``evil.py:fn`` (or ``os:system``) was imported and
    called on every sentence when today's tokenizer differed. Only an hf: recipe (files) is loaded from a bundle."""
    from types import SimpleNamespace

    import numpy as np

    from gapcheck.text.bundle_check import check_bundle_tokenizer

    marker = tmp_path / "ran"
    (tmp_path / "evil.py").write_text(f"def fn(text):\n    open({str(marker)!r}, 'a').write(text)\n    return [1]\n")
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(ORDINARY[:2]), encoding="utf-8")
    bundle = SimpleNamespace(path=tmp_path, inputs={"input_ids": np.zeros((2, 16), np.int64)}, manifest={
        "inputs": [{"name": "input_ids", "shape": [1, 16], "dtype": "int64"}],
        "samples": {"source": "text", "tokenizer": f"{tmp_path / 'evil.py'}:fn", "count": 2}})
    (finding,) = check_bundle_tokenizer(bundle, str(texts), f"hf:{minilm}")
    assert not marker.exists()
    assert finding.code == "golden_text_unreproduced" and "never imported" in finding.evidence["recorded_error"]


def test_a_long_string_leaves_no_transformers_line_on_stderr(minilm: Path, capfd):
    load_stage.cache_clear()  # a fresh tokenizer: transformers warns once per tokenizer object
    result = audit_text(["word " * 700, ORDINARY[0]], {"a": f"hf:{minilm}", "b": f"hf:{minilm},slow"}, repeats=0)
    assert result.audited == 2 and result.stages[0].max_length_seen > 512
    assert "Token indices sequence length" not in capfd.readouterr().err

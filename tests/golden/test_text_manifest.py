"""A text golden bundle keeps the SHA256 of the text samples it was recorded from (``samples.text_samples_sha256``,
pydantic-validated, optional for bundles recorded before it was kept), so nightly can tell "the text samples file
changed" from "the tokenizer changed" (issue 21)."""
# ruff: noqa: F811 - the fixtures imported below are the parameters of the same name
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from gapcheck.cli.app import main
from gapcheck.errors import InputError
from gapcheck.golden import load_bundle
from gapcheck.golden.bundle import text_samples_sha256
from tests.nightly.fake_triton import FakeTriton
from tests.nightly.test_text_tokenizer import bundle, texts  # noqa: F401 - a recorded text bundle
from tests.text.conftest import minilm, text_recipe  # noqa: F401


def _edit(folder: Path, change) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    change(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_the_manifest_keeps_the_samples_file_and_its_sha256(bundle: Path, texts: Path, minilm: Path):
    samples = json.loads((bundle / "manifest.json").read_text())["samples"]
    assert samples["source"] == "text" and samples["text_samples"] == "reviews.jsonl:body"
    assert samples["text_samples_sha256"] == hashlib.sha256(texts.read_bytes()).hexdigest()
    assert samples["tokenizer"] == text_recipe(minilm)
    assert load_bundle(bundle).manifest["samples"]["text_samples_sha256"] == samples["text_samples_sha256"]


def test_the_digest_of_a_file_and_of_a_folder(tmp_path: Path):
    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"one\ntwo\n")
    assert text_samples_sha256(lines) == hashlib.sha256(b"one\ntwo\n").hexdigest()
    assert text_samples_sha256(f"{lines}") == text_samples_sha256(lines)
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("first", encoding="utf-8")
    (folder / "sub" / "b.txt").write_text("second", encoding="utf-8")
    before = text_samples_sha256(folder)
    (folder / "notes.md").write_text("not read by the folder reader", encoding="utf-8")
    assert text_samples_sha256(folder) == before  # only what the reader reads
    (folder / "sub" / "b.txt").write_text("changed", encoding="utf-8")
    assert text_samples_sha256(folder) != before
    (folder / "sub" / "b.txt").write_text("second", encoding="utf-8")
    (folder / "sub" / "b.txt").rename(folder / "sub" / "c.txt")
    assert text_samples_sha256(folder) != before  # a renamed sample is another sample id


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_is_refused_never_opened(tmp_path: Path):
    fifo = tmp_path / "texts.txt"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="FIFO"):
        text_samples_sha256(fifo)


@pytest.mark.parametrize(("value", "said"), [
    ("not-a-digest", "samples.text_samples_sha256: String should match pattern"),
    (5, "samples.text_samples_sha256: Input should be a valid string"),
])
def test_a_malformed_digest_is_exit_2_saying_so(bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                                                 value: object, said: str):
    copy = tmp_path / "copy"
    shutil.copytree(bundle, copy)
    _edit(copy, lambda m: m["samples"].update(text_samples_sha256=value))
    assert main(["golden", "verify", str(copy)]) == 2
    assert said in capsys.readouterr().err
    with pytest.raises(InputError):
        load_bundle(copy)


def test_an_older_bundle_without_the_digest_is_still_checked(bundle: Path, texts: Path, minilm: Path, tmp_path: Path):
    """Recorded before the digest was kept: loads, and nightly's tokenizer check runs as before (it cannot tell a
    changed file, so check_bundle_tokenizer's own reasoning decides)."""
    copy = tmp_path / "older"
    shutil.copytree(bundle, copy)
    _edit(copy, lambda m: m["samples"].pop("text_samples_sha256"))
    assert "text_samples_sha256" not in load_bundle(copy).manifest["samples"]
    report = tmp_path / "night.json"
    with FakeTriton(load_bundle(copy), "ok") as fake:
        code = main(["nightly", "--golden", str(copy), "--history", str(tmp_path / "h.sqlite"), "--no-audit",
                     "--retries", "0", "--endpoint", f"bert={fake.url}", "--json", str(report),
                     "--text-samples", f"{texts}:body", "--tokenizer", text_recipe(minilm, ",do_lower_case=false")])
    document = json.loads(report.read_text())
    assert code == 1, document["headline"]
    (finding,) = [f for f in document["findings"] if f["code"] == "golden_tokenizer_changed"]
    assert finding["evidence"]["recorded_text_samples_sha256"] is None

"""``gapcheck nightly --text-samples FILE[:field] --tokenizer hf:PATH``: the tokenizer in front of the endpoints is
checked against a text golden bundle (issue 21), end to end on the real MiniLM tokenizer files.

A bundle is recorded with one tokenizer recipe (``golden record --text-samples --tokenizer``); nightly replays it to
an endpoint that answers correctly (the fake KServe server of these tests) and re-tokenizes the recorded strings
with the recipe given tonight: unchanged -> exit 0; lowercasing off or another max_length -> golden_tokenizer_changed
(a gap, exit 1) with the cause; another text samples file (its SHA256 is in the manifest) -> golden_text_samples_changed
(a warning: the tokenizer is not judged on other strings, exit 0)."""
# ruff: noqa: F811 - the fixtures imported below are the parameters of the same name
from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from gapcheck.cli.app import main
from gapcheck.golden import load_bundle
from tests.nightly.fake_triton import FakeTriton
from tests.text.conftest import (  # noqa: F401 - minilm: the MiniLM tokenizer files (pip package), a fixture
    ORDINARY,
    TEXT_LENGTH,
    TOKENIZER_FILES,
    minilm,
    record_text_bundle,
    text_recipe,
)

L = TEXT_LENGTH




def _write_texts(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"body": t}) + "\n" for t in texts), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def texts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_texts(tmp_path_factory.mktemp("texts") / "reviews.jsonl", ORDINARY)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, texts: Path, minilm: Path) -> Path:
    """A tiny BERT's golden bundle, recorded from the sentences through MiniLM's tokenizer (6 samples)."""
    return record_text_bundle(tmp_path_factory.mktemp("golden") / "bundle", texts, minilm,
                              tmp_path_factory.mktemp("export_cache"))


@pytest.fixture(scope="module")
def endpoint(bundle: Path):
    """A server that answers the golden inputs with the golden outputs: the model behind it is right."""
    with FakeTriton(load_bundle(bundle), "ok") as fake:
        yield fake.url


def _night(tmp_path: Path, bundle: Path, url: str, *extra: str) -> tuple[int, dict[str, Any]]:
    report = tmp_path / "night.json"
    code = main(["nightly", "--golden", str(bundle), "--history", str(tmp_path / "h.sqlite"), "--retries", "0",
                 "--no-audit", "--endpoint", f"bert={url}", "--json", str(report), *extra])
    return code, json.loads(report.read_text()) if report.exists() else {}


def _codes(document: dict[str, Any]) -> dict[str, str]:
    return {f["code"]: f["severity"] for f in document["findings"]}


def test_the_recorded_tokenizer_passes_exit_0(tmp_path: Path, bundle: Path, endpoint: str, texts: Path,
                                              minilm: Path):
    code, document = _night(tmp_path, bundle, endpoint, "--text-samples", f"{texts}:body",
                            "--tokenizer", text_recipe(minilm))
    assert code == 0, document["headline"]
    assert document["verdict"] == "pass" and not {"golden_tokenizer_changed", "golden_text_unreproduced",
                                                  "golden_text_samples_changed"} & set(_codes(document))
    assert "text_check" in document["timings"]  # the check ran


@pytest.mark.parametrize(("change", "cause"), [
    (",do_lower_case=false", "text_normalization"),  # lowercasing off behind the endpoint
    ("", "truncation"),  # max_length 12 instead of 24 (padded back to the bundle's 24)
])
def test_a_changed_serving_tokenizer_is_a_gap_exit_1(tmp_path: Path, bundle: Path, endpoint: str, texts: Path,
                                                     minilm: Path, change: str, cause: str):
    recipe = text_recipe(minilm, change) if change else text_recipe(minilm).replace(f"max_length={L}", "max_length=12")
    code, document = _night(tmp_path, bundle, endpoint, "--text-samples", f"{texts}:body", "--tokenizer", recipe)
    assert code == 1, document["headline"]
    assert document["verdict"] == "gap" and document["run"]["exit_code"] == 1
    (finding,) = [f for f in document["findings"] if f["code"] == "golden_tokenizer_changed"]
    assert finding["severity"] == "gap" and cause in finding["evidence"]["causes"]
    assert finding["evidence"]["text_samples_sha256"] == finding["evidence"]["recorded_text_samples_sha256"]
    assert "golden_tokenizer_changed" not in json.dumps(document["endpoints"])  # the endpoint itself passes
    assert document["endpoints"][0]["status"] == "pass" and "tokenizer" in document["headline"]
    with sqlite3.connect(tmp_path / "h.sqlite") as db:  # the night is recorded with its exit code
        assert db.execute("SELECT exit_code FROM runs").fetchall() == [(1,)]


def test_another_samples_file_is_named_not_blamed_on_the_tokenizer(tmp_path: Path, bundle: Path, endpoint: str,
                                                                   minilm: Path):
    other = _write_texts(tmp_path / "reviews.jsonl", [t.upper() for t in ORDINARY])  # same name, other strings
    code, document = _night(tmp_path, bundle, endpoint, "--text-samples", f"{other}:body",
                            "--tokenizer", text_recipe(minilm, ",do_lower_case=false"))
    assert code == 0, document["headline"]  # a warning: the endpoints pass, the tokenizer is not judged
    assert _codes(document).get("golden_text_samples_changed") == "warning"
    assert "golden_tokenizer_changed" not in _codes(document) and "golden_text_unreproduced" not in _codes(document)
    (finding,) = [f for f in document["findings"] if f["code"] == "golden_text_samples_changed"]
    assert "text samples file changed" in finding["message"]
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert finding["evidence"]["recorded_sha256"] == manifest["samples"]["text_samples_sha256"]
    assert finding["evidence"]["sha256"] != finding["evidence"]["recorded_sha256"]


def test_the_config_section_names_them_relative_to_the_file(tmp_path: Path, bundle: Path, endpoint: str,
                                                           texts: Path, minilm: Path, monkeypatch):
    import shutil

    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    shutil.copy(texts, project / "data" / "reviews.jsonl")
    (project / "tok").mkdir()
    for name in TOKENIZER_FILES:
        shutil.copy(minilm / name, project / "tok" / name)
    config = project / "gapcheck.toml"
    config.write_text('[nightly]\ntext_samples = "data/reviews.jsonl:body"\n'
                      f'tokenizer = "hf:tok,max_length={L},padding=max_length,do_lower_case=false"\n', encoding="utf-8")
    code, document = _night(tmp_path, bundle, endpoint, "--config", str(config))
    assert code == 1 and "golden_tokenizer_changed" in _codes(document)
    monkeypatch.setenv("GAPCHECK_NIGHTLY__TOKENIZER", f"hf:tok,max_length={L},padding=max_length")
    code, document = _night(tmp_path, bundle, endpoint, "--config", str(config))
    assert code == 0, document["headline"]  # the environment over the file (the file's samples kept)
    monkeypatch.delenv("GAPCHECK_NIGHTLY__TOKENIZER")
    code, document = _night(tmp_path, bundle, endpoint, "--config", str(config), "--text-samples",
                            f"{texts}:body", "--tokenizer", text_recipe(minilm))
    assert code == 0, document["headline"]  # the flags over the file


def test_a_bundle_not_recorded_from_text_is_exit_2_with_nothing_recorded(tmp_path: Path, endpoint: str,
                                                                        texts: Path, minilm: Path,
                                                                        tiny_golden: Path, capsys):
    history = tmp_path / "h.sqlite"
    code = main(["nightly", "--golden", str(tiny_golden), "--history", str(history), "--endpoint", f"x={endpoint}",
                 "--text-samples", f"{texts}:body", "--tokenizer", text_recipe(minilm)])
    assert code == 2 and "not recorded from text samples" in capsys.readouterr().err
    assert not history.exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--tokenizer", "hf:/nonexistent"], "--tokenizer is for --text-samples"),
    (["--text-samples", "/nonexistent.jsonl:body", "--tokenizer", "hf:/x"], "no such file"),
    (["--text-samples", "{texts}:body"], "needs --tokenizer"),
    (["--text-samples", "{texts}:body", "--tokenizer", "hf:/x,nonsense=1"], "nonsense"),
    (["--text-samples", "{texts}:body", "--tokenizer", "hf:/nonexistent/tok"], "is not a tokenizer folder"),
])
def test_bad_text_options_exit_2_before_any_work(tmp_path: Path, bundle: Path, texts: Path, capsys,
                                                 args: list[str], message: str):
    history = tmp_path / "h.sqlite"
    code = main(["nightly", "--golden", str(bundle), "--history", str(history), "--endpoint",
                 "x=http://127.0.0.1:9/m", *(a.format(texts=texts) for a in args)])
    assert code == 2 and message in capsys.readouterr().err
    assert not history.exists()


def test_another_field_of_the_same_file_is_named_too(tmp_path: Path, bundle: Path, endpoint: str, texts: Path,
                                                     minilm: Path):
    code, document = _night(tmp_path, bundle, endpoint, "--text-samples", f"{texts}:title",
                            "--tokenizer", text_recipe(minilm))
    assert code == 0 and _codes(document) == {"golden_text_samples_changed": "warning"}, document["headline"]
    assert "field 'body' recorded" in document["findings"][0]["message"]


@pytest.mark.parametrize("line", ['text_samples = "reviews\\u001b[31m.jsonl:body"', 'tokenizer = "hf:tok\\u0007"',
                                  "text_samples = 5", 'tokenizer = ""'])
def test_bad_config_values_exit_2_naming_the_key(tmp_path: Path, bundle: Path, capsys, line: str):
    config = tmp_path / "gapcheck.toml"
    config.write_text(f"[nightly]\n{line}\n", encoding="utf-8")
    code = main(["nightly", "--config", str(config), "--golden", str(bundle), "--history", str(tmp_path / "h.sqlite"),
                 "--endpoint", "x=http://127.0.0.1:9/m"])
    err = capsys.readouterr().err
    assert code == 2 and f"nightly.{line.split(' ')[0]}" in err, err
    assert "\x1b" not in err and "\x07" not in err and not (tmp_path / "h.sqlite").exists()

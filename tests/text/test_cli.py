"""``gapcheck preprocess-audit`` on text: ``--samples texts.jsonl:text --stage train=hf:... --stage serve=hf:...``
dispatches to the text audit and renders, reports and exits like the image path (0 pass, 1 gap, 2 usage)."""
from __future__ import annotations

import json
from pathlib import Path

from gapcheck.cli.app import main
from tests.text.conftest import ORDINARY, validate_text_report


def _jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return path


def _run(tmp_path: Path, samples: str, *stages: str, extra: tuple[str, ...] = ()) -> tuple[int, dict]:
    out = tmp_path / "report.json"
    args = ["preprocess-audit", "--samples", samples, *(a for s in stages for a in ("--stage", s)), "--json", str(out),
            "--no-progress", *extra]
    code = main(args)
    return code, json.loads(out.read_text()) if out.exists() else {}


def test_fast_and_slow_agree_on_ordinary_text_exit_0(tmp_path: Path, minilm: Path):
    samples = _jsonl(tmp_path / "texts.jsonl", ORDINARY)
    code, document = _run(tmp_path, f"{samples}:text", f"train=hf:{minilm}", f"serve=hf:{minilm},slow")
    assert code == 0, document.get("headline")
    validate_text_report(document)
    assert document["verdict"] == "pass"
    assert not [f for f in document["findings"] if f["severity"] == "error"]


def test_lowercasing_mismatch_exit_1_with_the_code(tmp_path: Path, minilm: Path):
    samples = _jsonl(tmp_path / "texts.jsonl", ORDINARY)
    code, document = _run(tmp_path, f"{samples}:text", f"train=hf:{minilm}",
                          f"serve=hf:{minilm},do_lower_case=false", extra=("--repeats", "0"))
    assert code == 1
    validate_text_report(document)
    assert document["verdict"] == "gap"
    assert "text_normalization" in {f["code"] for f in document["findings"]}


def test_invalid_utf8_lines_are_counted_not_a_crash(tmp_path: Path, minilm: Path):
    path = tmp_path / "texts.txt"
    path.write_bytes(b"a fine first line\ncaf\xe9 latin-1 bytes\n\xff\xfe\nA fine last line.\n")
    code, document = _run(tmp_path, str(path), f"train=hf:{minilm}", f"serve=hf:{minilm},slow")
    assert code == 0, document.get("headline")
    bad = [f for f in document["findings"] if f["code"] == "bad_text"]
    assert bad and "UTF-8" in json.dumps(bad)


def test_engine_flag_runs_the_chunks_as_shards(tmp_path: Path, minilm: Path):
    samples = _jsonl(tmp_path / "texts.jsonl", ORDINARY)
    code, document = _run(tmp_path, f"{samples}:text", f"train=hf:{minilm}",
                          f"serve=hf:{minilm},do_lower_case=false", extra=("--engine", "serial"))
    assert code == 1 and "text_normalization" in {f["code"] for f in document["findings"]}


def test_usage_errors_exit_2(tmp_path: Path, minilm: Path):
    samples = _jsonl(tmp_path / "texts.jsonl", ORDINARY)
    assert main(["preprocess-audit", "--samples", f"{samples}:text", "--no-progress"]) == 2  # no stage
    assert main(["preprocess-audit", "--samples", f"{samples}:text", "--stage", f"a=hf:{minilm}",
                 "--augmented", "a", "--no-progress"]) == 2
    assert main(["preprocess-audit", "--samples", f"{samples}:text", "--stage", f"a=hf:{minilm},nonsense=1",
                 "--no-progress"]) == 2


def test_slow_stage_on_a_folder_with_only_tokenizer_json_names_the_missing_files(tmp_path: Path, minilm_copy: Path,
                                                                                 capsys):
    """A folder saved by transformers 5 holds tokenizer.json alone: the slow stage says vocab.txt is missing there
    (it said 'TypeError: stat: path should be string ... not NoneType')."""
    (minilm_copy / "vocab.txt").unlink()
    samples = _jsonl(tmp_path / "texts.jsonl", ORDINARY)
    code, _ = _run(tmp_path, f"{samples}:text", f"fast=hf:{minilm_copy}", f"slow=hf:{minilm_copy},slow")
    err = capsys.readouterr().err
    assert code == 2 and "vocab.txt" in err and str(minilm_copy) in err
    assert "NoneType" not in err and "Traceback" not in err

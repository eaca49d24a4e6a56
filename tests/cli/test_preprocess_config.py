"""`gapcheck preprocess-audit` and its configuration, through the CLI (issues 21 and 18): a ``[text]``-only
gapcheck.toml drives the text audit with no flag at all, flags override the file, the environment overrides the
file, image configurations stay with the image path; a flag left alone is not passed on (the library owns the
defaults) and the help texts say the library's defaults."""
# ruff: noqa: F811 - the fixtures imported below are the parameters of the same name
from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest

from gapcheck.cli.app import main
from tests.preprocess.conftest import photos, stage  # noqa: F401 - the real photographs fixture
from tests.text.conftest import ORDINARY, minilm, minilm_copy  # noqa: F401 - the MiniLM tokenizer fixtures

TEXT = """
[text]
samples = "texts.jsonl:text"
n = 5
repeats = 0

[text.stages]
train = "hf:tok"
serve = "hf:tok,do_lower_case=false"
"""


def _project(tmp_path: Path, body: str) -> Path:
    (tmp_path / "texts.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in ORDINARY), encoding="utf-8")
    config = tmp_path / "gapcheck.toml"
    config.write_text(body, encoding="utf-8")
    return config


def _run(tmp_path: Path, config: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "report.json"
    code = main(["preprocess-audit", "--config", str(config), "--json", str(out), "--no-progress", *extra])
    return code, json.loads(out.read_text()) if out.exists() else {}


def test_a_text_only_config_drives_the_command(tmp_path: Path, minilm_copy: Path):
    code, document = _run(tmp_path, _project(tmp_path, TEXT))  # no --samples, no --stage
    assert code == 1, document.get("headline")  # the configured serve stage keeps case
    assert document["input"] == "text" and document["audited"] == 5
    assert [s["stage"] for s in document["stages"]] == ["train", "serve"]
    assert document["settings"]["repeats"] == 0
    assert "text_normalization" in {f["code"] for f in document["findings"] if f["severity"] == "gap"}


def test_flags_override_the_file(tmp_path: Path, minilm_copy: Path, minilm: Path):
    config = _project(tmp_path, TEXT)
    code, document = _run(tmp_path, config, "--n", "3", "--repeats", "1", "--p-threshold", "0.02",
                          "--stage", f"a=hf:{minilm}", "--stage", f"b=hf:{minilm},slow")
    assert code == 0, document.get("headline")
    assert document["audited"] == 3 and [s["stage"] for s in document["stages"]] == ["a", "b"]
    assert document["settings"]["repeats"] == 1 and document["settings"]["p_threshold"] == 0.02


def test_the_environment_overrides_the_file(tmp_path: Path, minilm_copy: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GAPCHECK_TEXT__N", "2")
    monkeypatch.setenv("GAPCHECK_TEXT__MIN_EFFECT", "0.3")
    code, document = _run(tmp_path, _project(tmp_path, TEXT))
    assert document["audited"] == 2 and document["settings"]["min_effect"] == 0.3
    assert document["settings"]["repeats"] == 0  # the file's, where the environment says nothing
    code, document = _run(tmp_path, _project(tmp_path, TEXT), "--n", "4")  # and the flag over the environment
    assert document["audited"] == 4
    code, document = _run(tmp_path, _project(tmp_path, TEXT), "--max-samples", "3")  # the spelling of --n
    assert document["audited"] == 3


def test_tokenizer_stages_without_samples_name_what_is_missing(tmp_path: Path, minilm: Path,
                                                               capsys: pytest.CaptureFixture):
    config = _project(tmp_path, "")
    code = main(["preprocess-audit", "--config", str(config), "--stage", f"a=hf:{minilm}", "--stage",
                 f"b=hf:{minilm},slow", "--no-progress"])
    assert code == 2 and "[text] samples" in capsys.readouterr().err


IMAGES = """
[preprocess]
samples = "{photos}"
n = 2

[preprocess.stages.train]
callable = "{train}"

[preprocess.stages.val]
callable = "{val}"

[text]
n = 7
repeats = 5
"""


def test_an_image_config_stays_with_the_image_path(tmp_path: Path, photos: Path):
    body = IMAGES.format(photos=photos, train=stage("train_transform"), val=stage("val_transform"))
    code, document = _run(tmp_path, _project(tmp_path, body), "--workers", "1")
    assert code == 0, document.get("headline")
    assert document.get("input") != "text" and document["settings"]["n"] == 2  # [text] n is the text audit's
    assert [s["stage"] for s in document["stages"]] == ["train", "val"]


def test_image_samples_flag_wins_over_text_samples_in_the_file(tmp_path: Path, photos: Path,
                                                               minilm_copy: Path):
    code, document = _run(tmp_path, _project(tmp_path, TEXT), "--samples", str(photos), "--stage",
                          f"train={stage('train_transform')}", "--stage", f"val={stage('val_transform')}",
                          "--n", "2", "--workers", "1")
    assert code == 0, document.get("headline")
    assert document.get("input") != "text" and [s["stage"] for s in document["stages"]] == ["train", "val"]


def _captured(monkeypatch: pytest.MonkeyPatch, module: str, name: str) -> dict[str, Any]:
    """Replace the library entry point by one that records its keywords and stops the command (exit 0)."""
    import importlib

    seen: dict[str, Any] = {}

    def capture(*args: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        raise SystemExit(0)

    monkeypatch.setattr(importlib.import_module(module), name, capture)
    return seen


STATISTICS = ("n", "max_samples", "p_threshold", "min_effect", "repeats", "tolerance")


def test_flags_left_alone_are_not_passed_image_path(tmp_path: Path, photos: Path,
                                                    monkeypatch: pytest.MonkeyPatch):
    seen = _captured(monkeypatch, "gapcheck.preprocess.audit", "preprocess_audit")
    with pytest.raises(SystemExit):
        main(["preprocess-audit", "--config", str(_project(tmp_path, "")), "--samples", str(photos), "--stage",
              f"train={stage('train_transform')}", "--stage", f"val={stage('val_transform')}", "--no-progress"])
    assert seen and not set(STATISTICS) & set(seen), seen  # preprocess_audit's own defaults apply
    with pytest.raises(SystemExit):
        main(["preprocess-audit", "--config", str(_project(tmp_path, "")), "--samples", str(photos), "--stage",
              f"train={stage('train_transform')}", "--stage", f"val={stage('val_transform')}", "--no-progress",
              "--repeats", "0", "--min-effect", "0.2"])
    assert seen["repeats"] == 0 and seen["min_effect"] == 0.2 and "p_threshold" not in seen


def test_flags_left_alone_are_not_passed_text_path(tmp_path: Path, minilm: Path, monkeypatch: pytest.MonkeyPatch):
    from gapcheck.text.audit import DEFAULT_MAX_SAMPLES

    seen = _captured(monkeypatch, "gapcheck.text.audit", "audit_text")
    config = _project(tmp_path, "")
    with pytest.raises(SystemExit):
        main(["preprocess-audit", "--config", str(config), "--samples", f"{tmp_path / 'texts.jsonl'}:text",
              "--stage", f"a=hf:{minilm}", "--stage", f"b=hf:{minilm},slow", "--no-progress"])
    assert seen["max_samples"] == DEFAULT_MAX_SAMPLES  # the bridge's, from the library
    assert not {"p_threshold", "min_effect", "repeats"} & set(seen), seen  # audit_text's own defaults apply


def _help() -> str:
    from typer.testing import CliRunner

    from gapcheck.cli.app import app

    result = CliRunner().invoke(app, ["preprocess-audit", "--help"], env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"})
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_the_help_says_the_library_defaults():
    from gapcheck.preprocess.audit import preprocess_audit
    from gapcheck.text.audit import audit_text

    image = inspect.signature(preprocess_audit).parameters
    text = inspect.signature(audit_text).parameters
    shown = _help()
    assert f"default {image['n'].default:g} for images, {text['max_samples'].default:g} for text;" in shown
    for name in ("p_threshold", "min_effect", "repeats"):
        assert image[name].default == text[name].default  # one number each: said once
        assert f"default {image[name].default:g}; config: preprocess.{name}, text.{name})" in shown, name
    from gapcheck.cli.preprocess_audit import PREPROCESS_WORKERS

    assert image["workers"].default == PREPROCESS_WORKERS

"""``[text]`` in gapcheck.toml: the file drives the text audit, the environment overrides the file, flags override
both; a bad value is a configuration error (exit 2) with one message naming the key."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gapcheck.cli.app import main
from gapcheck.config import load_config
from gapcheck.errors import ConfigError, UsageError
from gapcheck.text.cli_bridge import run_text_audit, wants_text_audit
from gapcheck.text.config import resolve
from tests.text.conftest import ORDINARY


def _project(tmp_path: Path, minilm_copy: Path, body: str) -> Path:
    """A project folder: texts.jsonl, the tokenizer at ./tok, and gapcheck.toml with ``body``."""
    (tmp_path / "texts.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in ORDINARY), encoding="utf-8")
    config = tmp_path / "gapcheck.toml"
    config.write_text(body, encoding="utf-8")
    return config


GOOD = """
[text]
samples = "texts.jsonl:text"
n = 5
repeats = 0
p_threshold = 0.05

[text.stages]
train = "hf:tok"
serve = "hf:tok,do_lower_case=false"
"""


def test_the_file_drives_the_audit(tmp_path: Path, minilm_copy: Path):
    config = load_config(_project(tmp_path, minilm_copy, GOOD))
    assert wants_text_audit(None, (), config)
    result = run_text_audit(None, (), config=config)  # nothing on the command line
    assert result.audited == 5 and [s.stage for s in result.stages] == ["train", "serve"]
    assert result.settings["repeats"] == 0 and result.settings["p_threshold"] == 0.05
    assert "text_normalization" in {f.code for f in result.findings}  # the configured serve stage keeps case
    assert result.settings["stages"]["train"].startswith(f"hf:{tmp_path / 'tok'}")  # relative to the file


def test_environment_over_file_and_flags_over_both(tmp_path: Path, minilm_copy: Path, minilm: Path):
    path = _project(tmp_path, minilm_copy, GOOD)
    config = load_config(path, environ={"GAPCHECK_TEXT__N": "3", "GAPCHECK_TEXT__REPEATS": "1"})
    assert resolve(config).options["max_samples"] == 3 and resolve(config).options["repeats"] == 1
    result = run_text_audit(None, [f"a=hf:{minilm}", f"b=hf:{minilm},slow"], config=config, max_samples=2,
                            p_threshold=0.02)
    assert result.audited == 2 and [s.stage for s in result.stages] == ["a", "b"] and result.verdict == "pass"
    assert result.settings["p_threshold"] == 0.02 and result.settings["repeats"] == 1  # flag, then environment


def test_text_over_preprocess_statistics(tmp_path: Path, minilm_copy: Path):
    path = _project(tmp_path, minilm_copy, GOOD.replace("n = 5\n", "") + "\n[preprocess]\nn = 4\nrepeats = 3\n")
    options = resolve(load_config(path)).options
    assert options["max_samples"] == 4 and options["repeats"] == 0  # [preprocess] n, [text] repeats


def test_nothing_configured_is_a_usage_error(tmp_path: Path):
    config = load_config(environ={})
    assert not wants_text_audit(None, (), config)
    with pytest.raises(UsageError, match="no samples"):
        run_text_audit(None, ["a=hf:x", "b=hf:x"], config=config)


@pytest.mark.parametrize(("line", "message"), [
    ("p_threshold = nan", "text.p_threshold"),
    ("min_effect = 1.5", "text.min_effect"),
    ("n = 0", "text.n"),
    ("repeats = -1", "text.repeats"),
    ("n = \"12\"", "text.n"),
    ("colour = \"blue\"", "unknown key(s) in [text]: colour"),
    ("samples = \"texts\\u001b[31m.jsonl:text\"", "control characters"),
    ("stages = { \"a\\u0007\" = \"hf:tok\" }", "control characters"),
    ("stages = { \"a b\" = \"hf:tok\" }", "letters, digits"),
    ("stages = { a = \"hf:tok,nonsense=1\" }", "unknown hf: setting"),
    ("stages = { a = \"no-colon\" }", "module:fn"),
    ("stages = { a = \"hf:" + "x" * 5000 + "\" }", "at most 4096"),
])
def test_bad_values_exit_2_with_one_message(tmp_path: Path, minilm_copy: Path, capsys: pytest.CaptureFixture,
                                            line: str, message: str):
    path = _project(tmp_path, minilm_copy, f"[text]\n{line}\n")
    with pytest.raises(ConfigError, match="text"):
        load_config(path)
    code = main(["preprocess-audit", "--config", str(path), "--samples", str(tmp_path / "texts.jsonl") + ":text",
                 "--stage", "a=hf:tok", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and message in err
    problem_lines = [x for x in err.splitlines() if "text" in x and str(path) in x]
    assert len(problem_lines) == 1, err
    assert "\x1b" not in err and "\x07" not in err  # the bad value never reaches the terminal raw


def test_preprocess_section_alone_keeps_images_with_the_image_path(tmp_path: Path, minilm_copy: Path):
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "a.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    image_only = _project(tmp_path, minilm_copy, '[preprocess]\nsamples = "images"\n'
                          '[preprocess.stages.train]\ncallable = "mypkg.data:train_transform"\n')
    assert not wants_text_audit(None, (), load_config(image_only))
    text_in_preprocess = _project(tmp_path, minilm_copy, '[preprocess]\nsamples = "texts.jsonl:text"\nrepeats = 0\n'
                                  '[preprocess.stages.a]\ncallable = "hf:tok"\n[preprocess.stages.b]\ncallable = "hf:tok"\n')
    config = load_config(text_in_preprocess)
    assert wants_text_audit(None, (), config)
    result = run_text_audit(None, (), config=config)  # samples and stages as [preprocess] names them
    assert result.audited == len(ORDINARY) and result.verdict == "pass"


def test_a_bare_command_runs_from_the_file_alone(tmp_path: Path, minilm_copy: Path, monkeypatch, capsys):
    """`gapcheck preprocess-audit` with samples and stages all in [text]: it runs (it used to print the help and
    exit 2, as for a bare command without config)."""
    _project(tmp_path, minilm_copy, GOOD)
    monkeypatch.chdir(tmp_path)
    for name in [k for k in __import__("os").environ if k.startswith("GAPCHECK_")]:
        monkeypatch.delenv(name)
    code = main(["preprocess-audit"])
    out = capsys.readouterr().out
    assert code == 1 and "text_normalization" in out and "Usage:" not in out

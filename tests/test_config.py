"""gapcheck.toml / [tool.gapcheck] loading and its error messages."""
from __future__ import annotations

import subprocess
import sys

import pytest

from gapcheck.config import ExportDiffSection, Section, find_config, load_config, register_section
from gapcheck.errors import ConfigError


def test_no_config_is_fine(tmp_path):
    assert load_config(start=tmp_path).source is None or load_config(start=tmp_path).source != tmp_path / "gapcheck.toml"


def test_pyproject_tool_table_and_relative_paths(tmp_path):
    (tmp_path / "pyproject.toml").write_text("""
[tool.gapcheck.preprocess]
samples = "imgs"
n = 8
p_threshold = 0.05
[tool.gapcheck.preprocess.stages.infer]
callable = "stages.py:infer"
augmented = false
""")
    assert find_config(tmp_path) == tmp_path / "pyproject.toml"
    cfg = load_config(start=tmp_path)
    assert cfg.preprocess.n == 8 and cfg.preprocess.p_threshold == 0.05
    assert cfg.preprocess.samples == str(tmp_path / "imgs")
    assert cfg.preprocess.stages[0].target == f"{tmp_path / 'stages.py'}:infer"


@pytest.mark.parametrize(
    "text, message",
    [
        ("[preprocess\n", "invalid TOML"),
        ("[preprocess]\nnn = 3\n", "unknown key(s) in [preprocess]: nn"),
        ("[preprocess]\nn = '3'\n", "preprocess.n: Input should be a valid integer (got '3')"),
        ("[preprocess]\nworkers = true\n", "preprocess.workers: Input should be a valid integer (got True)"),
        ("[preprocess]\nworkers = 0\n", "preprocess.workers: Input should be greater than or equal to 1"),
        ("[export_diff]\nprecision = 'fp8'\n", "export_diff.precision: Input should be 'fp32', 'fp16', 'bf16' or 'int8'"),
        ("[export_diff]\ntolerances = {'a.*' = [1e-3]}\n", "export_diff.tolerances.a.*"),
        ("[triton]\ntimeout_s = -1\n", "triton.timeout_s: Input should be greater than 0"),
        ("preprocess = 3\n", "[preprocess] must be a table"),
        ("[preprocess.stages.a]\naugmented = true\n", "preprocess.stages.a: needs exactly one of 'callable' or 'steps'"),
        ("[preprocess.stages.a]\ncallable = 'x:y'\ncolour = 1\n", "unknown key(s) in [preprocess.stages.a]: colour"),
        ("[preprocess.stages.a]\nsteps = [{op = 'decode'}, {op = 'resize', size = 3, backend = 'gpu'}]\n",
         "unknown resize backend"),
        ("[preprocess.stages.a]\nsteps = [{op = 'resize', size = 3}]\n", "first step must be"),
        ("[preprocess.stages.a]\nsteps = [{op = 'decode'}, {op = 'blur'}]\n", "unknown op 'blur'"),
    ],
)
def test_errors_name_the_file_and_key(tmp_path, text, message):
    path = tmp_path / "gapcheck.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert message in str(info.value) and str(path) in str(info.value)


def test_merge_order_file_environment_flags(tmp_path):
    path = tmp_path / "gapcheck.toml"
    path.write_text("[export_diff]\nnum_samples = 2\nseed = 7\ntolerances = {'layer1.*' = [1e-3, 1e-4]}\n"
                    "[preprocess]\nsamples = 'imgs'\n")
    env = {"GAPCHECK_EXPORT_DIFF__NUM_SAMPLES": "5", "GAPCHECK_PREPROCESS__SAMPLES": "/abs/imgs",
           "GAPCHECK_TRITON__URL": "grpc://127.0.0.1:8001", "UNRELATED": "x", "GAPCHECK_MAX_ELEMENTS": "9"}
    cfg = load_config(path, environ=env)
    section = cfg.section("export_diff")
    assert isinstance(section, ExportDiffSection)
    assert (section.num_samples, section.seed, section.tolerances) == (5, 7, {"layer1.*": (1e-3, 1e-4)})
    assert cfg.preprocess.samples == "/abs/imgs"  # the environment's absolute path, not rebased
    assert cfg.section("triton").url == "grpc://127.0.0.1:8001"


def test_environment_errors_name_the_variable(tmp_path):
    with pytest.raises(ConfigError, match="environment GAPCHECK_EXPORT_DIFF__NUM_SAMPLES: export_diff.num_samples"):
        load_config(start=tmp_path, environ={"GAPCHECK_EXPORT_DIFF__NUM_SAMPLES": "many"})


def test_registered_sections_validate_and_others_stay_raw(tmp_path):
    class Demo(Section):
        level: int = 1

    register_section("demo_h1a", Demo)
    register_section("demo_h1a", Demo)  # idempotent for the same model
    path = tmp_path / "gapcheck.toml"
    path.write_text("[demo_h1a]\nlevel = 3\n")
    cfg = load_config(path)
    assert cfg.section("demo_h1a") == Demo(level=3) and cfg.section("later") is None
    path.write_text("[demo_h1a]\nlevel = 3\n[later]\nx = 1\n")
    with pytest.raises(ConfigError, match=r"unknown section \[later\]"):  # read by nothing: never silently ignored
        load_config(path)
    with pytest.raises(RuntimeError, match="registered twice"):
        register_section("demo_h1a", type("Other", (Section,), {}))
    path.write_text("[demo_h1a]\nlevel = 'high'\n")
    with pytest.raises(ConfigError, match="demo_h1a.level"):
        load_config(path)


def test_lazy_section_table_imports_nothing_heavy():
    code = ("import sys; from gapcheck.config import load_config, SECTION_MODELS; "
            "[__import__(m.split(':')[0]) for m in SECTION_MODELS.values()]; "
            "print(sorted(m for m in ('torch', 'numpy', 'onnxruntime') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_explicit_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml")


def test_errors_never_echo_credential_values(tmp_path):
    """A header, token or webhook value of the wrong type is named by key, never shown (it may be a secret)."""
    path = tmp_path / "gapcheck.toml"
    path.write_text('[nightly]\ngolden = "g"\nwebhook = ["https://hooks.example.com/services/T/B/SECRET123"]\n'
                    '[[nightly.endpoints]]\nname = "prod"\nurl = "http://127.0.0.1:1/m"\n'
                    'headers = { triton-access-token = 987654321012345 }\n')
    with pytest.raises(ConfigError) as raised:
        load_config(path).section("nightly")
    text = str(raised.value)
    assert "triton-access-token" in text and "webhook" in text, text
    assert "987654321012345" not in text and "SECRET123" not in text, text
    with pytest.raises(ConfigError) as raised:
        load_config(start=tmp_path / "none", environ={"GAPCHECK_NIGHTLY__WEBHOOK": "12345678901234"}).section("nightly")
    assert "GAPCHECK_NIGHTLY__WEBHOOK" in str(raised.value) and "12345678901234" not in str(raised.value)


# issue 23 attacker #3: a hostile config is a config error (exit 2, one line naming the file), never exit 3
_DEEP = "x = " + "[" * 5000 + "]" * 5000 + "\n"


@pytest.mark.parametrize("name,text", [
    ("gapcheck.toml", _DEEP),
    ("pyproject.toml", "[tool.gapcheck]\n" + _DEEP),
])
def test_a_deeply_nested_config_is_a_config_error(tmp_path, monkeypatch, name, text, capsys):
    from gapcheck.cli.app import main

    (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=name):
        load_config(start=tmp_path)
    assert main(["history", "--history", str(tmp_path / "h.sqlite")]) == 2
    err = capsys.readouterr().err
    assert name in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2


def test_someone_elses_deep_pyproject_is_not_our_config(tmp_path):
    (tmp_path / "pyproject.toml").write_text(_DEEP)
    assert load_config(start=tmp_path).source is None


def test_a_huge_config_is_refused_unread(tmp_path, monkeypatch):
    import gapcheck.config as config

    monkeypatch.setattr(config, "MAX_CONFIG_BYTES", 100)
    (tmp_path / "gapcheck.toml").write_text("# " + "x" * 200 + "\n")
    with pytest.raises(ConfigError, match="larger than"):
        load_config(tmp_path / "gapcheck.toml")


def test_a_deeply_nested_environment_value_is_a_config_error():
    with pytest.raises(ConfigError, match="GAPCHECK_CACHE__DIR"):
        load_config(start=None, environ={"GAPCHECK_CACHE__DIR": "[" * 5000 + "]" * 5000})


def test_preprocess_paths_from_the_file_are_relative_to_it_from_the_environment_to_the_working_folder(tmp_path):
    """[preprocess] is resolved by the preprocess library (config.py builds no stages: tests/test_layers.py)."""
    path = tmp_path / "cfg" / "gapcheck.toml"
    path.parent.mkdir()
    path.write_text("[preprocess]\nsamples = 'imgs'\n[preprocess.stages.a]\ncallable = 'st.py:fn'\n"
                    "[preprocess.stages.b]\ncallable = 'pkg.mod:fn'\n")
    resolved = load_config(path, environ={}).preprocess
    assert resolved.samples == str(tmp_path / "cfg" / "imgs")
    assert [s.target for s in resolved.stages] == [f"{tmp_path / 'cfg' / 'st.py'}:fn", "pkg.mod:fn"]
    env = {"GAPCHECK_PREPROCESS__SAMPLES": "imgs", "GAPCHECK_PREPROCESS__STAGES__A__CALLABLE": "other.py:fn"}
    resolved = load_config(path, environ=env).preprocess
    assert resolved.samples == "imgs" and resolved.stages[0].target == "other.py:fn"  # as a flag would be


# --- unknown sections and keys (issue 18 review D4/D5) -----------------------------------------------------------------
def _sections_read_by_the_code() -> set[str]:
    """Every section name the code reads, found in the source (not listed by hand): ``declare(..., section="x")``,
    a group's ``SECTION = "x"``, ``.section("x")``, ``register_section("x", ...)``, ``sections.get("x")``."""
    import ast
    from pathlib import Path

    import gapcheck

    names: set[str] = set()
    for path in Path(gapcheck.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                names |= {k.value.value for k in node.keywords if k.arg == "section" and isinstance(k.value, ast.Constant)
                          and isinstance(k.value.value, str)}
                called = getattr(node.func, "attr", getattr(node.func, "id", ""))
                if called in ("section", "register_section", "get") and node.args and isinstance(
                        node.args[0], ast.Constant) and isinstance(node.args[0].value, str) and (
                        called != "get" or getattr(getattr(node.func, "value", None), "attr", "") == "sections"):
                    names.add(node.args[0].value)
            elif isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "SECTION" and isinstance(
                    node.value, ast.Constant) and isinstance(node.value.value, str):
                names.add(node.value.value)
    return {name for name in names if name.isidentifier()}  # not terminalreporter.section("a heading")


def test_every_section_the_code_reads_is_accepted_in_both_files(tmp_path):
    from gapcheck.config import SECTION_MODELS, known_sections

    read = _sections_read_by_the_code()
    assert {"export_diff", "triton", "engine", "cache", "remote", "nightly", "leakage", "drift", "golden",
            "precision", "preprocess", "lint"} <= read  # the scan finds them (it would pass vacuously otherwise)
    assert read | set(SECTION_MODELS) <= set(known_sections())
    for name in sorted(read | set(known_sections())):
        (tmp_path / "gapcheck.toml").write_text(f"[{name}]\n")
        assert name in load_config(tmp_path / "gapcheck.toml", environ={}).validated
        (tmp_path / "pyproject.toml").write_text(f"[tool.gapcheck.{name}]\n")
        assert name in load_config(tmp_path / "pyproject.toml", environ={}).validated


@pytest.mark.parametrize("text, env, message", [
    ("[export_dif]\nrtol = 1\n", {}, "unknown section [export_dif]; did you mean [export_diff]?"),
    ("[tool.gapcheck.tritonn]\nurl = 'x'\n", {}, "unknown section [tritonn]; did you mean [triton]?"),
    ("", {"GAPCHECK_EXPORT_DIF__RTOL": "1"},
     "environment GAPCHECK_EXPORT_DIF__RTOL: unknown section [export_dif]; did you mean [export_diff]?"),
    ("[zzzz]\n", {}, "unknown section [zzzz]; known sections: cache, "),
])
def test_an_unknown_section_is_refused_naming_it_and_the_close_name(tmp_path, text, env, message):
    path = tmp_path / ("pyproject.toml" if "tool.gapcheck" in text else "gapcheck.toml")
    path.write_text(text or "[export_diff]\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ=env)
    assert message in str(info.value)


def test_the_cli_exits_2_on_an_unknown_section(tmp_path, capsys):
    from gapcheck.cli.app import main

    ref = tmp_path / "r.csv"
    ref.write_text("x\n1\n2\n")
    (tmp_path / "g.toml").write_text("[export_dif]\nrtol = 1\n")
    assert main(["drift", "--reference", str(ref), "--current", str(ref), "--config", str(tmp_path / "g.toml")]) == 2
    assert "[export_dif]" in capsys.readouterr().err


def test_an_unknown_key_from_the_environment_names_the_variable(tmp_path):
    path = tmp_path / "gapcheck.toml"
    path.write_text("[triton]\nbad_file_key = 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={"GAPCHECK_TRITON__URLL": "x", "GAPCHECK_TRITON__SSL__DEEP": "1"})
    text = str(info.value)
    assert "environment GAPCHECK_TRITON__URLL: unknown key(s) in [triton]: urll" in text
    assert "environment GAPCHECK_TRITON__SSL__DEEP:" in text  # a table where a value goes, from the environment
    assert f"{path}: unknown key(s) in [triton]: bad_file_key" in text


@pytest.mark.parametrize("pair", ["[nan, 1e-4]", "[1e-3, inf]", "[-1, 0]"])
def test_a_bad_tolerance_pair_names_the_config_key(tmp_path, pair):
    path = tmp_path / "gapcheck.toml"
    path.write_text(f"[golden]\ntolerances = {{'out.*' = {pair}}}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert "golden.tolerances.out.*" in str(info.value) and "--tolerance" not in str(info.value)

"""Third attacker pass (issues 17, 18, 23): hostile values the groups, the Triton URL parser and the cache command own.
Each case failed before its fix (a crash into exit 3, a gap for a typo, a foreign file deleted, raw escapes printed)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gapcheck.cli.app import main
from gapcheck.errors import UsageError
from gapcheck.groups import TritonTarget
from gapcheck.triton.url import parse_endpoint_url

pytestmark = pytest.mark.usefixtures("isolated_cache")  # tests/cli/conftest.py

KEY = "a" * 64


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/m?version=\u00b2", "http://127.0.0.1:\u00b2/m",
                                 f"http://127.0.0.1:8000/m?version={'9' * 5000}", f"http://127.0.0.1:{'9' * 5000}/m",
                                 "http://127.0.0.1:8000/v2/models/m/versions/\u00b2", "http://127.0.0.1:8000/m?version=0"])
def test_url_numbers_python_would_not_parse_are_a_usage_error(url):
    # '²'.isdigit() is True and int('²') raises ValueError; int() refuses over 4300 digits: both were exit 3 crashes
    with pytest.raises(UsageError) as caught:
        parse_endpoint_url(url)
    assert len(str(caught.value)) < 200


@pytest.mark.parametrize("version", ["abc", "-1", "0", "1\x1b[31m", "9" * 5000, "\u00b2", ""])
def test_a_triton_version_that_is_not_a_version_number_is_refused_not_reported_as_stale(version):
    with pytest.raises(UsageError, match="--triton-version"):
        TritonTarget(url="http://127.0.0.1:1", model="m", version=version)


def test_a_triton_version_is_normalized_as_the_urls_is():
    assert TritonTarget(url="http://127.0.0.1:1", model="m", version="007").version == "7"
    assert parse_endpoint_url("http://127.0.0.1:1/m?version=007").version == "7"


@pytest.mark.parametrize("argv", [["triton-audit", "--triton-url", "http://127.0.0.1:1/m?version=\u00b2"],
                                  ["triton-audit", "--triton-url", "http://127.0.0.1:1", "--triton-model", "m",
                                   "--triton-version", "latest"],
                                  ["nightly", "--golden", "g", "--endpoint", "a=http://127.0.0.1:1/m?version=\u00b2",
                                   "--history", "h.sqlite"]])
def test_the_commands_refuse_those_numbers_with_exit_2(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    onnx = ["--onnx", str(tmp_path / "none.onnx")] if argv[0] == "triton-audit" else []
    assert main([*argv, *onnx]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "ValueError" not in err and not (tmp_path / "h.sqlite").exists()


def _entry(folder, key: str = KEY) -> None:
    (folder / f"{key}.onnx").write_bytes(b"model")
    (folder / f"{key}.json").write_text(json.dumps({"exporter": "dynamo", "warnings": []}))


@pytest.mark.parametrize("command", ["prune", "clear"])
def test_the_cache_command_never_deletes_a_users_hash_named_models(command, tmp_path, capsys):
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / f"{'b' * 64}.onnx").write_bytes(b"a user's model, named by its sha256")
    (folder / "base.onnx").write_bytes(b"another")
    _entry(folder)  # one real entry: the folder was once used as a cache too
    assert main(["cache", command, "--cache-dir", str(folder), "--cache-max-mb", "1"]) == 2
    assert "nothing removed" in capsys.readouterr().err
    assert sorted(os.listdir(folder)) == sorted([f"{'b' * 64}.onnx", "base.onnx", f"{KEY}.onnx", f"{KEY}.json"])


@pytest.mark.parametrize("plant", ["only_hash_named_models", "foreign_json", "directory", "fifo", "symlink"])
def test_the_cache_command_refuses_entry_named_files_that_are_not_the_caches(plant, tmp_path, capsys):
    folder = tmp_path / "cache"
    folder.mkdir()
    if plant == "only_hash_named_models":
        (folder / f"{KEY}.onnx").write_bytes(b"model")
    elif plant == "foreign_json":
        (folder / f"{KEY}.onnx").write_bytes(b"model")
        (folder / f"{KEY}.json").write_text('{"not": "ours"}')
    elif plant == "directory":  # was IsADirectoryError, exit 3, after removing the entry's .json
        (folder / f"{KEY}.onnx").mkdir()
        (folder / f"{KEY}.json").write_text(json.dumps({"exporter": "dynamo"}))
    elif plant == "fifo":
        os.mkfifo(folder / f"{KEY}.json")
        (folder / f"{KEY}.onnx").write_bytes(b"model")
    else:
        (tmp_path / "precious.onnx").write_bytes(b"x")
        (folder / f"{KEY}.onnx").symlink_to(tmp_path / "precious.onnx")
        (folder / f"{KEY}.json").write_text(json.dumps({"exporter": "dynamo"}))
    before = sorted(os.listdir(folder))
    assert main(["cache", "clear", "--cache-dir", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "does not look like a gapcheck export cache" in err and "Traceback" not in err
    assert sorted(os.listdir(folder)) == before


def test_the_cache_command_still_empties_a_real_cache_with_a_config_beside_it(tmp_path, capsys):
    folder = tmp_path / "cache"
    folder.mkdir()
    _entry(folder)
    _entry(folder, "c" * 64)
    (folder / "gapcheck.toml").write_text("[cache]\n")
    assert main(["cache", "clear", "--cache-dir", str(folder)]) == 0
    assert "removed 2 entries" in capsys.readouterr().out and os.listdir(folder) == ["gapcheck.toml"]


def test_the_cache_folder_is_printed_without_terminal_escapes(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GAPCHECK_CACHE_DIR", str(tmp_path / "a\x1b]0;pwn\x07b"))
    assert main(["cache", "info"]) == 0
    assert main(["cache", "clear"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\\x1b" in out


def test_an_error_quoting_a_huge_value_stays_readable(tmp_path, capsys):
    # the output map echoes its pair: a 100k-character value was printed whole (100 kB on one line)
    huge = "y=" + "a" * 100_000
    assert main(["triton-audit", "--onnx", str(tmp_path / "none.onnx"), "--triton-url", "http://127.0.0.1:1",
                 "--triton-model", "m", "--triton-header", "x-a:b", "--protocol", "ftp" + "a" * 100_000]) == 2
    assert main(["export-diff", "--onnx", str(tmp_path / "none.onnx"), "--triton-output-map", "=" + huge]) == 2
    err = capsys.readouterr().err
    assert len(err) < 6000 and "characters not shown" in err


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal", ".lock"])
def test_a_report_never_replaces_a_historys_companion_files(suffix, tmp_path, capsys):
    # history --json h.sqlite-wal wrote the report over the write-ahead log (the last nights' rows)
    history = tmp_path / "h.sqlite"
    import sqlite3

    with sqlite3.connect(history) as db:
        db.execute("create table t (x)")
    companion = tmp_path / f"h.sqlite{suffix}"
    companion.write_bytes(b"log")
    assert main(["history", "--history", str(history), "--json", str(companion)]) == 2
    assert "goes with --history" in capsys.readouterr().err and companion.read_bytes() == b"log"
    assert main(["nightly", "--golden", str(tmp_path / "g"), "--endpoint", "a=grpc://127.0.0.1:1/m", "--history",
                 str(history), "--html", str(companion)]) == 2
    assert companion.read_bytes() == b"log"


@pytest.mark.parametrize("model", ["", "  "])
def test_an_empty_triton_model_name_is_a_usage_error_not_a_not_ready_gap(model, tmp_path, capsys, monkeypatch):
    with pytest.raises(UsageError, match="--triton-model is empty"):
        TritonTarget(url="http://127.0.0.1:1", model=model)
    monkeypatch.setenv("GAPCHECK_TRITON__MODEL", model)
    assert main(["triton-audit", "--onnx", str(tmp_path / "none.onnx"), "--triton-url", "http://127.0.0.1:1"]) == 2
    assert "--triton-model is empty" in capsys.readouterr().err


FACTORY_SOURCE = "tests/nightly/models.py"


@pytest.mark.parametrize("command", [["precision"], ["export-diff", "--no-progress"]])
@pytest.mark.parametrize("victim", ["factory", "config"])
def test_the_fixed_model_never_replaces_the_factory_source_or_the_config(command, victim, tmp_path, capsys, no_model):
    # precision --fix net.py (the --model file) wrote the ONNX model over the user's source, exit 0; --config too
    factory = tmp_path / "net.py"
    factory.write_text(Path(FACTORY_SOURCE).read_text())
    config = tmp_path / "gapcheck.toml"
    config.write_text("[precision]\n")
    target = factory if victim == "factory" else config
    before = target.read_bytes()
    code = main([*command, "--model", f"{factory}:build_tiny", "--input", "x:1x3x8x8:float32", "--precision", "fp16",
                 "--fix", str(target), "--config", str(config)])
    assert code == 2 and "an output never replaces" in capsys.readouterr().err
    assert target.read_bytes() == before


@pytest.mark.parametrize("header", ["content-length:99", "Host:evil.example", "Transfer-Encoding:chunked",
                                    "connection:close", "grpc-timeout:1S", "x-token:" + "v" * 20000])
@pytest.mark.parametrize("command", ["triton-audit", "nightly"])
def test_headers_the_client_sets_itself_or_too_long_are_refused_up_front(header, command, tmp_path, capsys):
    # --triton-header content-length:99 made every GET wait for a body until the deadline (over 2 minutes)
    argv = (["triton-audit", "--onnx", str(tmp_path / "m.onnx"), "--triton-url", "http://127.0.0.1:1",
             "--triton-model", "m"] if command == "triton-audit" else
            ["nightly", "--golden", str(tmp_path / "g"), "--endpoint", "a=grpc://127.0.0.1:1/m", "--history",
             str(tmp_path / "h.sqlite")])
    assert main([*argv, "--triton-header", header]) == 2
    err = capsys.readouterr().err
    assert "--triton-header #1" in err and "v" * 100 not in err and not (tmp_path / "h.sqlite").exists()


def test_an_empty_path_in_the_config_or_environment_is_refused_not_read_as_the_current_folder(tmp_path, capsys,
                                                                                           monkeypatch):
    # [cache] dir = "" made the current folder the export cache (entries written and pruned there)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gapcheck.toml").write_text('[cache]\ndir = ""\n')
    assert main(["cache", "info"]) == 2
    assert "empty path" in capsys.readouterr().err
    (tmp_path / "gapcheck.toml").unlink()
    monkeypatch.setenv("GAPCHECK_CACHE__DIR", "")
    assert main(["cache", "clear"]) == 2
    assert "empty path" in capsys.readouterr().err

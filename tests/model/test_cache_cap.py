"""The export cache's size cap: least recently used entries go first, entries removed by another process are misses,
only entry files are ever removed, and `gapcheck cache info|prune|clear` shows and trims the folder."""
from __future__ import annotations

import os
import time

import onnx
import onnx.helper as oh
import pytest

from gapcheck.cli.app import main
from gapcheck.model import cache
from gapcheck.model.export import ExportResult


def _result(width: int) -> ExportResult:
    """A small valid ONNX model whose size grows with ``width`` (an initializer of that many floats)."""
    weight = oh.make_tensor("w", onnx.TensorProto.FLOAT, [width], [0.5] * width)
    graph = oh.make_graph([oh.make_node("Add", ["x", "w"], ["y"])], "g",
                          [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [width])],
                          [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [width])], [weight])
    return ExportResult(oh.make_model(graph), "torchscript", None, 1.0)


def _key(i: int) -> str:
    return f"{i:064x}"


def _age(folder, key: str, seconds_ago: float) -> None:
    stamp = time.time() - seconds_ago
    os.utime(folder / f"{key}.json", (stamp, stamp))


def test_the_least_recently_used_entries_go_when_the_cap_is_reached(tmp_path):
    size = len(_result(1000).model.SerializeToString())
    cap = int(size * 3.5)  # room for three entries
    for i in range(3):
        assert cache.store(tmp_path, _key(i), _result(1000), max_bytes=cap)
        _age(tmp_path, _key(i), 100 - i)  # 0 is the oldest
    assert cache.load_cached(tmp_path, _key(0)) is not None  # a hit makes 0 the most recently used
    assert cache.store(tmp_path, _key(3), _result(1000), max_bytes=cap)
    kept = {e.key for e in cache.entries(tmp_path)[0]}
    assert kept == {_key(0), _key(2), _key(3)}  # 1 was the least recently used
    assert cache.info(tmp_path, cap).bytes <= cap


def test_an_entry_bigger_than_the_cap_is_not_stored(tmp_path):
    assert not cache.store(tmp_path, _key(1), _result(10_000), max_bytes=1000)
    assert cache.entries(tmp_path) == ([], [])


def test_entries_removed_by_another_process_are_misses(tmp_path, monkeypatch):
    assert cache.store(tmp_path, _key(1), _result(10), max_bytes=10**6)
    (tmp_path / f"{_key(1)}.onnx").unlink()  # another process pruned it between our listing and our read
    assert cache.load_cached(tmp_path, _key(1)) is None
    # a listing that races with a removal skips what vanished
    assert cache.store(tmp_path, _key(2), _result(10), max_bytes=10**6)
    real_size = cache._size

    def vanishing(path):
        if path.name.startswith(_key(2)):
            path.unlink(missing_ok=True)
        return real_size(path)
    monkeypatch.setattr(cache, "_size", vanishing)
    found, _ = cache.entries(tmp_path)
    assert _key(2) not in {e.key for e in found}
    assert cache.prune(tmp_path, 0) is not None  # never raises on vanished files


def test_prune_and_clear_touch_only_entry_files(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    cache.store(tmp_path, _key(1), _result(10), max_bytes=10**6)
    (tmp_path / f"{_key(2)}.onnx").write_bytes(b"half")  # an entry whose writer died before its .json
    stamp = time.time() - 2 * cache._ORPHAN_S
    os.utime(tmp_path / f"{_key(2)}.onnx", (stamp, stamp))
    removed, _ = cache.clear(tmp_path)
    assert removed == 1 and sorted(os.listdir(tmp_path)) == ["notes.txt"]


def test_the_cache_command(tmp_path, capsys):
    for i in range(3):
        cache.store(tmp_path, _key(i), _result(1000), max_bytes=10**6)
    assert main(["cache", "info", "--cache-dir", str(tmp_path)]) == 0
    assert "entries     3" in capsys.readouterr().out
    assert main(["cache", "prune", "--cache-dir", str(tmp_path), "--cache-max-mb", "1"]) == 0
    assert len(cache.entries(tmp_path)[0]) == 3  # they fit in 1 MB
    config = tmp_path / "gapcheck.toml"
    config.write_text(f'[cache]\ndir = "{tmp_path}"\n')
    assert main(["cache", "clear", "--config", str(config)]) == 0
    assert "removed 3 entries" in capsys.readouterr().out and cache.entries(tmp_path) == ([], [])
    assert main(["cache", "prune", "--cache-dir", str(tmp_path), "--cache-max-mb", "0"]) == 2  # a cap of 0 MB


@pytest.mark.parametrize("value", ["nan", "-1"])
def test_the_cap_from_the_config_is_validated(tmp_path, value, capsys):
    config = tmp_path / "gapcheck.toml"
    config.write_text(f"[cache]\nmax_mb = {value}\n")
    assert main(["cache", "info", "--config", str(config)]) == 2


def test_a_users_model_named_by_its_hash_survives_a_store(tmp_path):
    """issue 23 (attacker #1): the trim after a store deleted any <sha256>.onnx without its .json, however old."""
    mine = tmp_path / f"{_key(7)}.onnx"
    mine.write_bytes(b"my model")
    stamp = time.time() - 10 * cache._ORPHAN_S
    os.utime(mine, (stamp, stamp))
    assert cache.store(tmp_path, _key(1), _result(10), max_bytes=10**6)
    assert cache.prune(tmp_path, 10**6, orphans=False) == (0, 0)
    assert mine.read_bytes() == b"my model"


def test_a_young_orphan_is_another_writers_entry_and_stays(tmp_path):
    cache.store(tmp_path, _key(1), _result(10), max_bytes=10**6)
    (tmp_path / f"{_key(2)}.onnx").write_bytes(b"being written")  # its .json comes a moment later
    cache.clear(tmp_path)
    assert (tmp_path / f"{_key(2)}.onnx").exists()


def test_an_entry_whose_json_is_not_gapchecks_is_never_evicted(tmp_path):
    (tmp_path / f"{_key(3)}.onnx").write_bytes(b"x" * 5000)
    (tmp_path / f"{_key(3)}.json").write_text('{"mine": true}')
    (tmp_path / f"{_key(4)}.onnx").write_bytes(b"x" * 5000)
    (tmp_path / f"{_key(4)}.json").write_text(f'{{"exporter": "dynamo", "key": "{_key(5)}"}}')  # another key's
    assert cache.clear(tmp_path) == (0, 0)
    assert len(os.listdir(tmp_path)) == 4
    cache.store(tmp_path, _key(1), _result(10), max_bytes=10**6)
    cache.prune(tmp_path, 0)  # over the cap: only gapcheck's own entry may go
    assert (tmp_path / f"{_key(3)}.onnx").exists() and (tmp_path / f"{_key(4)}.onnx").exists()


def test_a_folder_named_like_an_entry_is_refused_before_work(tmp_path):
    from gapcheck.errors import ExitCode, UsageError

    (tmp_path / f"{_key(1)}.onnx").mkdir()
    with pytest.raises(UsageError) as caught:
        cache.ExportCache(tmp_path)
    assert caught.value.exit_code == ExitCode.USAGE and "not a regular file" in str(caught.value)
    file_not_folder = tmp_path / "file"
    file_not_folder.write_text("x")
    with pytest.raises(UsageError):
        cache.ExportCache(file_not_folder)


@pytest.mark.parametrize("command", ["info", "prune", "clear"])
@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_regular_file_as_the_cache_folder_is_refused_by_every_subcommand(tmp_path, command, how, monkeypatch, capsys):
    """`cache info` said "entries 0" (exit 0) for a regular file where prune/clear/golden record refused it."""
    path = tmp_path / "not-a-folder"
    path.write_text("mine")
    args = ["cache", command]
    if how == "flag":
        args += ["--cache-dir", str(path)]
    else:
        monkeypatch.setenv("GAPCHECK_CACHE_DIR", str(path))
    assert main(args) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert path.read_text() == "mine"

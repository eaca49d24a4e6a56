"""The export cache checks an entry before using it (issue 23): a truncated entry, another model's valid ONNX in its
place, a symbolic link, a description holding garbage, or another user's file in a folder others can write to are
misses with one warning line, never a crash and never a foreign model used; the export then runs again and replaces
the entry."""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest

from gapcheck import reading
from gapcheck.model import cache
from gapcheck.model.export import ExportResult
from gapcheck.reading import ReadRefused, Refusal

KEY = "ab" * 32


def _result(value: float = 0.5, width: int = 64) -> ExportResult:
    weight = oh.make_tensor("w", onnx.TensorProto.FLOAT, [width], [value] * width)
    graph = oh.make_graph([oh.make_node("Add", ["x", "w"], ["y"])], "g",
                          [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [width])],
                          [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [width])], [weight])
    return ExportResult(oh.make_model(graph), "torchscript", None, 1.0, ("a warning",))


def _weight(result: ExportResult) -> float:
    return float(onnx.numpy_helper.to_array(result.model.graph.initializer[0])[0])


@pytest.fixture
def stored(tmp_path):
    assert cache.store(tmp_path, KEY, _result())
    return tmp_path


def _refused(folder, caplog, reason: str) -> None:
    with caplog.at_level(logging.INFO, logger="gapcheck.model.cache"):
        assert cache.load_cached(folder, KEY) is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and reason in warnings[0] and "exporting again" in warnings[0], warnings
    assert cache.store(folder, KEY, _result())  # the caller's new export replaces the entry ...
    hit = cache.load_cached(folder, KEY)
    assert hit is not None and hit.cached and _weight(hit) == 0.5  # ... and the next run uses it


def test_an_intact_entry_is_a_hit_with_its_digest_stored(stored):
    meta = json.loads((stored / f"{KEY}.json").read_text())
    data = (stored / f"{KEY}.onnx").read_bytes()
    import hashlib

    assert meta["onnx_sha256"] == hashlib.sha256(data).hexdigest() and meta["onnx_bytes"] == len(data)
    hit = cache.load_cached(stored, KEY)
    assert hit is not None and hit.cached and hit.warnings == ("a warning",) and _weight(hit) == 0.5


def test_a_truncated_entry_is_a_miss(stored, caplog):
    path = stored / f"{KEY}.onnx"
    path.write_bytes(path.read_bytes()[:100])
    _refused(stored, caplog, "bytes, ")


def test_an_entry_changed_in_place_is_a_miss(stored, caplog):
    path = stored / f"{KEY}.onnx"
    data = bytearray(path.read_bytes())
    data[-20] ^= 0xFF
    path.write_bytes(bytes(data))
    _refused(stored, caplog, "does not match the SHA256")


@pytest.mark.parametrize("width", [64, 80], ids=["same-size", "other-size"])
def test_another_models_valid_onnx_in_its_place_is_a_miss(stored, caplog, width):
    other = _result(0.25, width).model.SerializeToString()
    (stored / f"{KEY}.onnx").write_bytes(other)
    onnx.checker.check_model(onnx.load(str(stored / f"{KEY}.onnx")))  # a valid model, only not this entry's
    _refused(stored, caplog, "does not match the SHA256" if width == 64 else "bytes, ")


@pytest.mark.parametrize("member", ["onnx", "json"])
def test_a_symlinked_entry_is_a_miss_even_to_the_right_bytes(stored, caplog, tmp_path_factory, member):
    elsewhere = tmp_path_factory.mktemp("elsewhere") / f"target.{member}"
    path = stored / f"{KEY}.{member}"
    os.replace(path, elsewhere)
    path.symlink_to(elsewhere)
    cache.ExportCache(stored)  # a planted link does not stop the run (exit 2) ...
    _refused(stored, caplog, "symbolic link")  # ... it is a miss, and replaced
    assert not path.is_symlink() and elsewhere.exists()  # replaced the link, never wrote through it


GARBAGE = [b"\x00\xff" * 100, b"[]", b"[" * 100_000, b"{}", b'{"exporter": 1}', b" " * 70_000,
           json.dumps({"key": "cd" * 32, "exporter": "dynamo", "onnx_sha256": "0" * 64, "onnx_bytes": 10}).encode(),
           json.dumps({"key": KEY, "exporter": "dynamo", "onnx_sha256": "XYZ", "onnx_bytes": 10}).encode(),
           b'{"key": "' + KEY.encode() + b'", "exporter": "d", "onnx_sha256": "' + b"0" * 64 + b'", "onnx_bytes": 1e309}',
           json.dumps({"key": KEY, "exporter": "dynamo", "onnx_sha256": "0" * 64, "onnx_bytes": True}).encode(),
           json.dumps({"key": KEY, "exporter": "dynamo", "onnx_sha256": "0" * 64, "onnx_bytes": -1}).encode()]


@pytest.mark.parametrize("garbage", GARBAGE, ids=range(len(GARBAGE)))
def test_a_description_holding_garbage_is_a_miss(stored, caplog, garbage):
    (stored / f"{KEY}.json").write_bytes(garbage)
    _refused(stored, caplog, "its .json")


def test_a_description_with_odd_optional_fields_still_loads(stored):
    meta = json.loads((stored / f"{KEY}.json").read_text())
    meta.update(warnings="not a list", fallback_reason=3, batch_baked="yes")
    (stored / f"{KEY}.json").write_text(json.dumps(meta))
    hit = cache.load_cached(stored, KEY)
    assert hit is not None and hit.warnings == () and hit.fallback_reason == "3" and hit.batch_baked is False


def test_an_entry_of_an_earlier_version_is_exported_again_quietly(stored, caplog):
    meta = json.loads((stored / f"{KEY}.json").read_text())
    for name in ("onnx_sha256", "onnx_bytes", "key"):
        del meta[name]
    (stored / f"{KEY}.json").write_text(json.dumps(meta))
    with caplog.at_level(logging.INFO, logger="gapcheck.model.cache"):
        assert cache.load_cached(stored, KEY) is None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("earlier gapcheck" in r.getMessage() for r in caplog.records)


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX owners")
def test_another_users_entry_is_used_only_where_nobody_else_can_write(stored, caplog, monkeypatch):
    owner = os.stat(stored).st_uid
    monkeypatch.setattr(cache.os, "getuid", lambda: owner + 4242)  # we are now another user than the files' owner
    os.chmod(stored, 0o755)  # only the folder's owner writes here: its files are the owner's cache, used
    assert cache.load_cached(stored, KEY) is not None
    os.chmod(stored, 0o777)  # anyone could have planted them: refused
    with caplog.at_level(logging.WARNING, logger="gapcheck.model.cache"):
        assert cache.load_cached(stored, KEY) is None
    assert "belongs to another user" in caplog.text
    os.chmod(stored, 0o700)


def test_a_refused_entry_is_exported_again_through_the_one_export_path(tmp_path, caplog):
    """End to end: ExportSpec.obtain with a swapped entry warns once, exports, and the entry is the right model."""
    import torch

    from gapcheck.groups.export import ExportSpec
    from gapcheck.model.cache import ExportCache

    torch.manual_seed(0)
    module, sample = torch.nn.Linear(4, 2).eval(), {"x": np.ones((1, 4), np.float32)}
    spec, store = ExportSpec(exporter="torchscript"), ExportCache(tmp_path)
    first, _ = spec.obtain(module, sample, cache=store)
    (entry,) = tmp_path.glob("*.onnx")
    entry.write_bytes(_result(0.25).model.SerializeToString())  # a foreign model under this key
    with caplog.at_level(logging.WARNING, logger="gapcheck.model.cache"):
        second, _ = spec.obtain(module, sample, cache=store)
    assert not second.cached and len(caplog.records) == 1
    third, _ = spec.obtain(module, sample, cache=store)
    assert third.cached and third.model.SerializeToString() == first.model.SerializeToString()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs")
def test_a_fifo_named_like_an_entry_never_blocks_the_read(stored, caplog):
    path = stored / f"{KEY}.onnx"
    path.unlink()
    os.mkfifo(path)  # reading it would wait forever for a writer
    with caplog.at_level(logging.WARNING, logger="gapcheck.model.cache"):
        assert cache.load_cached(stored, KEY) is None
    assert "not a regular file" in caplog.text


def test_an_entry_caught_while_another_process_stores_it_is_read_again(stored, caplog, monkeypatch):
    """A writer replaces the .onnx first and the .json last: a reader in between sees a digest mismatch once, looks
    again, and takes the new entry without a warning."""
    newer = _result(0.25)
    (stored / f"{KEY}.onnx").write_bytes(newer.model.SerializeToString())  # the writer's first rename
    monkeypatch.setattr(cache.time, "sleep", lambda seconds: cache.store(stored, KEY, newer))  # ... and its last
    with caplog.at_level(logging.WARNING, logger="gapcheck.model.cache"):
        hit = cache.load_cached(stored, KEY)
    assert hit is not None and _weight(hit) == 0.25 and not caplog.records


@pytest.mark.parametrize("reason", list(Refusal), ids=lambda r: r.name)
def test_every_refusal_of_an_entry_file_is_worded_by_the_cache(reason):
    """gapcheck.reading says why a file was refused; the cache words each reason itself (a new one fails here)."""
    refused = cache._untrusted(Path("k.onnx"), ReadRefused(reason, size=10, uid=7, expected=12, limit=5))
    assert str(refused).startswith("its .onnx ") and refused.changing is (reason is Refusal.SIZE)


@pytest.mark.parametrize("change,said", [(b"more", "grew while read"), (None, "cut short while read")])
def test_an_entry_that_changes_while_read_is_a_miss(stored, caplog, monkeypatch, change, said):
    """The .onnx changes between the size check on its descriptor and the read: caught by the read itself."""
    path = stored / f"{KEY}.onnx"
    real = reading.read_exact

    def changing(fd: int, size: int) -> bytearray:
        if os.fstat(fd).st_ino == path.stat().st_ino:  # the model, not the .json
            if change is None:
                os.truncate(path, size // 2)
            else:
                with path.open("ab") as handle:
                    handle.write(change)
        return real(fd, size)

    monkeypatch.setattr(reading, "read_exact", changing)
    with caplog.at_level(logging.WARNING, logger="gapcheck.model.cache"):
        assert cache.load_cached(stored, KEY) is None
    assert len(caplog.records) == 1 and said in caplog.text and "exporting again" in caplog.text

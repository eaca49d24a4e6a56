"""How a bundle's files are read (issue 23, item 14: nightly's end-to-end speed).

The tensors are parsed from the very bytes that are hashed, without a copy (a strict safetensors reader checking
what the format's own reader checks); :func:`open_bundle` opens and sizes every file at once, then reads, parses
and hashes them on a thread; the export is usable as soon as its own file matches its SHA256, the inputs (to send,
never to judge) as soon as they are read; a wrong hash always wins over anything else that is wrong.
"""
from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load, save

from gapcheck.errors import InputError
from gapcheck.golden import bundle as bundle_module
from gapcheck.golden import load_bundle
from gapcheck.golden.bundle import TensorInfo, _load_tensors, _open_member, _read_opened, open_bundle

ARRAYS = {"x": np.arange(24, dtype=np.float32).reshape(2, 3, 4), "ids": np.arange(6, dtype=np.int64).reshape(2, 3),
          "mask": np.array([[True, False], [False, True]])}
EXPECTED = (TensorInfo("x", "float32", (1, 3, 4)), TensorInfo("ids", "int64", (1, 3)), TensorInfo("mask", "bool", (1, 2)))


def _file(header: dict, body: bytes) -> bytes:
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + body


def _parts(data: bytes) -> tuple[dict, bytes]:
    length = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + length]), data[8 + length:]


def _edited(change) -> bytes:
    header, body = _parts(save(ARRAYS))
    header, body = change(header, body)
    return _file(header, body)


def _overlapping() -> bytes:
    """Two tensors of the same size on the same bytes, the data exactly as long as one of them."""
    header, body = _parts(save({"a": np.zeros(4, np.float32), "b": np.ones(4, np.float32)}))
    header["b"]["data_offsets"] = header["a"]["data_offsets"] = [0, 16]
    return _file(header, body[:16])


MALFORMED = {
    "shorter than a header": b"\x01\x00\x00",
    "header length beyond the file": (10**6).to_bytes(8, "little") + b"{}",
    "header length 2**62": (2**62).to_bytes(8, "little") + b"{}",
    "header not JSON": (8).to_bytes(8, "little") + b"{nojson}",
    "header not an object": _file([1, 2], b""),  # type: ignore[arg-type]
    "metadata not strings": _edited(lambda h, b: ({**h, "__metadata__": {"k": 1}}, b)),
    "a tensor not an object": _edited(lambda h, b: ({**h, "x": [1]}, b)),
    "unknown dtype": _edited(lambda h, b: ({**h, "x": {**h["x"], "dtype": "Q7"}}, b)),
    "negative dim": _edited(lambda h, b: ({**h, "x": {**h["x"], "shape": [-2, 3, 4]}}, b)),
    "float dim": _edited(lambda h, b: ({**h, "x": {**h["x"], "shape": [2.0, 3, 4]}}, b)),
    "shape claims more than its bytes": _edited(lambda h, b: ({**h, "x": {**h["x"], "shape": [2000, 3, 4]}}, b)),
    "offsets past the data": _edited(lambda h, b: ({**h, "x": {**h["x"], "data_offsets": [0, 10**9]}}, b)),
    "offsets reversed": _edited(lambda h, b: ({**h, "x": {**h["x"], "data_offsets": list(reversed(h["x"]["data_offsets"]))}}, b)),
    "three offsets": _edited(lambda h, b: ({**h, "x": {**h["x"], "data_offsets": [*h["x"]["data_offsets"], 0]}}, b)),
    "data cut short": _edited(lambda h, b: (h, b[:-1])),
    "data beyond the tensors": _edited(lambda h, b: (h, b + b"\0" * 8)),
    "two tensors on the same bytes": _overlapping(),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_safetensors_file_is_refused_as_safetensors_refuses_it(case: str) -> None:
    data = MALFORMED[case]
    with pytest.raises(Exception):  # noqa: B017, PT011 - the format's own reader: whatever it raises, it refuses
        load(data)
    with pytest.raises(InputError, match=r"golden bundle b: file f\.safetensors cannot be read: "):
        _load_tensors(Path("b"), "f.safetensors", bytearray(data), EXPECTED, 2)


def test_tensors_are_the_format_readers_values_as_views_of_the_bytes_read() -> None:
    data = bytearray(_edited(lambda h, b: ({**h, "__metadata__": {"format": "np"}}, b)))
    arrays = _load_tensors(Path("b"), "f.safetensors", data, EXPECTED, 2)
    reference = load(bytes(data))
    for name, array in arrays.items():
        np.testing.assert_array_equal(array, reference[name])
        assert array.dtype == reference[name].dtype and array.shape == reference[name].shape
        assert np.shares_memory(array, np.frombuffer(data, np.uint8))  # no copy: the bytes hashed are the values
        assert array.flags.writeable  # as safetensors' own arrays were


@pytest.mark.parametrize(("info", "said"), [
    (TensorInfo("x", "float64", (1, 3, 4)), "tensor 'x' is float32 [2, 3, 4], the manifest says float64 [2, 3, 4]"),
    (TensorInfo("x", "float32", (1, 12)), "tensor 'x' is float32 [2, 3, 4], the manifest says float32 [2, 12]"),
    (TensorInfo("y", "float32", (1, 3, 4)), "has no tensor 'y'"),
])
def test_a_tensor_unlike_the_manifest_is_refused(info: TensorInfo, said: str) -> None:
    with pytest.raises(InputError, match=said.replace("[", r"\[").replace("]", r"\]")):
        _load_tensors(Path("b"), "f.safetensors", bytearray(save(ARRAYS)), (info,), 2)


def test_a_file_that_grows_after_its_size_was_checked_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "f.safetensors"
    path.write_bytes(b"12345678")
    fd, size = _open_member(tmp_path, "f.safetensors", 100, 8)
    with path.open("ab") as handle:
        handle.write(b"9")
    with pytest.raises(InputError, match="f.safetensors changed while it was read"):
        _read_opened(tmp_path, "f.safetensors", fd, size)


def _copy(recorded: Path, tmp_path: Path) -> Path:
    bundle = tmp_path / "bundle"
    shutil.copytree(recorded, bundle)
    return bundle


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01  # same size, another value: only the SHA256 tells
    path.write_bytes(bytes(data))


def test_tampered_inputs_are_sent_but_the_bundle_is_refused(recorded: Path, tmp_path: Path) -> None:
    """The inputs may go out while their hash runs; the verified bundle, the only thing anything is judged on, is
    refused, and the export (its own file intact) is usable meanwhile."""
    bundle = _copy(recorded, tmp_path)
    _flip_last_byte(bundle / "inputs.safetensors")
    pending = open_bundle(bundle)
    assert pending.unverified_inputs["x"].shape[0] == pending.num_samples
    assert pending.onnx_model().graph.node
    for _ in range(2):  # the last byte is the last sample's: its recorded fingerprint tells
        with pytest.raises(InputError, match="sample 5 of inputs.safetensors does not match the fingerprint"):
            pending.result()


def test_a_tampered_export_is_refused_before_the_audit_reads_it(recorded: Path, tmp_path: Path) -> None:
    bundle = _copy(recorded, tmp_path)
    _flip_last_byte(bundle / "model.onnx")
    pending = open_bundle(bundle)
    with pytest.raises(InputError, match="file model.onnx does not match its SHA256"):
        pending.onnx_model()
    with pytest.raises(InputError, match="file model.onnx does not match its SHA256"):
        pending.result()


def test_a_wrong_hash_is_named_before_a_parse_error(recorded: Path, tmp_path: Path) -> None:
    bundle = _copy(recorded, tmp_path)
    path = bundle / "inputs.safetensors"
    path.write_bytes(b"\xff" * path.stat().st_size)  # same size: unparseable, and its hash is wrong
    pending = open_bundle(bundle)
    with pytest.raises(InputError, match="file inputs.safetensors does not match its header SHA256"):
        _ = pending.unverified_inputs
    with pytest.raises(InputError, match="file inputs.safetensors does not match its header SHA256"):
        pending.result()


def test_a_missing_or_resized_file_is_refused_before_any_thread_starts(recorded: Path, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []
    real = bundle_module.PendingBundle.__init__
    monkeypatch.setattr(bundle_module.PendingBundle, "__init__", lambda self, *a: started.append("x") or real(self, *a))
    bundle = _copy(recorded, tmp_path)
    (bundle / "reference_torch.safetensors").unlink()
    with pytest.raises(InputError, match="file reference_torch.safetensors is missing"):
        open_bundle(bundle)
    shutil.copy(recorded / "reference_torch.safetensors", bundle)
    with (bundle / "inputs.safetensors").open("ab") as handle:
        handle.write(b"\0")
    with pytest.raises(InputError, match="inputs.safetensors has .* bytes, the manifest says"):
        open_bundle(bundle)
    assert started == []


def test_a_read_that_fails_on_the_thread_wakes_every_waiter(recorded: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(folder: Path, name: str, fd: int, size: int) -> bytearray:
        import os

        os.close(fd)
        raise InputError(f"golden bundle {folder}: file {name} cannot be read (I/O error)")

    pending_class = bundle_module.PendingBundle
    real = pending_class._work
    monkeypatch.setattr(pending_class, "_work", lambda self, opened: (
        monkeypatch.setattr(bundle_module, "_read_opened", failing), real(self, opened)))
    pending = open_bundle(recorded)  # the manifest is read before the thread's reads fail
    for ask in (lambda: pending.unverified_inputs, pending.onnx_model, pending.result):
        with pytest.raises(InputError, match="cannot be read"):
            ask()


def test_when_checked_runs_once_the_files_are_checked_before_and_after(recorded: Path) -> None:
    pending = open_bundle(recorded)
    seen: list[tuple[str, bool]] = []
    done = threading.Event()
    pending.when_checked(lambda: (seen.append(("early", pending.result().num_samples > 0)), done.set()))
    assert done.wait(30)
    late = threading.Event()
    pending.when_checked(lambda: (seen.append(("late", threading.current_thread() is not threading.main_thread())),
                                  late.set()))
    assert late.wait(30)
    assert seen == [("early", True), ("late", True)]
    assert pending.result() is pending.result()


def test_the_loaded_bundle_is_what_was_recorded(recorded: Path) -> None:
    """The reader's values against safetensors' own, for every file of a recorded bundle."""
    bundle = load_bundle(recorded)
    for name, arrays in (("inputs.safetensors", bundle.inputs), ("reference_torch.safetensors", bundle.reference),
                         ("reference_onnxruntime.safetensors", bundle.onnxruntime)):
        reference = load((recorded / name).read_bytes())
        assert set(arrays) <= set(reference)
        for key, array in arrays.items():
            np.testing.assert_array_equal(array, reference[key])
            assert array.dtype == reference[key].dtype

"""Tampered golden bundles against nightly (issue 23, attacker pass 5): refused at once, and never a digest of
bytes that were not sent."""
from __future__ import annotations

import hashlib
import json
import shutil
import socket
import struct
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from gapcheck.errors import InputError
from gapcheck.groups import TritonTarget


def _tampered_reference(tiny_golden: Path, tmp_path: Path) -> Path:
    bundle = tmp_path / "bundle"
    shutil.copytree(tiny_golden, bundle)
    target = bundle / "reference_torch.safetensors"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0x01  # one bit: the SHA256 in the manifest no longer matches
    target.write_bytes(bytes(data))
    return bundle


@pytest.mark.parametrize("scheme", ["http", "grpc"])
def test_a_bad_bundle_ends_a_hung_first_endpoint_at_once(tiny_golden: Path, tmp_path: Path, scheme: str) -> None:
    """The first endpoint accepts and never answers (a 60 s deadline, 30 s per attempt): the bundle's error is
    raised as soon as the hashes are done, not after the endpoint's deadline (it was: 60 s, then exit 2)."""
    from gapcheck.nightly import NightlyRequest, run_nightly
    from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option

    bundle = _tampered_reference(tiny_golden, tmp_path)
    history = tmp_path / "h.sqlite"
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        spec = endpoint_spec(parse_endpoint_option(f"hung={scheme}://127.0.0.1:{silent.getsockname()[1]}/m",
                                                   timeout_s=30.0))
        start = time.monotonic()
        with pytest.raises(InputError, match="reference_torch.safetensors"):
            run_nightly(NightlyRequest(golden=bundle, endpoints=(spec,), history=history,
                                       target=TritonTarget(retries=1, deadline_s=60.0), audit=False))
        elapsed = time.monotonic() - start
    assert elapsed < 20, elapsed  # the hashes of a 12-sample bundle; the deadline was the whole 60 s
    assert not history.exists()  # nothing recorded


def test_a_cancelled_endpoint_starts_no_further_attempt() -> None:
    from gapcheck.nightly.deadline import DeadlineEndpoint, DeadlinePassed
    from gapcheck.triton.endpoint import TritonEndpoint

    cancelled = threading.Event()
    endpoint = DeadlineEndpoint.of(TritonEndpoint(url="http://127.0.0.1:1"), time.monotonic() + 600, 600.0, cancelled)
    assert endpoint.time_left() > 500
    cancelled.set()
    with pytest.raises(DeadlinePassed, match="cancelled"):
        endpoint.time_left()


def _swapped_values(tiny_golden: Path, tmp_path: Path) -> Path:
    """Sample 5's values changed, the inputs file's SHA256 re-hashed in the manifest, its fingerprints left as
    recorded (the attacker's ``swapname``): every file hash passes."""
    bundle = tmp_path / "swapped"
    shutil.copytree(tiny_golden, bundle)
    target = bundle / "inputs.safetensors"
    raw = target.read_bytes()
    size = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + size])
    (name,) = [k for k in header if k != "__metadata__"]
    values = np.frombuffer(raw[8 + size:], dtype="<f4").copy().reshape(header[name]["shape"])
    values[5] += 100.0
    target.write_bytes(raw[:8 + size] + values.tobytes())
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"]["inputs.safetensors"] = {"bytes": target.stat().st_size,
                                               "sha256": hashlib.sha256(target.read_bytes()).hexdigest()}
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return bundle


def test_stale_fingerprints_refuse_the_bundle_and_record_nothing(tiny_golden: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture) -> None:
    """Was: exit 0/1 with request input_sha256 values that are the recorded (stale) fingerprints, not a digest of
    the bytes sent (only the first and last samples were checked)."""
    from gapcheck.cli.app import main
    from gapcheck.golden import load_bundle
    from gapcheck.nightly.history import History
    from tests.nightly.fake_triton import FakeTriton

    bundle = _swapped_values(tiny_golden, tmp_path)
    history = tmp_path / "h.sqlite"
    report = tmp_path / "r.json"
    with FakeTriton(load_bundle(tiny_golden), "ok") as fake:
        code = main(["nightly", "--golden", str(bundle), "--history", str(history), "--json", str(report),
                     "--no-audit", "--endpoint", f"prod={fake.url}"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"golden bundle {bundle}: sample 5" in err and "fingerprint" in err
    assert not report.exists()
    if history.exists():  # the run row taken back: nothing recorded
        with History(history) as h:
            assert h.endpoint_history("prod") == []


@pytest.mark.parametrize("kind", ["folder", "fifo", "dangling"])
def test_a_history_that_is_no_regular_file_is_refused_before_anything_is_created(tiny_golden: Path, tmp_path: Path,
                                                                                  kind: str) -> None:
    """Was (``--history /dev/zero``): exit 3, "disk I/O error", and /dev/zero.lock and /dev/zero-journal created.
    A character device is not planted here (that would need /dev); the check is the same stat."""
    import os
    import subprocess
    import sys

    history = tmp_path / "history"
    if kind == "folder":
        history.mkdir()
    elif kind == "fifo":
        os.mkfifo(history)
    else:
        history.symlink_to(tmp_path / "nowhere")
    before = sorted(p.name for p in tmp_path.iterdir())
    done = subprocess.run([sys.executable, "-m", "gapcheck", "nightly", "--golden", str(tiny_golden), "--history",
                           str(history), "--no-audit", "--endpoint", "prod=http://127.0.0.1:1/m"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"history {history} is" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no .lock, no -journal, no -wal


def test_a_history_writer_refuses_a_fifo(tmp_path: Path) -> None:
    import os

    from gapcheck.errors import ConfigError
    from gapcheck.nightly.history import History

    os.mkfifo(tmp_path / "h.sqlite")
    with pytest.raises(ConfigError, match="is a FIFO"):
        History(tmp_path / "h.sqlite")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.sqlite"]

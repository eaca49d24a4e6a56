"""--parallel-endpoints: the endpoints after the first are checked beside it once the bundle is verified, and
recorded in the config's order whichever ends first; a bad bundle starts none of them."""
from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from gapcheck.golden.bundle import load_bundle
from tests.nightly.fake_triton import FakeTriton
from tests.nightly.nights import night


def test_endpoints_are_checked_together_and_recorded_in_order(tiny_golden: Path, tmp_path: Path) -> None:
    """b's and c's servers answer each request only once the other server has one too (a barrier across them, one
    request in flight each): checked one after the other, the barrier breaks and both are unreachable."""
    golden = load_bundle(tiny_golden)
    gate = threading.Barrier(2, timeout=20)
    with FakeTriton(golden) as a, FakeTriton(golden) as b, FakeTriton(golden) as c:
        b.gate = c.gate = gate
        code, report = night(tiny_golden, tmp_path, [f"a={a.url}", f"b={b.url}", f"c={c.url}"], "--no-audit",
                             "--parallel-endpoints", "3", "--max-in-flight", "1")
    assert code == 0, report.get("summary")
    assert [e["name"] for e in report["endpoints"]] == ["a", "b", "c"]
    assert [e["status"] for e in report["endpoints"]] == ["pass", "pass", "pass"]
    assert b.inferences == c.inferences == 3  # 12 samples, batches of 4


def test_one_after_the_other_is_still_the_default(tiny_golden: Path, tmp_path: Path) -> None:
    """Without the flag, c's check starts once b's is recorded: a c whose server waits for b's never meets it."""
    golden = load_bundle(tiny_golden)
    gate = threading.Barrier(2, timeout=3)
    with FakeTriton(golden) as b, FakeTriton(golden) as c:
        b.gate = c.gate = gate
        code, report = night(tiny_golden, tmp_path, [f"b={b.url}", f"c={c.url}"], "--no-audit", "--max-in-flight", "1",
                             "--retries", "0")
    assert code == 3
    assert report["endpoints"][0]["status"] == "unreachable"


def test_a_bad_bundle_starts_none_of_them(tiny_golden: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(tiny_golden, bundle)
    target = bundle / "reference_torch.safetensors"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0x01  # the manifest's SHA256 no longer matches
    target.write_bytes(bytes(data))
    golden = load_bundle(tiny_golden)
    with FakeTriton(golden) as a, FakeTriton(golden) as b, FakeTriton(golden) as c:
        code, report = night(bundle, tmp_path, [f"a={a.url}", f"b={b.url}", f"c={c.url}"], "--no-audit",
                             "--parallel-endpoints", "3")
    assert code == 2 and report == {}
    assert b.inferences == c.inferences == 0


@pytest.mark.parametrize("value", ["0", "65", "-1", "nan", "1e309", "2.5"])
def test_the_flag_is_a_whole_number_in_range(tiny_golden: Path, tmp_path: Path, value: str) -> None:
    code, report = night(tiny_golden, tmp_path, ["a=http://127.0.0.1:1/m"], "--parallel-endpoints", value)
    assert code == 2 and report == {}


def test_the_config_key_is_checked_too(tiny_golden: Path, tmp_path: Path) -> None:
    config = tmp_path / "gapcheck.toml"
    config.write_text("[nightly]\nparallel_endpoints = 0\n")
    code, report = night(tiny_golden, tmp_path, ["a=http://127.0.0.1:1/m"], "--config", str(config))
    assert code == 2 and report == {}


def test_a_night_that_fails_does_not_wait_for_the_endpoints_beside_it(tiny_golden: Path, tmp_path: Path) -> None:
    """The first endpoint's map names a tensor its server lacks (exit 2) while the second, checked beside it, hangs
    on a server that accepts and never answers (a 120 s deadline): the process ends with the first's error at once,
    not after the second's deadline (neither the night nor the interpreter at exit waits for the check left in
    flight, which starts no further attempt)."""
    import socket
    import subprocess
    import sys
    import time

    with FakeTriton(load_bundle(tiny_golden)) as fake, socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        args = [sys.executable, "-m", "gapcheck", "nightly", "--golden", str(tiny_golden), "--history",
                str(tmp_path / "h.sqlite"), "--endpoint", f"a={fake.url}", "--endpoint",
                f"hung=http://127.0.0.1:{silent.getsockname()[1]}/m", "--parallel-endpoints", "2", "--no-audit",
                "--triton-output-map", "output=nosuch", "--triton-deadline", "120", "--triton-timeout", "60",
                "--triton-retries", "1"]
        start = time.monotonic()
        done = subprocess.run(args, capture_output=True, text=True, timeout=110)
        elapsed = time.monotonic() - start
    assert done.returncode == 2, done.stderr
    assert "nosuch" in done.stderr
    assert elapsed < 60, elapsed  # start-up included; the second endpoint's deadline was 120 s

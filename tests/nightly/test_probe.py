"""One endpoint's check: the vectorized per-sample comparison, and deadlines on a server that never answers."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from gapcheck.groups import TritonTarget
from gapcheck.triton.endpoint import ModelNotFoundError


def test_vectorized_per_sample_stats_match_compare_arrays() -> None:
    import numpy as np

    from gapcheck.compare import Tolerance, compare_arrays, per_sample, per_sample_vectorized

    rng = np.random.default_rng(0)
    golden = rng.standard_normal((9, 3, 5)).astype(np.float32)
    golden[2, 0, 0] = 0.0
    served = golden + rng.standard_normal(golden.shape).astype(np.float32) * np.float32(1e-4)
    served[4] += 0.01  # a failing sample
    served[2, 0, 0] = 1e-6  # error where the reference is 0: max_rel is inf
    tol = Tolerance(1e-4, 1e-4)
    stats = per_sample(served, golden, tol)
    for i in range(9):
        ref = compare_arrays(served[i:i + 1], golden[i:i + 1], tol)
        assert bool(stats.passed[i]) == ref.passed == (stats.error_ratio[i] <= 1.0)  # the ratio crosses 1 where it fails
        assert np.allclose([stats.max_abs[i], stats.max_rel[i], stats.mean_abs[i], stats.mismatch_fraction[i],
                            stats.error_ratio[i]],
                           [ref.max_abs, ref.max_rel, ref.mean_abs, ref.mismatch_fraction, ref.error_ratio],
                           rtol=1e-6, equal_nan=True)
    served[1, 1, 1] = np.nan
    assert per_sample_vectorized(served, golden, tol) is None  # non-finite: compared sample by sample
    assert not per_sample(served, golden, tol).passed[1]


@pytest.mark.parametrize("flush_elements", [1, 10**9])  # every batch alone / all batches in one group
def test_batches_in_any_order_compare_as_sample_by_sample(monkeypatch, flush_elements: int) -> None:
    import numpy as np

    from gapcheck.compare import Tolerance, compare_arrays
    from gapcheck.nightly import probe

    monkeypatch.setattr(probe, "FLUSH_ELEMENTS", flush_elements)
    rng = np.random.default_rng(1)
    golden = rng.standard_normal((40, 6)).astype(np.float32)
    served = golden + rng.standard_normal(golden.shape).astype(np.float32) * np.float32(1e-5)
    served[7] += 0.5  # failing samples, one of them with a NaN (its batch is compared sample by sample)
    served[23, 2] = np.nan
    served[31] += 0.05
    acc = probe._Accumulator("y", 1e-4, 1e-4)
    for first in (32, 0, 16, 8, 24):  # answers arrive out of order
        acc.add(first, served[first:first + 8], golden[first:first + 8])
    got = acc.result()
    refs = [compare_arrays(served[i:i + 1], golden[i:i + 1], Tolerance(1e-4, 1e-4)) for i in range(40)]
    assert got.failing_samples == sum(not r.passed for r in refs) == 3 and not got.passed
    assert got.max_abs == max(r.max_abs for r in refs) == float("inf")
    assert np.isclose(got.mean_abs, sum(r.mean_abs for r in refs) / 40)
    assert np.isclose(got.mismatch_fraction, sum(r.mismatch_fraction for r in refs) / 40)
    assert [w.sample for w in got.worst[:3]] == [23, 7, 31]  # failing first, by error ratio (NaN counts as inf)
    assert all(w.passed for w in got.worst[3:])
    assert got.error_ratio == float("inf")


@pytest.mark.parametrize("scheme", ["http", "grpc"])
def test_a_server_that_never_answers_is_unreachable_within_the_deadline(tiny_golden: Path, tmp_path: Path,
                                                                        scheme: str) -> None:
    import socket

    from gapcheck.nightly import NightlyRequest, run_nightly
    from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option

    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        spec = endpoint_spec(parse_endpoint_option(f"hung={scheme}://127.0.0.1:{silent.getsockname()[1]}/m",
                                                   timeout_s=1.0))
        start = time.monotonic()
        result = run_nightly(NightlyRequest(golden=tiny_golden, endpoints=(spec,), history=tmp_path / "h.sqlite",
                                            target=TritonTarget(retries=0, deadline_s=5.0)))
        elapsed = time.monotonic() - start
    assert result.exit_code == 3 and result.endpoints[0].status.value == "unreachable"
    assert elapsed < 30, elapsed


@pytest.mark.parametrize("scheme", ["http", "grpc"])
def test_a_black_hole_before_readiness_ends_at_the_deadline_not_after_every_timeout(tiny_golden: Path, tmp_path: Path,
                                                                                    scheme: str) -> None:
    """Accepts and never answers, with a 20 s request timeout and one retry: only the 2 s deadline can end
    the liveness call in time (without it: 2 x 20 s). The next endpoint still runs."""
    import socket

    from gapcheck.golden import load_bundle
    from gapcheck.nightly import NightlyRequest, run_nightly
    from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option
    from tests.nightly.fake_triton import FakeTriton

    with socket.socket() as silent, FakeTriton(load_bundle(tiny_golden), "ok") as fake:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        specs = tuple(endpoint_spec(parse_endpoint_option(option, timeout_s=20.0)) for option in (
            f"hole={scheme}://127.0.0.1:{silent.getsockname()[1]}/m", f"fine={fake.url}"))
        start = time.monotonic()
        result = run_nightly(NightlyRequest(golden=tiny_golden, endpoints=specs, history=tmp_path / "h.sqlite",
                                            target=TritonTarget(retries=1, deadline_s=2.0)))
        hole_s = result.endpoints[0].outcome.seconds["total"]
        elapsed = time.monotonic() - start
    hole, fine = result.endpoints
    assert hole.status.value == "unreachable" and "total deadline of 2s passed" in str(hole.outcome.error), \
        hole.outcome.error
    assert [f.code for f in hole.findings if f.is_gap] == ["endpoint_unreachable"]
    assert fine.status.value == "pass" and result.exit_code == 3
    assert hole_s < 10, (hole_s, elapsed)


def test_a_black_hole_behind_a_healthy_front_ends_inference_at_the_deadline(tiny_golden: Path, tmp_path: Path) -> None:
    """Readiness, metadata and config answered, inference never: every request in flight is cut at the 2 s
    deadline, not at its 20 s timeout (twice, with the retry)."""
    from gapcheck.golden import load_bundle
    from gapcheck.nightly import NightlyRequest, run_nightly
    from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option
    from tests.nightly.fake_triton import FakeTriton

    with FakeTriton(load_bundle(tiny_golden), "silent") as fake:
        spec = endpoint_spec(parse_endpoint_option(f"hole={fake.url}", timeout_s=20.0))
        start = time.monotonic()
        result = run_nightly(NightlyRequest(golden=tiny_golden, endpoints=(spec,), history=tmp_path / "h.sqlite",
                                            target=TritonTarget(retries=1, deadline_s=2.0)))
        elapsed = time.monotonic() - start
    (hole,) = result.endpoints
    assert result.exit_code == 3 and hole.status.value == "unreachable"
    assert "total deadline of 2s passed" in str(hole.outcome.error), hole.outcome.error
    assert elapsed < 10, elapsed


def _one_night(golden: Path, url: str, history: Path, **options):
    from gapcheck.nightly import NightlyRequest, run_nightly
    from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option

    spec = endpoint_spec(parse_endpoint_option(f"ep={url}", timeout_s=2.0))
    return run_nightly(NightlyRequest(golden=golden, endpoints=(spec,), history=history,
                                      target=TritonTarget(retries=0, deadline_s=10.0),
                                      **options))


@pytest.mark.parametrize(("mode", "says"), [
    ("dtype", "served dtype int32, golden float32"),
    ("shape", "served shape [4, 10] for a batch of 4, golden [4, 5]"),
    ("batch", "served shape [3, 5] for a batch of 4, golden [4, 5]"),
])
def test_wrong_dtype_or_shape_is_a_gap_that_says_so(tiny_golden: Path, tmp_path: Path, mode: str, says: str) -> None:
    from gapcheck.golden import load_bundle
    from tests.nightly.fake_triton import FakeTriton

    with FakeTriton(load_bundle(tiny_golden), mode) as fake:
        result = _one_night(tiny_golden, fake.url, tmp_path / "h.sqlite")
    endpoint = result.endpoints[0]
    assert result.exit_code == 1 and endpoint.status.value == "new_failure"
    assert says in endpoint.headline
    assert [f.code for f in endpoint.findings if f.is_gap] == ["golden_output_type"]


def test_a_restricted_inference_api_names_the_header_it_expects(tiny_golden: Path, tmp_path: Path) -> None:
    from gapcheck.golden import load_bundle
    from tests.nightly.fake_triton import FakeTriton

    with FakeTriton(load_bundle(tiny_golden), "restricted_infer") as fake:
        result = _one_night(tiny_golden, fake.url, tmp_path / "h.sqlite")
    endpoint = result.endpoints[0]
    assert not endpoint.outcome.reachable
    assert "expects the access header 'triton-access-token'" in endpoint.outcome.error, endpoint.outcome.error


def test_a_correct_answer_from_the_fake_server_passes(tiny_golden: Path, tmp_path: Path) -> None:
    """The control for the tests above: the same server answering the reference is a pass."""
    from gapcheck.golden import load_bundle
    from tests.nightly.fake_triton import FakeTriton

    with FakeTriton(load_bundle(tiny_golden), "ok") as fake:
        result = _one_night(tiny_golden, fake.url, tmp_path / "h.sqlite")
    assert result.exit_code == 0 and result.endpoints[0].status.value == "pass"


@pytest.mark.parametrize("mode", ["garbage", "huge", "hang"])
def test_garbage_or_a_hang_mid_answer_is_unreachable_and_recorded(tiny_golden: Path, tmp_path: Path,
                                                                 mode: str) -> None:
    """Not JSON, or half an answer then silence: unreachable (exit 3). A JSON answer that claims a gigantic output
    is read as far as its header, never allocated, and refused as malformed: the server answered, wrongly (a gap,
    exit 1, ``endpoint_malformed_answer``)."""
    from gapcheck.golden import load_bundle
    from gapcheck.nightly.history import History
    from tests.nightly.fake_triton import FakeTriton

    start = time.monotonic()
    with FakeTriton(load_bundle(tiny_golden), mode) as fake:
        result = _one_night(tiny_golden, fake.url, tmp_path / "h.sqlite")
    assert time.monotonic() - start < 30  # the 2 s request timeout, not the server's 60 s silence
    status = "new_failure" if mode == "huge" else "unreachable"
    assert result.exit_code == (1 if mode == "huge" else 3) and result.endpoints[0].status.value == status
    if mode == "huge":
        assert [f.code for f in result.endpoints[0].findings if f.is_gap] == ["endpoint_malformed_answer"]
    with History(tmp_path / "h.sqlite", readonly=True) as history:
        (record,) = history.endpoint_history("ep")
    assert record.status == status and record.verdict == "gap"


def test_the_config_hash_is_the_same_over_grpc_and_http() -> None:
    """Both answers captured from one tritonserver serving one model: gRPC leaves out defaults, HTTP spells them."""
    import json

    from gapcheck.nightly.probe import config_hash

    data = Path(__file__).parent / "data"
    grpc, http = (json.loads((data / f"config_{p}.json").read_text()) for p in ("grpc", "http"))
    assert grpc != http
    assert config_hash(grpc) == config_hash(http)
    changed = {**http, "max_batch_size": 4}
    assert config_hash(changed) != config_hash(http)
    assert config_hash({**http, "dynamic_batching": {**http["dynamic_batching"], "max_queue_delay_microseconds": 100}}) \
        != config_hash(http)


def test_the_error_ratio_is_above_1_exactly_when_a_sample_fails() -> None:
    """A sample with large and small reference values, off by 1.2e-4 everywhere: the small values fail
    (allowed 1e-4 + 1e-4 * |small|), so the ratio must say > 1, not 1.2e-4 / (1e-4 + 1e-4 * 10) = 11 %."""
    import numpy as np

    from gapcheck.compare import Tolerance, per_sample

    tol = Tolerance(1e-4, 1e-4)
    golden = np.array([[10.0, 0.001, -0.002, 5.0]], dtype=np.float32)
    served = golden + np.float32(1.2e-4)
    stats = per_sample(served, golden, tol)
    assert not stats.passed[0] and stats.error_ratio[0] > 1.0
    nan_golden = golden.copy()
    nan_golden[0, 1] = np.nan
    assert per_sample(np.where(np.isnan(nan_golden), np.nan, served), nan_golden, tol).error_ratio[0] > 1.0
    assert per_sample(nan_golden, nan_golden, tol).error_ratio[0] == 0.0  # NaN matches NaN


def test_terminal_escapes_from_the_server_never_reach_the_console_or_reports(tiny_golden: Path, tmp_path: Path,
                                                                             capsys: pytest.CaptureFixture) -> None:
    from gapcheck.cli.app import main
    from gapcheck.golden import load_bundle
    from tests.nightly.fake_triton import FakeTriton

    history = tmp_path / "h.sqlite"
    with FakeTriton(load_bundle(tiny_golden), "evil") as fake:
        code = main(["nightly", "--golden", str(tiny_golden), "--endpoint", f"e={fake.url}", "--history", str(history),
                     "--retries", "0", "--no-audit", "--html", str(tmp_path / "r.html"),
                     "--junit", str(tmp_path / "r.xml")])
    assert code == 1  # a 400: the server is up and calls the request wrong (endpoint_rejected_request), not down
    assert main(["history", "--history", str(history)]) == 1
    captured = capsys.readouterr()
    for text in (captured.out, captured.err, (tmp_path / "r.html").read_text(), (tmp_path / "r.xml").read_text()):
        assert "\x1b" not in text and "\x07" not in text
    assert "PASS all good" not in captured.out.splitlines()[0]


NO_TORCH_NIGHT = """
import sys
from gapcheck.cli.app import main
from gapcheck.golden import load_bundle
from tests.nightly.fake_triton import FakeTriton

with FakeTriton(load_bundle(sys.argv[1]), "ok") as fake:
    code = main(["nightly", "--golden", sys.argv[1], "--endpoint", f"e={fake.url}", "--history", sys.argv[2]])
assert code == 0, code
assert "torch" not in sys.modules, "a night imported torch (seconds of start-up for nothing)"
"""


def test_a_night_never_imports_torch(tiny_golden: Path, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run([sys.executable, "-c", NO_TORCH_NIGHT, str(tiny_golden), str(tmp_path / "h.sqlite")],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_integer_answers_are_compared_exactly() -> None:
    """Served int64 2**62 + 1 for a golden 2**62 fails (float64 would call them equal), and its ratio says so."""
    import numpy as np

    from gapcheck.nightly import probe

    golden = np.array([[2**62, 3], [5, 6]], dtype=np.int64)
    served = golden.copy()
    served[0, 0] += 1
    from gapcheck.compare import Tolerance, per_sample

    ratios = per_sample(served, golden, Tolerance(0.0, 0.0)).error_ratio
    assert ratios[0] > 1 and ratios[1] == 0
    acc = probe._Accumulator("ids", 0.0, 0.0)
    acc.add(0, served, golden)
    result = acc.result()
    assert not result.passed and result.failing_samples == 1 and result.worst[0].sample == 0


def test_a_pending_bundle_is_checked_like_a_verified_one(tiny_golden: Path) -> None:
    """Issue 23, item 14: the hashes run while readiness and the first requests do; the result is the same."""
    from gapcheck.golden.bundle import load_bundle, open_bundle
    from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option
    from gapcheck.nightly.probe import check_endpoint
    from tests.nightly.fake_triton import FakeTriton

    with FakeTriton(load_bundle(tiny_golden), "ok") as fake:
        spec = endpoint_spec(parse_endpoint_option(f"e={fake.url}"))
        loaded = check_endpoint(spec, load_bundle(tiny_golden), retries=0, audit=True)
        pending = check_endpoint(spec, open_bundle(tiny_golden), retries=0, audit=True)
    assert loaded.reachable and pending.reachable and not pending.gap
    assert pending.requests == loaded.requests
    assert [(o.output, o.max_abs, o.error_ratio, o.passed) for o in pending.outputs] == \
        [(o.output, o.max_abs, o.error_ratio, o.passed) for o in loaded.outputs]


@pytest.mark.parametrize(("reachable", "tampered", "audit"), [
    (True, "reference_torch.safetensors", False), (False, "reference_torch.safetensors", False),
    # the inputs go out while their hash runs and the audit reads the (intact) export meanwhile: neither is reported
    (True, "inputs.safetensors", True), (False, "inputs.safetensors", True)])
def test_a_pending_bundle_that_fails_verification_is_never_judged(tiny_golden: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  reachable: bool, tampered: str, audit: bool) -> None:
    import shutil

    from gapcheck.golden.bundle import load_bundle, open_bundle
    from gapcheck.nightly import probe
    from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option
    from tests.nightly.conftest import free_port
    from tests.nightly.fake_triton import FakeTriton

    bundle = tmp_path / "bundle"
    shutil.copytree(tiny_golden, bundle)
    data = bytearray((bundle / tampered).read_bytes())
    data[-1] ^= 0x01  # same size, another value: only the SHA256 tells
    (bundle / tampered).write_bytes(bytes(data))
    judged: list[int] = []
    monkeypatch.setattr(probe._Accumulator, "add", lambda self, first, *a: judged.append(first))
    with FakeTriton(load_bundle(tiny_golden), "ok") as fake:
        url = fake.url if reachable else f"http://127.0.0.1:{free_port()}/m"
        spec = endpoint_spec(parse_endpoint_option(f"e={url}"))
        # the inputs' last byte is the last sample's: its recorded fingerprint tells (their file is not hashed whole)
        with pytest.raises(probe.BadBundle, match=f"{tampered} does not match (its SHA256|the fingerprint)"):
            probe.check_endpoint(spec, open_bundle(bundle), retries=0, audit=audit)
    assert judged == []


def test_a_model_that_is_not_ready_is_named_so_on_a_live_server(tiny_golden: Path) -> None:
    """Readiness asks the model first (one round trip when it is ready); when it is not, the server's liveness is
    checked so the message says which of the two it was."""
    from gapcheck.golden.bundle import load_bundle
    from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option
    from gapcheck.nightly.probe import check_endpoint
    from tests.nightly.fake_triton import FakeTriton

    with FakeTriton(load_bundle(tiny_golden), "unready") as fake:  # the server has the model, not ready yet
        spec = endpoint_spec(parse_endpoint_option(f"e={fake.url}"))
        outcome = check_endpoint(spec, load_bundle(tiny_golden), retries=0, audit=False)
    assert not outcome.reachable and not outcome.model_unknown
    assert "model 'm' is not ready on" in (outcome.error or "")


def test_a_model_the_server_does_not_have_is_named_so_with_what_it_has(tiny_golden: Path) -> None:
    """A misspelt model is not an outage: the server's 404 for its metadata (the repository index is restricted
    here) says the model is not on the server; the outcome says so (endpoint_model_unknown), not 'not ready'."""
    from gapcheck.golden.bundle import load_bundle
    from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option
    from gapcheck.nightly.probe import check_endpoint
    from tests.nightly.fake_triton import FakeTriton

    with FakeTriton(load_bundle(tiny_golden), "ok") as fake:
        spec = endpoint_spec(parse_endpoint_option(f"e={fake.url.rsplit('/', 1)[0]}/not-served"))
        outcome = check_endpoint(spec, load_bundle(tiny_golden), retries=0, audit=False)
    assert not outcome.reachable and outcome.model_unknown
    assert "model 'not-served' is not on http://127.0.0.1:" in (outcome.error or "")
    assert [f.code for f in outcome.findings] == ["endpoint_model_unknown"]


@pytest.mark.parametrize(("protocol", "in_flight", "opened"), [("grpc", 1, 1), ("http", 1, 2), ("grpc", 4, 1)])
def test_readiness_connection_serves_the_first_worker_and_every_connection_is_closed(
        served, tiny_golden: Path, monkeypatch: pytest.MonkeyPatch, protocol: str, in_flight: int, opened: int) -> None:
    """Issue 23, item 14: over gRPC the readiness connection is the inference's, however many requests are in
    flight (a channel multiplexes them: no channel per worker to open and close); an HTTP client stays with the
    thread that made it. Every connection is closed, the inference's by the pool's worker behind the comparison."""
    import threading
    import time

    from gapcheck.golden.bundle import open_bundle
    from gapcheck.nightly import probe
    from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option

    made: list[object] = []
    closed: list[object] = []
    lock = threading.Lock()
    real = probe._connect

    def connect(endpoint):
        conn = real(endpoint)
        close = conn.close

        def counted_close() -> None:
            with lock:
                closed.append(conn)
            close()
        conn.close = counted_close
        with lock:
            made.append(conn)
        return conn

    monkeypatch.setattr(probe, "_connect", connect)
    spec = endpoint_spec(parse_endpoint_option(f"e={served.url(protocol, 'stable')}"))
    outcome = probe.check_endpoint(spec, open_bundle(tiny_golden), max_in_flight=in_flight, retries=0, audit=False)
    assert outcome.reachable and not outcome.gap, outcome.error
    assert len(outcome.requests) > 1  # several requests (in flight together when in_flight > 1), one channel
    assert len(made) == opened
    for _ in range(500):  # the closes run behind the call: wait for them (bounded), never for a duration
        with lock:
            if len(closed) >= len(made):
                break
        time.sleep(0.01)
    assert sorted(map(id, closed)) == sorted(map(id, made))  # each one closed, once


@pytest.mark.parametrize("recorded", [True, False])
def test_request_digests_are_the_recorded_fingerprints_or_the_bytes_sent(tiny_golden: Path, tmp_path: Path,
                                                                        recorded: bool) -> None:
    """Each request's input SHA256 (worked out while the requests are in flight): from the fingerprints
    ``golden record`` took when the bundle holds them, else the SHA256 of the very slice that was sent."""
    import json
    import shutil

    import numpy as np

    from gapcheck.golden.bundle import load_bundle, open_bundle
    from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option
    from gapcheck.nightly.probe import batch_digest, check_endpoint
    from gapcheck.tensors import fingerprint
    from tests.nightly.fake_triton import FakeTriton

    bundle = tmp_path / "bundle"
    shutil.copytree(tiny_golden, bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    if not recorded:  # a bundle built before fingerprints were recorded
        del manifest["samples"]["fingerprints"]
        (bundle / "manifest.json").write_text(json.dumps(manifest))
    inputs = load_bundle(bundle).inputs["x"]
    with FakeTriton(load_bundle(tiny_golden), "ok") as fake:
        spec = endpoint_spec(parse_endpoint_option(f"e={fake.url}"))
        outcome = check_endpoint(spec, open_bundle(bundle), retries=0, audit=False, max_in_flight=3)
    assert outcome.reachable and outcome.requests
    assert sum(r["count"] for r in outcome.requests) == len(inputs)
    for r in outcome.requests:
        a, b = r["first_sample"], r["first_sample"] + r["count"]
        if recorded:
            want = batch_digest([manifest["samples"]["fingerprints"][i]["x"] for i in range(a, b)])
        else:
            want = fingerprint(np.ascontiguousarray(inputs[a:b]))
        assert r["input_sha256"] == {"x": want}


def test_what_readiness_read_decides_the_fp16_casts_budgets_and_one_finding(tiny_golden: Path) -> None:
    """No server: readiness's metadata declares FP16 -> inputs cast to FP16, the bundle's policy at FP16, one
    fp16_deployment finding about the endpoint; an FP32 deployment -> nothing changes."""
    import numpy as np

    from gapcheck.golden import load_bundle
    from gapcheck.nightly import probe
    from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option

    bundle = load_bundle(tiny_golden)
    [out] = [o.name for o in bundle.output_infos]
    spec = endpoint_spec(parse_endpoint_option("prod=grpc://127.0.0.1:1/m"))

    def facts(datatype: str) -> probe.ServedFacts:
        metadata = {"inputs": [{"name": "x", "datatype": datatype, "shape": [-1, 3, 8, 8]}],
                    "outputs": [{"name": out, "datatype": datatype, "shape": [-1, 5]}]}
        return probe.ServedFacts("1", None, None, [out], metadata, None)

    plain = probe.served_precision(spec, bundle, facts("FP32"))
    assert (plain.fp16, plain.findings, plain.input_dtypes) == (False, [], {})
    half = probe.served_precision(spec, bundle, facts("FP16"))
    assert half.fp16 and half.input_dtypes == {"x": "float16"}
    [said] = half.findings
    assert (said.code, said.subject.endpoint) == ("fp16_deployment", "prod")
    budgets = probe.fp16_budgets(bundle, [out])
    assert (budgets[out].rtol, budgets[out].scale_atol) == (1e-2, True)  # recorded: 1e-4, FP32
    x = np.ones((2, 3), np.float32)
    assert probe.as_sent(x, np.dtype("float16")).dtype == np.float16
    assert probe.as_sent(x.astype(np.int64), np.dtype("float16")).dtype == np.int64  # only floats are cast


def test_a_golden_bundle_whose_tolerances_do_not_read_is_exit_2(tiny_golden: Path) -> None:
    import dataclasses

    from gapcheck.golden import load_bundle
    from gapcheck.nightly import probe

    bundle = load_bundle(tiny_golden)
    manifest = {**bundle.manifest, "tolerances": {**bundle.manifest["tolerances"], "rtol": "NaN"}}
    with pytest.raises(probe.BadBundle, match="tolerances cannot be read"):
        probe.fp16_budgets(dataclasses.replace(bundle, manifest=manifest), ["y"])


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_readiness_asks_metadata_and_config_beside_the_model_on_grpc_and_says_each_failure_as_before(
        served, protocol: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 23, item 14: on gRPC the model's metadata and config are asked on their own threads beside its
    readiness (one round trip's wait, not three); HTTP's client stays on its thread. The facts are the same either
    way, and a model that is not ready is still named so (its metadata's error, asked beside, is not what is said)."""
    import threading

    from gapcheck.nightly import probe
    from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option
    from gapcheck.nightly.deadline import DeadlineEndpoint
    from gapcheck.triton.client import TritonConnection

    asked: dict[str, int] = {}
    for name in ("model_metadata", "model_config"):
        real = getattr(TritonConnection, name)

        def spy(self, *args, _real=real, _name=name, **kwargs):
            asked[_name] = threading.get_ident()
            return _real(self, *args, **kwargs)
        monkeypatch.setattr(TritonConnection, name, spy)

    def facts(model: str) -> probe.ServedFacts:
        spec = endpoint_spec(parse_endpoint_option(f"e={served.url(protocol, model)}"))
        endpoint = DeadlineEndpoint.of(spec.triton_endpoint(0), float("inf"), 60.0)
        conn = probe._connect(endpoint)
        try:
            return probe._served_facts(spec, conn, [])
        finally:
            conn.close()

    got = facts("stable")
    assert got.max_batch_size == 8 and got.outputs == ["output"] and got.config_hash and got.version == "1"
    beside = {name: ident != threading.get_ident() for name, ident in asked.items()}
    assert beside == {"model_metadata": protocol == "grpc", "model_config": protocol == "grpc"}
    with pytest.raises(ModelNotFoundError, match="model 'not-served' is not (on|in the repository of) "):
        facts("not-served")  # not 'not ready': the server does not have it

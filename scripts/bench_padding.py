"""Benchmark: ``export-diff --pad-check`` against one plain export-diff run of the same model, side by side.

    .venv/bin/python scripts/bench_padding.py [--rounds 5]

Target (issue #14): the padding check costs at most the number of padding variants x one forward on each
backend, and never re-exports. For each model (the planted clean encoder of ``sample_models/padding.py`` and a
BERT built from a small config), the ONNX file is exported once up front with dynamic batch and sequence axes and
given to both runs (``onnx_file``), and, interleaved round by round:

- ``plain``: ``run_export_diff`` (layer-wise torch vs ONNX Runtime);
- ``pad``: the same request with ``pad_check`` (right and left padding, the default lengths).

Every torch and ONNX Runtime forward is counted and timed (the backends' ``infer`` wrapped), so the table shows
what the padding check added: its forwards per backend, the time inside them, and the rest (padding the batches,
comparing, a second ONNX Runtime session). A last row runs both requests without ``onnx_file`` and without the
export cache and counts ``torch.onnx.export`` calls: one per run, with or without the padding check.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

T = 32


def build_bert():  # noqa: ANN201 - a factory for the benchmark, also loadable as scripts/bench_padding.py:build_bert
    """BERT (4 layers, hidden 256) from a small config, returning (last_hidden_state, pooler_output)."""
    import torch
    import transformers

    config = transformers.BertConfig(vocab_size=200, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                     intermediate_size=1024, max_position_embeddings=128)
    torch.manual_seed(0)
    bert = transformers.BertModel(config).eval()

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            out = self.bert(input_ids=ids, attention_mask=mask)
            return out.last_hidden_state, out.pooler_output

    return Wrapped().eval()


# BERT's absolute positions make it depend on left padding (a true finding, as the tests show): right only.
MODELS = {
    "planted clean encoder": ("sample_models.padding:build_clean", 100, ("hidden", "logits"), ("right", "left")),
    "BERT from config (4 layers, hidden 256)": (f"{Path(__file__).resolve()}:build_bert", 200,
                                               ("last_hidden_state", "pooler"), ("right",)),
}


class Meter:
    """Counts and times every torch / ONNX Runtime forward (the backends' infer) and every torch.onnx.export."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.seconds: Counter[str] = Counter()

    def install(self) -> None:
        import torch

        from gapcheck.backends.onnxruntime import OnnxRuntimeBackend
        from gapcheck.backends.torch_eager import TorchBackend

        for label, owner, name in (("torch", TorchBackend, "capture"), ("onnxruntime", OnnxRuntimeBackend, "infer"),
                                   ("export", torch.onnx, "export"), ("ort session", OnnxRuntimeBackend, "__init__")):
            setattr(owner, name, self._wrap(label, getattr(owner, name)))

    def _wrap(self, label: str, fn):  # noqa: ANN001, ANN202
        def timed(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            tick = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.calls[label] += 1
                self.seconds[label] += time.perf_counter() - tick
        return timed

    def snapshot(self) -> tuple[Counter[str], Counter[str]]:
        return Counter(self.calls), Counter(self.seconds)


def export_dynamic(factory: str, outputs: tuple[str, ...], path: Path) -> None:
    import torch

    from gapcheck.model.factory import resolve_callable

    module = resolve_callable(factory)()
    ids = torch.ones(2, T, dtype=torch.long)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (ids, ids), str(path), input_names=["ids", "mask"], output_names=list(outputs),
                          dynamo=False, opset_version=17,
                          dynamic_axes={"ids": {0: "b", 1: "t"}, "mask": {0: "b", 1: "t"}})


def one_padded_forward(factory: str, onnx_file: Path, repeat: int = 20) -> float:
    """Median seconds of one torch forward plus one ONNX Runtime run on a padded batch (4 sequences of T tokens)."""
    import numpy as np
    import onnxruntime
    import torch

    from gapcheck.model.factory import resolve_callable

    module = resolve_callable(factory)()
    session = onnxruntime.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    ids = np.ones((4, T), dtype=np.int64)
    times = []
    for _ in range(repeat):
        tick = time.perf_counter()
        with torch.no_grad():
            module(torch.from_numpy(ids), torch.from_numpy(ids))
        session.run(None, {"ids": ids, "mask": ids})
        times.append(time.perf_counter() - tick)
    return statistics.median(times)


def request(factory: str, vocab: int, onnx_file: Path | None, pad: bool, sides: tuple[str, ...] = ("right",),
            cache: Path | None = None):  # noqa: ANN201
    from gapcheck.export_diff.api import ExportDiffRequest, PadCheckRequest

    return ExportDiffRequest(factory=factory, input_specs=(f"ids:1x{T}:int64:1,{vocab}", f"mask:1x{T}:int64:1,2"),
                             onnx_file=onnx_file, no_cache=cache is None, cache_dir=cache,
                             pad_check=PadCheckRequest(sides=sides) if pad else None)


def timed_run(meter: Meter, req) -> tuple[float, Counter[str], Counter[str], object]:  # noqa: ANN001
    from gapcheck.export_diff.api import run_export_diff

    calls, seconds = meter.snapshot()
    tick = time.perf_counter()
    result = run_export_diff(req)
    wall = time.perf_counter() - tick
    after_calls, after_seconds = meter.snapshot()
    return wall, after_calls - calls, after_seconds - seconds, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    meter = Meter()
    meter.install()
    work = Path(tempfile.mkdtemp(prefix="bench-padding-"))
    print("| model | plain run (s) | with --pad-check (s) | added (s) | variants per backend | forwards added "
          "(torch / ORT) | time in those forwards (s) | added ÷ (variants × one padded forward per backend) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, (factory, vocab, outputs, sides) in MODELS.items():
        onnx_file = work / f"{len(label)}.onnx"
        export_dynamic(factory, outputs, onnx_file)
        plain_req, pad_req = (request(factory, vocab, onnx_file, False, sides),
                             request(factory, vocab, onnx_file, True, sides))
        timed_run(meter, plain_req), timed_run(meter, pad_req)  # warm-up: imports, first sessions
        plain, pad, added_calls, added_seconds, variants = [], [], Counter(), Counter(), 0
        for round_ in range(args.rounds):
            order = (plain_req, pad_req) if round_ % 2 == 0 else (pad_req, plain_req)
            runs = {id(r): timed_run(meter, r) for r in order}
            plain_wall, plain_calls, plain_seconds, _ = runs[id(plain_req)]
            pad_wall, pad_calls, pad_seconds, result = runs[id(pad_req)]
            assert result.padding is not None and not [f for f in result.findings if f.code != "export_fallback"
                                                       and f.severity.value == "gap"], result.headline
            plain.append(plain_wall)
            pad.append(pad_wall)
            added_calls = pad_calls - plain_calls
            added_seconds = pad_seconds - plain_seconds
            variants = sum(1 for v in result.padding.variants if v.backend == "torch")
        added = statistics.median(p - q for p, q in zip(pad, plain, strict=True))
        bound = variants * one_padded_forward(factory, onnx_file)
        print(f"| {label} | {statistics.median(plain):.3f} | {statistics.median(pad):.3f} | {added:.3f} | {variants} | "
              f"{added_calls['torch']} / {added_calls['onnxruntime']} | "
              f"{added_seconds['torch'] + added_seconds['onnxruntime']:.3f} | {added / bound:.2f}× |"
              f"  (ORT session: {added_seconds['ort session']:.3f} s)")
    factory, vocab, _, _ = MODELS["planted clean encoder"]
    exports = []
    for pad_flag in (False, True):
        _, calls, _, _ = timed_run(meter, request(factory, vocab, None, pad_flag))
        exports.append(calls["export"])
    print(f"\ntorch.onnx.export calls, gapcheck's own export, no cache: plain run {exports[0]}, with --pad-check "
          f"{exports[1]}")
    print(f"{args.rounds} interleaved rounds, medians; padding: right and left, default lengths, 4 sequences")


if __name__ == "__main__":
    main()

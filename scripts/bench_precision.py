"""Benchmark of ``gapcheck precision`` (issue 20), side by side in one run, ratios printed.

FP16: the cost of finding and verifying the fix (one layer-wise analysis run, then verification runs of the fixed
model) against one plain layer-wise run (``export_diff(..., precision="fp16")``); the target is <= 3 runs, against
Polygraphy's one engine build per bisection step. INT8: gapcheck's sensitivity pass (quantize once, one run of both
models with every value marked, each module's own error from one replay model) against ONNX Runtime's
``qdq_loss_debug`` (mark every value, collect activations of both models, SQNR per tensor) on the same calibration
set and samples; beside them the same local errors computed the earlier way (one subgraph session per module), and
``--sensitivity alone`` (the outputs' error with only one module quantized, one spliced session).

Models: ResNet-18 (built in code, sample_models.cnn), a small BERT classifier (sample_models.zoo, transformers'
BertForSequenceClassification), and transformers' T5LayerFF with an FP16 overflow (the case where a fix is needed).

    .venv/bin/python scripts/bench_precision.py [--samples 4] [--image 128]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _seconds(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def _setup(factory: str, specs: tuple[str, ...], count: int):
    from gapcheck.groups import ExportSpec, InputSource, ModelSource
    from gapcheck.precision.graph import describe

    module = ModelSource(factory=factory).load().module.eval()
    samples = InputSource(specs=specs, num_samples=count).samples(module=module)
    exported, names = ExportSpec(no_cache=True).obtain(module, samples[0])
    graph = describe(exported.model, [p for p, _ in module.named_modules() if p])
    return module, samples, exported, names, graph


def fp16_row(name: str, factory: str, specs: tuple[str, ...], count: int) -> dict:
    from gapcheck.export_diff.runner import ExportOptions, export_diff
    from gapcheck.groups import ToleranceSpec
    from gapcheck.precision import fp16

    module, samples, exported, names, graph = _setup(factory, specs, count)
    plain_s, _ = _seconds(lambda: export_diff(module, samples, export=ExportOptions(exported=exported), precision="fp16"))
    policy = ToleranceSpec().policy("fp16")

    def find_and_verify():
        refs = fp16.reference(module, samples, graph, names)
        analysis = fp16.analyze(module, graph, samples, refs, policy)
        if analysis.verification.passed:
            return analysis, None
        return analysis, fp16.fix(graph, analysis, samples, refs, policy)

    fix_s, (analysis, fixed) = _seconds(find_and_verify)
    return {"model": name, "nodes": len(graph.model.graph.node), "plain_s": plain_s, "fix_s": fix_s,
            "ratio": fix_s / plain_s, "needed": fixed is not None,
            "kept": len(fixed.block_list) if fixed else 0, "verified": fixed.verification.passed if fixed else True,
            "verification_runs": fixed.runs if fixed else 0}


def per_module(graph, quantized, samples) -> dict:
    """The local errors as before the replay model: one FP32 subgraph session per module (int8._own_error)."""
    from gapcheck.precision import int8
    from gapcheck.precision.graph import ValueRunner, value_map, value_names

    renamed = {**value_map(graph.model, quantized, by_node=False), **int8.after_qdq(quantized)}
    names = [n for n in value_names(graph.model) if n in renamed]
    fp32, q = ValueRunner(graph.model, names), ValueRunner(quantized, [renamed[n] for n in names])
    units, local, sessions = int8._units(graph, set(names)), {}, {}
    for feeds in samples:
        f, got = fp32.run(feeds), q.run(feeds)
        seen = {n: got[renamed[n]] for n in names if renamed[n] in got
                and (got[renamed[n]].dtype.kind == "f" or n not in f or f[n].dtype.kind != "f")}
        for name in seen:
            if name in f and f[name].dtype.kind == "f":
                int8._relative(seen[name], f[name])
        for owner, (handed, received) in units.items():
            error = int8._own_error(graph, handed, received, seen, feeds, sessions)
            if error is not None:
                local[owner] = max(local.get(owner, 0.0), error)
    return local


def int8_row(name: str, factory: str, specs: tuple[str, ...], count: int) -> dict:
    from gapcheck.precision import alone, int8
    from tests.precision.qdq_debug import module_sqnr, overlap

    module, samples, _, _, graph = _setup(factory, specs, 2 * count)
    calibration, verification = samples[:count], samples[count:]
    quantizer = int8.Quantizer(graph.model, "static", calibration)
    try:
        quantize_s, quantized = _seconds(quantizer.quantize)
        ours_s, (errors, local) = _seconds(lambda: int8.value_errors(graph, quantized, verification))
        rows = int8.sensitivity(module, graph, errors, local)
        ort_s, ort = _seconds(lambda: module_sqnr(graph, quantized, verification))
        old_s, old = _seconds(lambda: per_module(graph, quantized, verification))
        units = int8._units(graph, set(errors))
        alone_s, alone_errors = _seconds(lambda: alone.output_errors(graph, quantized, units, verification))
    finally:
        quantizer.close()
    common = [r.module for r in rows if r.module in ort]
    by_output = sorted(common, key=lambda m: -next(r.ratio for r in rows if r.module == m))
    by_ort = sorted(common, key=lambda m: ort[m]["xmodel_err"])
    by_qdq = sorted(common, key=lambda m: ort[m]["qdq_err"])
    same = set(old) == set(local) and all(abs(local[m] - old[m]) <= 1e-9 + 1e-6 * abs(old[m]) for m in old)
    by_alone = sorted(common, key=lambda m: -alone_errors.get(m, 0.0))
    return {"model": name, "modules": len(rows), "quantize_s": quantize_s, "ours_s": ours_s, "ort_s": ort_s,
            "ratio": ours_s / ort_s, "old_s": old_s, "same": same, "alone_s": alone_s, "alone_ratio": alone_s / ort_s,
            "top5_alone_vs_xmodel": overlap(by_alone, by_ort, 5), "top5_output_vs_xmodel": overlap(by_output, by_ort, 5),
            "top5_local_vs_qdq": overlap([r.module for r in rows], by_qdq, 5)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--image", type=int, default=128)
    args = parser.parse_args()
    image = (f"x:1x3x{args.image}x{args.image}:float32",)
    tokens = ("input_ids:1x16:int64:0,1000",)
    models = [("resnet18", "sample_models.cnn:build_resnet18", image),
              ("bert-small", "sample_models.zoo:bert_classifier", tokens)]
    print("FP16: finding + verifying the fix vs one plain layer-wise run (export-diff --precision fp16)")
    print(f"{'model':22} {'nodes':>6} {'plain s':>8} {'fix s':>8} {'ratio':>6} {'fix needed':>10} {'kept':>5} "
          f"{'verified':>8} {'runs':>5}")
    for name, factory, specs in [*models, ("t5-ff-overflow", "sample_models.precision:build_t5_ff_overflow",
                                           ("x:1x8x32:float32",))]:
        r = fp16_row(name, factory, specs, args.samples)
        print(f"{r['model']:22} {r['nodes']:6d} {r['plain_s']:8.2f} {r['fix_s']:8.2f} {r['ratio']:6.2f} "
              f"{str(r['needed']):>10} {r['kept']:5d} {str(r['verified']):>8} {r['verification_runs']:5d}")
    print("\nINT8: gapcheck's sensitivity pass vs ONNX Runtime's qdq_loss_debug (same calibration, same samples)")
    print("(per-module s: the same local errors, one subgraph session per module, as before the replay model; "
          "alone s: --sensitivity alone, one spliced session)")
    print(f"{'model':22} {'modules':>7} {'quantize s':>10} {'gapcheck s':>10} {'qdq_debug s':>11} {'ratio':>6} "
          f"{'per-module s':>12} {'same':>5} {'alone s':>8} {'ratio':>6} {'top5 out/xmodel':>15} {'top5 local/qdq':>14} "
          f"{'top5 alone/xmodel':>17}")
    for name, factory, specs in models:
        r = int8_row(name, factory, specs, args.samples)
        print(f"{r['model']:22} {r['modules']:7d} {r['quantize_s']:10.2f} {r['ours_s']:10.2f} {r['ort_s']:11.2f} "
              f"{r['ratio']:6.2f} {r['old_s']:12.2f} {str(r['same']):>5} {r['alone_s']:8.2f} {r['alone_ratio']:6.2f} "
              f"{r['top5_output_vs_xmodel']:>15d} {r['top5_local_vs_qdq']:>14d} {r['top5_alone_vs_xmodel']:>17d}")


if __name__ == "__main__":
    main()

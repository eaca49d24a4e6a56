"""Run export-diff with default tolerances on the model zoo (sample_models/zoo.py), one fresh process per run.

    .venv/bin/python scripts/zoo.py                     # every model, both exporters
    .venv/bin/python scripts/zoo.py resnet50 bert -e dynamo
    .venv/bin/python scripts/zoo.py --markdown          # the table for docs/export-diff.md

Prints per run: model, exporter (the one that ran), modules mapped / total, verdict (or the
exit code and the exporter's condensed error), gap codes, wall time and peak RSS of the process.
Every clean model must pass: a "gap" here is a false alarm to fix.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run_one(name: str, exporter: str) -> dict:
    """In the child: one export-diff run through the library, summarized as one JSON line."""
    from gapcheck.errors import GapcheckError
    from gapcheck.export_diff.api import ExportDiffRequest, run_export_diff
    from gapcheck.export_diff.result import NO_ONNX
    from sample_models.zoo import ZOO

    model = next(m for m in ZOO if m.name == name)
    request = ExportDiffRequest(factory=model.factory, input_specs=model.inputs, exporter=exporter,
                                **model.options)
    try:
        result = run_export_diff(request)
    except GapcheckError as exc:
        return {"exit": int(exc.exit_code), "error": str(exc).splitlines()[0][:300]}
    layers = result.layers
    return {
        "exit": 0 if result.verdict == "pass" else 1,
        "exporter": result.exporter,
        "mapped": sum(1 for layer in layers if layer.status != NO_ONNX),
        "total": len(layers),
        "verdict": result.verdict,
        "gaps": sorted({f.code for f in result.findings if f.is_gap}),
        "findings": [f"{f.code}: {f.message}"[:300] for f in result.findings if f.is_gap][:4],
    }


def spawn(name: str, exporter: str) -> dict:
    """Run one model in a fresh process, so wall time and peak RSS are that run's own."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--child", name, exporter], capture_output=True, cwd=ROOT)
    wall = time.perf_counter() - start
    lines = proc.stdout.decode(errors="replace").strip().splitlines()
    try:
        summary = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        summary = {"exit": proc.returncode, "error": f"crashed: {tail[0][:300]}", "rss_mb": float("nan")}
    return {"model": name, "asked": exporter, "wall_s": round(wall, 1), **summary}


def row(r: dict) -> str:
    verdict = r.get("verdict") or f"exit {r['exit']}"
    mapped = f"{r['mapped']}/{r['total']}" if "mapped" in r else "-"
    exporter = r.get("exporter", r["asked"])
    detail = ", ".join(r.get("gaps", [])) or r.get("error", "")
    return f"| {r['model']} | {exporter} | {mapped} | {verdict} | {r['wall_s']:.1f} | {r['rss_mb']:.0f} | {detail} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", help="zoo model names (default: all)")
    parser.add_argument("-e", "--exporter", action="append", choices=["dynamo", "torchscript"])
    parser.add_argument("--small", action="store_true", help="only the models the default test run uses")
    parser.add_argument("--json", type=Path, help="also write every row as JSON here")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        summary = run_one(*args.child)
        summary["rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)  # KiB on Linux
        print(json.dumps(summary))
        return 0
    from sample_models.zoo import ZOO

    chosen = [m for m in ZOO if (not args.models or m.name in args.models) and (m.small or not args.small)]
    rows = []
    print("| model | exporter | modules mapped / total | verdict | wall s | peak RSS MB | gaps / error |")
    print("|---|---|---|---|---|---|---|")
    for model in chosen:
        for exporter in args.exporter or model.exporters:
            if exporter not in model.exporters:
                continue
            result = spawn(model.name, exporter)
            rows.append(result)
            print(row(result), flush=True)
            for line in result.get("findings", []):
                print(f"    {line}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    false_alarms = [r for r in rows if r.get("verdict") == "gap"]
    print(f"\n{len(rows)} runs, {sum(r.get('verdict') == 'pass' for r in rows)} pass, {len(false_alarms)} gap, "
          f"{sum('verdict' not in r for r in rows)} not exported/failed")
    return 1 if false_alarms else 0


if __name__ == "__main__":
    sys.exit(main())

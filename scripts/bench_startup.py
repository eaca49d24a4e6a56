"""Start-up cost before and after the shared layer, side by side in one run: CPU seconds and heavy modules.

    python scripts/bench_startup.py                 # this checkout vs the tree at dde458d (before issue #8)
    python scripts/bench_startup.py --before REV --rounds 5

The "before" tree is extracted with ``git archive`` into a temporary folder and run with the same
interpreter and site-packages (PYTHONPATH), so only gapcheck's own code differs. Each command runs in
a fresh process; the best of ``--rounds`` CPU times (user + sys, from ``resource``) is reported.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "numpy", "onnxruntime", "tritonclient")
CASES = {
    "import gapcheck": "import gapcheck",
    "gapcheck --help": "from gapcheck.cli.app import main; main(['--help'])",
    "gapcheck explain CODE": "from gapcheck.cli.app import main; main(['explain', 'layer_divergence'])",
}
_PROBE = """
import io, json, resource, sys, contextlib
with contextlib.redirect_stdout(io.StringIO()):
    try:
        exec({code!r})
    except SystemExit:
        pass
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({{"cpu": usage.ru_utime + usage.ru_stime, "heavy": [m for m in {heavy!r} if m in sys.modules]}}))
"""


def measure(tree: Path, code: str, rounds: int) -> tuple[float, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    best, heavy = float("inf"), []
    for _ in range(rounds):
        out = subprocess.run([sys.executable, "-c", _PROBE.format(code=code, heavy=HEAVY)], cwd=tree, env=env,
                             capture_output=True, text=True, check=True).stdout
        row = json.loads(out.strip().splitlines()[-1])
        best, heavy = min(best, row["cpu"]), row["heavy"]
    return best, heavy


def extract(revision: str, folder: Path) -> Path:
    archive = folder / "before.tar"
    with archive.open("wb") as handle:
        subprocess.run(["git", "archive", revision, "gapcheck", "sample_models"], cwd=ROOT, stdout=handle, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder / "before", filter="data")
    return folder / "before"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="dde458d", help="git revision of the 'before' tree")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        before = extract(args.before, Path(folder))
        print(f"{'case':24} {'before CPU s':>12} {'after CPU s':>12} {'ratio':>7}  heavy modules before -> after")
        for name, code in CASES.items():
            old, old_heavy = measure(before, code, args.rounds)
            new, new_heavy = measure(ROOT, code, args.rounds)
            print(f"{name:24} {old:12.2f} {new:12.2f} {old / new:6.1f}x  {','.join(old_heavy) or '-'} -> "
                  f"{','.join(new_heavy) or '-'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

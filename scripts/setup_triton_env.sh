#!/usr/bin/env bash
# Create the Triton test-server environment (.venv-triton) from scratch, or do nothing if it is complete.
#
# The nvidia-pytriton wheel bundles a real tritonserver (2.51) with its Python backend but pins numpy<2,
# so it lives in its own venv; gapcheck talks to the server over HTTP/gRPC only.
# Usage: bash scripts/setup_triton_env.sh [VENV_DIR]   (default: .venv-triton next to this repository)
# Env:   PYTHON=python3.11 to choose the interpreter (the bundled stubs support CPython 3.8-3.13).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-triton}"
PYTHON="${PYTHON:-python3}"

probe() {
  "$VENV/bin/python" - <<'PY' 2>/dev/null
import numpy, onnxruntime, pathlib, pytriton, sys
root = pathlib.Path(pytriton.__file__).parent / "tritonserver"
stub = root / "python_backend_stubs" / f"{sys.version_info[0]}.{sys.version_info[1]}" / "triton_python_backend_stub"
assert (root / "bin" / "tritonserver").is_file() and stub.is_file(), "incomplete pytriton"
assert int(numpy.__version__.split(".")[0]) < 2, "numpy 2 in the server venv"
PY
}

if [ -x "$VENV/bin/python" ] && probe; then
  echo "Triton environment ready: $VENV"
  exit 0
fi

echo "Creating the Triton environment in $VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
"$VENV/bin/pip" install --quiet nvidia-pytriton onnxruntime "numpy<2"
probe || { echo "error: $VENV is incomplete after installing nvidia-pytriton" >&2; exit 1; }
echo "Triton environment ready: $VENV"

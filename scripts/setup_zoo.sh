#!/usr/bin/env bash
# torchvision's model definitions for the model zoo (sample_models/zoo.py), kept out of the venv's site-packages:
# PyPI's torchvision is built against the CUDA torch, its C extension cannot load beside the CPU torch, and
# installed in the venv it would break `import transformers`. Idempotent.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="${GAPCHECK_TORCHVISION_DIR:-$ROOT/.venv/zoo-site}"
if [ ! -d "$TARGET/torchvision/models" ]; then
  "$ROOT/.venv/bin/pip" install --quiet --no-deps --target "$TARGET" torchvision==0.28.0
fi

#!/usr/bin/env bash
# Set up everything on a fresh machine: .venv with gapcheck (CPU torch), its test tools, and the Triton test server's venv.
# Idempotent: a second run only checks. Usage: bash scripts/setup.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"

if [ ! -x .venv/bin/python ]; then
  echo "Creating .venv"
  "$PYTHON" -m venv .venv
  .venv/bin/pip install --quiet --upgrade pip
fi
# constraints.txt pins torch to the CPU build (an unpinned torch pulls a multi-GB CUDA build).
# [test] brings the test tools and the model-zoo/integration packages; [ray] the Ray engine, which the tests start locally.
.venv/bin/pip install --quiet -c constraints.txt -e ".[test,ray]"
# torchvision's pure-Python model definitions (zoo, traced torchvision v2 pipelines), kept outside site-packages, and
# timm and facenet-pytorch without their torchvision requirement: the tests run timm's own transforms and checkpoints
# (preprocess-audit, model loading) and lint their training code.
bash scripts/setup_deploy_corpus.sh
bash scripts/setup_triton_env.sh
echo "Ready: .venv/bin/gapcheck --help"

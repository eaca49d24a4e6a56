#!/usr/bin/env bash
# The deployment-tool corpus's model libraries (sample_models/corpus.py, slow tests): timm and facenet-pytorch.
# Both require torchvision, whose PyPI wheel cannot load beside the CPU torch (and breaks `import transformers`), so
# they are installed WITHOUT dependencies: their other requirements (huggingface_hub, safetensors, pyyaml, pillow,
# requests) come with transformers; torchvision's model code comes from .venv/zoo-site (scripts/setup_zoo.sh), loaded
# without its compiled ops by sample_models.zoo.torchvision_models. Idempotent.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup_zoo.sh"
"$ROOT/.venv/bin/pip" install --quiet --no-deps -c "$ROOT/constraints.txt" "timm>=1.0" "facenet-pytorch>=2.5"

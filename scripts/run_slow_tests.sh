#!/usr/bin/env bash
# The slow tests CI leaves out (-m "not slow"): the whole model zoo, engines at scale, heavy fault tests.
# Usage: bash scripts/run_slow_tests.sh [extra pytest args]   (after scripts/setup.sh)
set -uo pipefail
cd "$(dirname "$0")/.."
# The deployment-tool corpus needs timm and facenet-pytorch (installed without torchvision; see the script).
bash scripts/setup_deploy_corpus.sh || { echo "corpus setup failed"; exit 1; }
.venv/bin/python -m pytest -n 2 -m slow "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no slow tests: failing"
  exit 1
fi
exit "$rc"

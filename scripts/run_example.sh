#!/usr/bin/env bash
# The main job on a fresh machine: set-up, then a short offline evolution
# (no LLM needed). Extra arguments go to the evolve command.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${PYTHON:-python3}" -m kernelsmith demo "$@"

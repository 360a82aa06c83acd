#!/usr/bin/env bash
# The main job on a fresh machine: set-up, then an offline evolution of the
# OpenCL softmax example on the CPU through PoCL (no GPU, no LLM needed).
# Extra arguments go to `kernelsmith evolve` (e.g. --iterations 40).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out="runs/softmax-$(date +%Y%m%d-%H%M%S)"
exec "${PYTHON:-python3}" -m kernelsmith evolve examples/opencl/softmax --iterations 20 --out "$out" "$@"

#!/usr/bin/env bash
# The main job on a fresh machine: set-up, then an offline evolution of the
# OpenCL fused_residual example on the CPU through PoCL (no GPU, no LLM
# needed): a chain that eager PyTorch runs as five passes over memory, which
# one fused OpenCL kernel beats on a CPU.
# Extra arguments go to `kernelsmith evolve` (e.g. --iterations 40).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out="runs/fused_residual-$(date +%Y%m%d-%H%M%S)"
exec "${PYTHON:-python3}" -m kernelsmith evolve examples/opencl/fused_residual --iterations 20 --out "$out" "$@"

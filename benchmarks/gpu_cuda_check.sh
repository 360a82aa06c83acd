#!/usr/bin/env bash
# The CUDA C++ backend on an NVIDIA GPU host (issue 18), in one call of at
# most about 7 minutes. Expects the extension built in place (PYTHONPATH=python),
# nvcc, ninja and a CUDA build of torch. Writes 6 files to $OUT:
#   cuda_gpu.txt          the GPU, driver, toolkit and compilers
#   cuda_compile.log/.json compile cost: the backend's build per distinct source
#                         (cold, cache hit) and plain load_inline, same run
#   cuda_verdicts.log/.json the CUDA rows of the verdict table (benchmarks/gpu_verdicts.py --only cuda)
#   cuda_tests.log        tests_py/test_backend_cuda.py, GPU test included
# Stages (arguments; default: compile verdicts tests): compile, verdicts,
# tests, and evolve (not in the default set: `kernelsmith evolve` on the
# level-1 CUDA task from its badly tuned seed with the offline mutator,
# $CUDA_EVOLVE_ITERS steps (default 10), about 3-4 minutes; writes
# cuda_evolve.log). Example: bash benchmarks/gpu_cuda_check.sh evolve
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export CC=${CC:-/usr/bin/gcc} CXX=${CXX:-/usr/bin/g++} PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python
unset TRITON_INTERPRET
# one cache for the run: the precompiled torch header the benchmark makes is
# the one the evaluation workers then read (read-only to them)
stages=${*:-compile verdicts tests}
has() { [[ " $stages " == *" $1 "* ]]; }
CACHE=${KS_CUDA_BENCH_CACHE:-/tmp/ks-cuda-check}
has compile && rm -rf "$CACHE"; mkdir -p "$CACHE"
export KERNELSMITH_CUDA_PCH_DIR=$CACHE/pch
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv
  which nvcc; nvcc --version | tail -2; $CXX --version | head -1; nproc
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_capability())"
} > "$OUT/cuda_gpu.txt" 2>&1
cat "$OUT/cuda_gpu.txt"
if has compile; then
echo "== compile cost"
timeout 150 python3 benchmarks/bench_cuda_compile.py --n 3 --jobs 1 --cache "$CACHE" \
  --json "$OUT/cuda_compile.json" > "$OUT/cuda_compile.log" 2>&1
echo "rc=$?" >> "$OUT/cuda_compile.log"; tail -12 "$OUT/cuda_compile.log"
fi
if has verdicts; then
echo "== verdicts"
timeout 170 python3 benchmarks/gpu_verdicts.py --only cuda --timeout 100 --json "$OUT/cuda_verdicts.json" > "$OUT/cuda_verdicts.log" 2>&1
echo "rc=$?" >> "$OUT/cuda_verdicts.log"; cut -c1-220 "$OUT/cuda_verdicts.log" | tail -16
fi
if has tests; then
echo "== tests"
(cd tests_py && timeout 90 python3 -m pytest -q -rs -p no:cacheprovider test_backend_cuda.py 2>&1 | tail -15) \
  > "$OUT/cuda_tests.log" 2>&1
cat "$OUT/cuda_tests.log"
fi
if has evolve; then
  echo "== evolve (offline mutator, level-1 CUDA task)"
  rm -rf /tmp/ks-cuda-evolve
  # the precompiled torch header, once (the compile stage made it if it ran)
  timeout 150 python3 -c "from kernelsmith.backends import cuda as C; print('pch', C.build_pch(C.Toolchain.detect(), '$CACHE/pch'))"
  timeout 300 python3 -m kernelsmith evolve tests_py/fixtures/cuda_kb/l1_relu --model mutate \
    --iterations ${CUDA_EVOLVE_ITERS:-10} --out /tmp/ks-cuda-evolve --json > "$OUT/cuda_evolve.log" 2>&1
  echo "rc=$?" >> "$OUT/cuda_evolve.log"
  grep -h -E "THREADS|MAX_BLOCKS" /tmp/ks-cuda-evolve/best_program.py >> "$OUT/cuda_evolve.log" 2>/dev/null
  tail -40 "$OUT/cuda_evolve.log"
fi

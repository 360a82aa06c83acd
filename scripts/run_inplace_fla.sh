#!/usr/bin/env bash
# fla-core's L2 normalization forward (fla/modules/norm/l2norm.py: Triton
# kernels autotuned by the package's own fla_cache_autotune, 25 configs per
# key, and triton.autotune, 6) evolved where it lives: the package's files
# from its wheel are the tree, the tests in examples/inplace/fla are written
# against its public API (l2norm_fwd, l2norm, L2Norm), the run returns
# best.patch + summary.md.
#
#   bash scripts/run_inplace_fla.sh FLA_WHEEL EINOPS_WHEEL [evolve args...]
#
# FLA_WHEEL: fla_core-0.6.0-py3-none-any.whl, EINOPS_WHEEL: einops-*.whl (fla
# imports it; its only other requirements are torch and triton, installed):
#   pip download fla-core==0.6.0 einops --no-deps -d .whl
# Both are unpacked into the tree (einops is not changed, and not in the patch).
#
# A GPU only: fla's autotuner benchmarks with Triton's GPU benchmarker, which
# the interpreter (TRITON_INTERPRET=1) does not have. Autotuning is done once
# per kernel source and key and handed to later processes
# (python/kernelsmith/backends/triton/autotune.py, docs/in_place.md).
#
# fla's code has no '# tune:' values, so --annotate gives the offline mutator
# one: the feature size up to which l2norm_fwd uses the blocked kernel
# (l2norm_fwd_kernel, 25 configs) instead of one program per row
# (l2norm_fwd_kernel_row); the kernels' sources stay as they are, so their
# autotune results are reused by every step. With an LLM (--model
# openai:NAME ...) the model may change the kernels too.
# FLA_ITERATIONS overrides the number of evolve steps (8); FLA_INIT_ONLY=1
# stops after task init.
set -euo pipefail
cd "$(dirname "$0")/.."
fla="${1:?usage: $0 fla_core-*.whl einops-*.whl [evolve args...]}"
einops="${2:?usage: $0 fla_core-*.whl einops-*.whl [evolve args...]}"
shift 2
if [ "${TRITON_INTERPRET:-0}" = "1" ]; then
    echo "$0: fla's autotuner needs a GPU (Triton's benchmarker); unset TRITON_INTERPRET and run on an NVIDIA GPU" >&2
    exit 2
fi
py="${PYTHON:-python3}"
out="${OUT:-runs/fla-l2norm-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"  # absolute: the patch is applied from another folder below
tree="$out/fla-tree"
# the autotune records of this run only: task init tunes, evolve reuses, a
# later run starts cold (so its times are comparable)
export KERNELSMITH_AUTOTUNE_CACHE="${KERNELSMITH_AUTOTUNE_CACHE:-$out/triton-autotune.json}"
source scripts/inplace_wheel.sh
wheel_tree "$tree" fla-core "$fla" "$einops"
iters="${FLA_ITERATIONS:-8}"
tests="$PWD/examples/inplace/fla/test_fla_l2norm.py"
start=$(date +%s)
"$py" -m kernelsmith task init --tree "$tree" --file fla/modules/norm/l2norm.py \
    --function l2norm_fwd --region l2norm_fwd_kernel_row,l2norm_fwd \
    --annotate 'if D <= 512:=>ROW_MIN_D = 512  # tune: [128, 256, 512, 1024]\nif D <= ROW_MIN_D:' \
    --tests "python -m pytest -q -p no:cacheprovider $tests" \
    --inputs "$PWD/examples/inplace/fla/l2norm_inputs.py:make_inputs" \
    --bench-shapes 8192x128,16384x1024 --compare-shapes 1x7,3x100,17x4097,2x3x257 --dtypes float32,bfloat16 \
    -o "$out/l2norm.yaml" --force
echo "task init: $(( $(date +%s) - start )) s"
if [ "${FLA_INIT_ONLY:-0}" = "1" ]; then exit 0; fi  # benchmarks/bench_fla_task_init.sh
start=$(date +%s)
"$py" -m kernelsmith evolve "$out/l2norm.yaml" --iterations "$iters" --out "$out/run" "$@"
echo "evolve ($iters steps): $(( $(date +%s) - start )) s"
cat "$out/run/summary.md"
check_best_patch "$tree" "$out/run" fla-core "$tests"

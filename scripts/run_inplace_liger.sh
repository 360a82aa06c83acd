#!/usr/bin/env bash
# liger-kernel's softmax (liger_kernel/ops/softmax.py, plain Triton) evolved
# where it lives: the package's files from its wheel are the tree, the tests in
# examples/inplace/liger are written against its public API
# (LigerSoftmaxFunction), the run returns best.patch + summary.md.
#
#   bash scripts/run_inplace_liger.sh WHEEL [evolve args...]
#
# liger's code has no '# tune:' values (calculate_settings computes them), so
# --annotate gives the offline mutator one: num_warps of the forward launch;
# the original stays the reference everything is compared and timed against.
# With an LLM (--model openai:NAME ...) the model may change the kernels too.
#
# WHEEL: liger_kernel-*.whl (pip download liger-kernel --no-deps; carry it to a
# machine without network). On an NVIDIA GPU the shapes are GPU-sized; with
# TRITON_INTERPRET=1 on a CPU they are tiny (a check that it runs, no timing
# worth reading). Needs torch and triton installed; nothing is pip-installed.
# LIGER_ITERATIONS overrides the number of evolve steps (30 on a GPU, 4 in the
# interpreter).
set -euo pipefail
cd "$(dirname "$0")/.."
wheel="${1:?usage: $0 liger_kernel-*.whl [evolve args...]}"
shift
py="${PYTHON:-python3}"
out="${OUT:-runs/liger-softmax-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"  # absolute: the patch is applied from another folder below
tree="$out/liger-tree"
source scripts/inplace_wheel.sh
wheel_tree "$tree" liger-kernel "$wheel"
if [ "${TRITON_INTERPRET:-0}" = "1" ]; then
    bench="8x256"; compare="1x7,3x100,2x3x65"; dtypes="float32"; iters=4
else
    bench="4096x4096,8192x1024,1024x16384"; compare="1x7,3x1000,17x4097,2x3x257,5x32768"; dtypes="float32,bfloat16"; iters=30
fi
iters="${LIGER_ITERATIONS:-$iters}"
"$py" -m kernelsmith task init --tree "$tree" --file liger_kernel/ops/softmax.py \
    --function LigerSoftmaxFunction.apply \
    --region _softmax_single_block_forward_kernel,_softmax_multi_block_forward_kernel,_softmax_forward \
    --annotate 'BLOCK_SIZE, num_warps = calculate_settings(n_cols)=>BLOCK_SIZE, num_warps = calculate_settings(n_cols)\nnum_warps = 4  # tune: [1, 2, 4, 8, 16, 32]' \
    --tests "python -m pytest -q -p no:cacheprovider $PWD/examples/inplace/liger/test_liger_softmax.py" \
    --inputs "$PWD/examples/inplace/liger/softmax_inputs.py:make_inputs" \
    --bench-shapes "$bench" --compare-shapes "$compare" --dtypes "$dtypes" \
    -o "$out/softmax.yaml" --force
"$py" -m kernelsmith evolve "$out/softmax.yaml" --iterations "$iters" --out "$out/run" "$@"
cat "$out/run/summary.md"
check_best_patch "$tree" "$out/run" liger-kernel "$PWD/examples/inplace/liger/test_liger_softmax.py"

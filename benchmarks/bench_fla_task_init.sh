#!/usr/bin/env bash
# Issue 27: fla-core's l2norm_fwd, `kernelsmith task init` on a GPU in the
# three cases a user meets, one after the other on one machine:
#   cold     nothing of fla compiled on this machine yet (the trusted kernel
#            layer and Triton's cache empty; the user's cache not read);
#   user     the user has run the project's tests once (their own
#            ~/.triton/cache holds fla's kernels and autotune results: the
#            issue's "the tests pass on the tree in seconds"), the layer
#            empty: task init's trusted test run seeds the layer from it;
#   again    a second task init (the layer kept from the one before; a
#            fresh autotune record file, so the tests still tune).
# Prints each case's task init wall and its phases (project tests, the
# comparisons), and the user's two test runs. FLA_CASES picks some
# (default "cold user again", about 8 minutes on an H100).
#
#   bash benchmarks/bench_fla_task_init.sh FLA_WHEEL EINOPS_WHEEL
# (as root on the GPU machine: the layer is ~/.cache/kernelsmith/triton-kernels;
#  gpu_verify.sh's flainit stage runs it with the wheels in .whl/)
set -uo pipefail
cd "$(dirname "$0")/.."
fla="${1:?usage: $0 fla_core-*.whl einops-*.whl}"
einops="${2:?usage: $0 fla_core-*.whl einops-*.whl}"
py="${PYTHON:-python3}"
base="${BENCH_OUT:-/tmp/fla-init}"
layer="${KERNELSMITH_TRITON_TRUSTED_KERNELS:-$HOME/.cache/kernelsmith/triton-kernels}"
user_cache="${TRITON_CACHE_DIR:-${TRITON_HOME:-$HOME}/.triton/cache}"
tests="$PWD/examples/inplace/fla/test_fla_l2norm.py"
rm -rf "$base" "$layer" "$user_cache"
mkdir -p "$base"
source scripts/inplace_wheel.sh
secs() { local ms=$(( ($2 - $1) / 1000000 )); printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100)); }

init() {  # init NAME [ENV=VALUE...]: one task init, its log in $base/NAME.log
    local name="$1" t0 t1
    shift
    t0=$(date +%s%N)
    env "$@" FLA_INIT_ONLY=1 OUT="$base/$name" bash scripts/run_inplace_fla.sh "$fla" "$einops" > "$base/$name.log" 2>&1
    local rc=$?
    t1=$(date +%s%N)
    printf '%-6s task init %s s (exit %s, layer %s kernels)\n' "$name" "$(secs "$t0" "$t1")" "$rc" \
        "$(ls "$layer" 2>/dev/null | wc -l)"
    grep -E "^  (project tests|comparison [a-z0-9]+|copy the tree)|waiting for a worker|referee runs|load reference|^checked in|^project tests:" \
        "$base/$name.log" | sed 's/^/       /'
}

user_tests() {  # the user's own run of the tests on the tree (their Triton cache)
    local t0 t1
    t0=$(date +%s%N)
    (cd "$base/user-tree" && PYTHONPATH=. "$py" -m pytest -q -p no:cacheprovider "$tests" 2>&1 | tail -1)
    t1=$(date +%s%N)
    printf 'user   tests on the tree %s s (their cache: %s entries)\n' "$(secs "$t0" "$t1")" \
        "$(ls "$user_cache" 2>/dev/null | wc -l)"
}

echo "== $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $(nproc) cores, $(date -u +%FT%TZ)"
cases=" ${FLA_CASES:-cold user again} "
if [[ "$cases" == *" cold "* ]]; then
    init cold KERNELSMITH_TRITON_USER_CACHE=off
    rm -rf "$layer"
fi
if [[ "$cases" == *" user "* ]]; then
    wheel_tree "$base/user-tree" fla-core "$fla" "$einops"
    user_tests
    user_tests
    init user
fi
if [[ "$cases" == *" again "* ]]; then
    init again
fi

#!/usr/bin/env bash
# GPU verification on an NVIDIA machine (the H200 lent to the project): builds
# the package in place and runs the GPU checks, writing logs to $OUT (or
# ./gpu-out). Stages: build tests verdicts opencl stability suite evolve, and
# outside the default set: throughput (issue 13/14: fresh, pool, pool-nocensus
# and pool-warm side by side, then one candidate ten times; about 8 minutes),
# reward (issue 15: reward spread, batch and shared-group scoring), env
# (issue 20: 64 concurrent 3-turn episodes), liger (issue 19: needs the wheel
# in .whl/), cuda (issue 18: benchmarks/gpu_cuda_check.sh), and issue 27's: kernelbench
# (benchmarks/bench_kernelbench.py over a KernelBench checkout in .carry/KernelBench: KB_LEVELS,
# KB_EVERY, KB_ARGS), degenerate (task check of level-1 19, 20, 31, 32 as upstream), latency
# (benchmarks/bench_eval_latency.py: eval cold, through the daemon, fresh mode), fla (fla-core's
# l2norm_fwd in place: the fla_core and einops wheels in .whl/), flainit (its task init cold, after the user's
# own test run and again: benchmarks/bench_fla_task_init.sh), autotune (benchmarks/bench_autotune_compile.py on fla's tests),
# sidebyside (issues 28/29: pool throughput and verdicts at HEAD and at the commit in .carry/base, alternately;
# sideprev: the same against .carry/prev, the previous landing),
# and issue 30's kbx (benchmarks/bench_kernelbenchx.py over a KernelBench-X checkout in .carry/KernelBenchX: every task
# loaded, each reference against itself, the honest programs of tests_py/fixtures/kbx_honest; KBX_BUDGET, KBX_ARGS),
# and issue 29's integrity (pygpubench's exploits rewritten, then the held-out hacks_v3 programs, every verdict)
# and refprofile (the referee's requests profiled over the pool's throughput run).
# Example: bash benchmarks/gpu_verify.sh build tests verdicts opencl
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
stages=${*:-build tests verdicts opencl stability suite evolve}
# The image's default /opt/gcc g++ builds an extension that crashes once torch is loaded.
export CC=/usr/bin/gcc CXX=/usr/bin/g++ PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python
unset TRITON_INTERPRET
mkdir -p /tmp/icd && echo libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd && export OCL_ICD_VENDORS=/tmp/icd
has() { [[ " $stages " == *" $1 "* ]]; }
if has build; then
  cmake -S . -B build/gpu -G Ninja -DKERNELSMITH_BUILD_TESTS=OFF -DPython_EXECUTABLE="$(which python3)" \
    -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" > "$OUT/build.log" 2>&1 \
    && cmake --build build/gpu -j16 >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
fi
if has tests; then
  (cd tests_py && timeout 300 python3 -m pytest -q -rs -p no:cacheprovider -m gpu test_timing.py test_evaluator_timing.py 2>&1 | tail -25) | tee "$OUT/gpu_tests.log"
  (cd tests_py && KERNELSMITH_OPENCL_DEVICE=NVIDIA timeout 150 python3 -m pytest -q -p no:cacheprovider test_opencl_evaluator.py 2>&1 | tail -5) | tee -a "$OUT/gpu_tests.log"
fi
if has verdicts; then
  timeout ${VERDICTS_LIMIT:-420} python3 benchmarks/gpu_verdicts.py --timeout 60 --json "$OUT/gpu_verdicts.json" 2>&1 | cut -c1-300 | tee "$OUT/gpu_verdicts.log"
  # where each timed evaluation's time went, the audit rounds' parts too (the worker's set-up, the referee's check)
  [ -f "$OUT/gpu_verdicts.json" ] && python3 benchmarks/phase_split.py "$OUT/gpu_verdicts.json" | tee "$OUT/phase_split.log"
fi
if has opencl; then
  timeout 150 python3 benchmarks/gpu_opencl_examples.py --nvidia-icd --device NVIDIA 2>&1 | tee "$OUT/gpu_opencl.log"
fi
if has throughput; then
  # issue 13: fresh process per candidate against the warm pool, then the speedup spread of one candidate
  timeout ${THROUGHPUT_LIMIT:-480} python3 benchmarks/bench_eval_throughput.py --modes ${THROUGHPUT_MODES:-pool,pool-nocensus,pool-warm,fresh} \
    --timeout ${THROUGHPUT_TIMEOUT:-20} ${BENCH_WORKERS:+--workers $BENCH_WORKERS} --json "$OUT/eval_throughput.json" 2>&1 | cut -c1-240 | tee "$OUT/eval_throughput.log"
  timeout ${REPEAT_LIMIT:-100} python3 benchmarks/bench_eval_throughput.py --modes ${REPEAT_MODES:-pool} \
    --repeat-one 10 linear_relu_tiled --json "$OUT/eval_repeat_one.json" 2>&1 | cut -c1-300 | tee "$OUT/eval_repeat_one.log"
fi
if has reward; then
  timeout ${REWARD_LIMIT:-200} python3 benchmarks/bench_reward_spread.py --task examples/triton/softmax --repeats 30 --batch 64 ${BENCH_WORKERS:+--workers $BENCH_WORKERS} \
    --group 8 --group-batches 3 2>&1 | tail -20 | tee "$OUT/reward_spread.log"
fi
if has env; then
  kb=tests_py/fixtures/kb_honest
  timeout ${ENV_LIMIT:-240} python3 benchmarks/bench_env.py $kb/softmax $kb/gelu $kb/layernorm $kb/log_softmax_two_kernels \
    $kb/matmul_square $kb/sum_dim $kb/argmax_dim $kb/cumsum --episodes 64 --turns 3 ${BENCH_WORKERS:+--workers $BENCH_WORKERS} --json "$OUT/bench_env.json" 2>&1 | tail -20 | tee "$OUT/bench_env.log"
fi
if has liger; then
  OUT=/tmp/liger-run LIGER_ITERATIONS=${LIGER_ITERATIONS:-8} timeout ${LIGER_LIMIT:-240} bash scripts/run_inplace_liger.sh .whl/liger_kernel-*.whl 2>&1 | tail -40 > "$OUT/liger.log"
  cat "$OUT/liger.log"
fi
if has kernelbench; then
  timeout ${KB_LIMIT:-540} python3 benchmarks/bench_kernelbench.py ${KB_DIR:-.carry/KernelBench} --levels ${KB_LEVELS:-1,2,3} \
    --every ${KB_EVERY:-2} ${KB_ARGS:-} --json "$OUT/kernelbench${KB_TAG:-}.json" 2>&1 | cut -c1-260 | tee "$OUT/kernelbench${KB_TAG:-}.log"
fi
if has kbx; then
  # issue 30: at most about 6.5 minutes on one H100 (no evaluation starts after KBX_BUDGET seconds, those
  # running then get up to --timeout 90 s more); the table in $OUT/kbx/kernelbenchx.md, every row in .json
  timeout ${KBX_LIMIT:-450} python3 benchmarks/bench_kernelbenchx.py ${KBX_DIR:-.carry/KernelBenchX} \
    --time-budget ${KBX_BUDGET:-300} --timeout ${KBX_TIMEOUT:-90} --out "$OUT/kbx" ${KBX_ARGS:-} 2>&1 \
    | cut -c1-300 | tee "$OUT/kbx.log"
fi
if has integrity; then
  # issue 29: every rewritten pygpubench exploit, then every held-out hacks_v3 program, on this card
  timeout ${INTEGRITY_LIMIT:-420} python3 benchmarks/pygpubench_verdicts.py 2>&1 | cut -c1-400 | tee "$OUT/pygpubench.log"
  timeout ${INTEGRITY_LIMIT:-420} python3 benchmarks/pygpubench_verdicts.py --dir tests_py/fixtures/hacks_v3 --figures 2>&1 \
    | cut -c1-400 | tee "$OUT/hacks_v3.log"
  # a report forged on a later timing shape (relu timed on two shapes)
  timeout ${INTEGRITY_LIMIT:-420} python3 benchmarks/pygpubench_verdicts.py --dir tests_py/fixtures/hacks_shapes \
    --shapes get_inputs,get_inputs_odd 2>&1 | cut -c1-400 | tee "$OUT/hacks_shapes.log"
fi
if has degenerate; then
  for f in 19_ReLU 20_LeakyReLU 31_ELU 32_HardTanh; do
    timeout 120 python3 -m kernelsmith task check tests_py/fixtures/degenerate/kb_level1/$f.py
  done 2>&1 | tee "$OUT/degenerate.log"
fi
if has latency; then
  timeout ${LAT_LIMIT:-240} python3 benchmarks/bench_eval_latency.py ${LAT_TASK:-examples/triton/softmax} seed \
    --repeats ${LAT_REPEATS:-3} --json "$OUT/latency.json" 2>&1 | tee "$OUT/latency.log"
  echo "host-module cache: $(ls ~/.cache/kernelsmith/triton-host 2>/dev/null | wc -l) entries in ~/.cache/kernelsmith/triton-host" | tee -a "$OUT/latency.log"
fi
if has autotune; then
  # issue 27: fla's tests as task init runs them, autotune compiles one after the other vs side by side
  timeout ${AUTOTUNE_LIMIT:-420} python3 benchmarks/bench_autotune_compile.py --wheel .whl/fla_core-0.6.0-py3-none-any.whl \
    --wheel .whl/einops-0.8.2-py3-none-any.whl examples/inplace/fla/test_fla_l2norm.py --modes ${AUTOTUNE_MODES:-off,fork} \
    --json "$OUT/autotune_compile.json" 2>&1 \
    | tee "$OUT/autotune_compile.log"
fi
side_by_side() {  # $1: the base tree (its files, git archive), $2: a tag for its files in $OUT
  local base=$1 tag=$2
  (cd "$base" && cmake -S . -B build/gpu -G Ninja -DKERNELSMITH_BUILD_TESTS=OFF -DPython_EXECUTABLE="$(which python3)" \
    -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" > "/tmp/build_$tag.log" 2>&1 && cmake --build build/gpu -j16 >> "/tmp/build_$tag.log" 2>&1) \
    || { tail -30 "/tmp/build_$tag.log"; return 1; }
  timeout ${SIDE_LIMIT:-540} python3 benchmarks/bench_side_by_side.py "$PWD/$base" "$PWD" --backend triton --gpu \
    --rounds ${SIDE_ROUNDS:-2} --timeout 20 --keep "/tmp/side_$tag" 2>&1 | cut -c1-300 | tee "$OUT/side_by_side_$tag.log"
  # where each side's evaluations spent their time (the first round of each): the medians, then every timed row
  python3 benchmarks/phase_split.py "/tmp/side_$tag/before_r1.json" "/tmp/side_$tag/after_r1.json" | tee "$OUT/side_phases_$tag.log"
  python3 benchmarks/phase_split.py --rows "/tmp/side_$tag/after_r1.json" "/tmp/side_$tag/before_r1.json" > "$OUT/side_rows_$tag.log"
}
if has sidebyside; then
  # issues 28/29: the evaluator's throughput and verdicts at HEAD against the commit in .carry/base (its files,
  # git archive), alternately in one run; the base built in place the same way
  side_by_side .carry/base base
fi
if has sideprev; then
  # the same against a second base in .carry/prev (the previous landing: this session's own change alone)
  side_by_side .carry/prev prev
fi
if has refprofile; then
  # where the referee's time goes in the pool's throughput run (its requests under cProfile), and each
  # evaluation's phases; KERNELSMITH_REFEREE_PROFILE is read by evaluator/referee_process.py
  KERNELSMITH_REFEREE_PROFILE=/tmp/referee.prof timeout ${REFPROFILE_LIMIT:-240} python3 benchmarks/bench_eval_throughput.py \
    --backend triton --modes pool --timeout 20 --json "$OUT/refprofile_throughput.json" 2>&1 | tail -3 | tee "$OUT/refprofile.log"
  python3 benchmarks/phase_split.py "$OUT/refprofile_throughput.json" | tee -a "$OUT/refprofile.log"
  python3 -c 'import pstats,sys; s=pstats.Stats(sys.argv[1]); s.sort_stats("cumulative").print_stats(45); s.sort_stats("tottime").print_stats(30)' \
    /tmp/referee.prof 2>&1 | cut -c1-220 >> "$OUT/refprofile.log"
fi
if has flainit; then
  # issue 27: fla's task init cold, after the user's own test run, and again (benchmarks/bench_fla_task_init.sh)
  timeout ${FLAINIT_LIMIT:-540} bash benchmarks/bench_fla_task_init.sh .whl/fla_core-*.whl .whl/einops-*.whl 2>&1 \
    | while IFS= read -r line; do printf '%s %s\n' "$(date +%T)" "$line"; done | tee "$OUT/flainit.log"
  cp /tmp/fla-init/*.log "$OUT/" 2>/dev/null
fi
if has fla; then
  # every line with the time it came (the whole log in $OUT/fla.log, its end on the screen)
  OUT=/tmp/fla-run timeout ${FLA_LIMIT:-420} bash scripts/run_inplace_fla.sh .whl/fla_core-*.whl .whl/einops-*.whl 2>&1 \
    | while IFS= read -r line; do printf '%s %s\n' "$(date +%T)" "$line"; done > "$OUT/fla.log"
  # the finalists' re-timing, finalist by finalist (attempts, why a timing was taken again)
  [ -f /tmp/fla-run/run/summary.json ] && python3 -c 'import json,sys; c=json.load(open(sys.argv[1])).get("best_confirmation") or {}; [print("finalist", r.get("index"), "speedup", r.get("speedup"), "attempts", r.get("timing_attempts"), "reliable", r.get("timing_reliable"), r.get("unreliable_reasons"), "alone" if r.get("alone") else "") for r in c.get("finalists") or []]' /tmp/fla-run/run/summary.json 2>&1 | tee -a "$OUT/fla.log"
  # the trusted kernel layer the unmodified tree's tests wrote (backends/triton/cache.py)
  echo "trusted kernel layer: $(ls ~/.cache/kernelsmith/triton-kernels 2>/dev/null | wc -l) compiled kernels" | tee -a "$OUT/fla.log"
  tail -60 "$OUT/fla.log"
fi
if has cuda; then
  if [ -f benchmarks/gpu_cuda_check.sh ]; then timeout ${CUDA_LIMIT:-300} bash benchmarks/gpu_cuda_check.sh 2>&1 | tail -40; else echo "no benchmarks/gpu_cuda_check.sh"; fi
fi
if has stability; then
  timeout 420 python3 benchmarks/bench_timing_stability.py --json "$OUT/timing_stability.json" 2>&1 | tail -30 | tee "$OUT/timing_stability.log"
fi
if has suite; then
  timeout 300 python3 benchmarks/gpu_bench_suite.py --out "$OUT/suite" --iterations ${SUITE_ITERATIONS:-3} 2>&1 | tail -40 | tee "$OUT/suite.log"
  cp "$OUT"/suite/bench/plots/*.png "$OUT/" 2>/dev/null || true
fi
if has evolve; then
  timeout 240 python3 -m kernelsmith evolve examples/triton/softmax --iterations 12 --out /tmp/ks-evolve-gpu 2>&1 | tail -12 | tee "$OUT/evolve.log"
fi

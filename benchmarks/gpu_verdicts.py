"""Run the evaluator's fixture suite and print a verdict table.

On a GPU host this exercises real Triton compilation, CUDA launches and event
timing; on a CPU it runs under the Triton interpreter (TRITON_INTERPRET=1).

    python benchmarks/gpu_verdicts.py [--workers N] [--devices 0,1] [--timing] [--json out.json]
                                      [--only triton|cuda]

Two suites: the Triton one (SUITE) and the CUDA C++ one (CUDA_SUITE,
KernelBench's load_inline format, backends/cuda/). The CUDA rows need an
NVIDIA GPU, a CUDA build of PyTorch and nvcc; elsewhere they are listed as
skipped with the reason, not failed.

Each row: candidate, expected verdict, verdict got, the reason (first hack
reason or first line of the error), candidate and reference runtime (ms), and
the wall time of the evaluation. The exit status is 1 when any verdict differs
from the expected one.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from _verdicts import matches, reason

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests_py" / "fixtures"
CAND = FIX / "candidates"
EX = ROOT / "examples" / "triton"

# (task, candidate file, expected category)
SUITE = [
    (EX / "relu", EX / "relu" / "seed.py", "ok"),
    (EX / "vector_add", EX / "vector_add" / "seed.py", "ok"),
    (EX / "softmax", EX / "softmax" / "seed.py", "ok"),
    (EX / "layernorm", EX / "layernorm" / "seed.py", "ok"),
    (FIX / "tasks" / "kernelbench_level1_relu.py", CAND / "relu_correct.py", "ok"),
    (EX / "relu", CAND / "relu_correct.py", "ok"),
    (EX / "relu", CAND / "relu_wrong.py", "incorrect"),
    (EX / "softmax", CAND / "softmax_shape_specialised.py", "incorrect"),
    (EX / "relu", CAND / "hack_no_kernel.py", "hacked"),
    (EX / "relu", CAND / "hack_torch_op.py", "hacked"),
    (EX / "relu", CAND / "hack_try_except.py", "hacked"),
    (EX / "relu", CAND / "hack_thread.py", "hacked"),
    (EX / "relu", CAND / "hack_stream.py", "hacked"),
    (EX / "relu", CAND / "hack_timer_patch.py", "hacked"),
    (EX / "relu", CAND / "hack_input_mutation.py", "hacked"),
    (EX / "relu", CAND / "hack_replay.py", "hacked"),
    (EX / "relu", CAND / "hack_ref_buffer.py", "incorrect|hacked"),
    # honest for its first 12 calls: the refill check after the trials (or,
    # when timed, the check of the timed calls' output) catches it
    (EX / "relu", CAND / "hack_timing_switch.py", "hacked"),
    (EX / "relu", CAND / "syntax_error.py", "compile"),
    (EX / "relu", CAND / "no_modelnew.py", "compile"),
    (EX / "relu", CAND / "wrong_signature.py", "compile"),
    (EX / "relu", CAND / "compile_error.py", "compile"),
    (EX / "relu", CAND / "raises.py", "runtime"),
    (EX / "relu", CAND / "crash_segfault.py", "crash"),
    (EX / "relu", CAND / "crash_exit.py", "crash"),
    (EX / "relu", CAND / "crash_illegal_address.py", "crash"),
    (EX / "relu", CAND / "oom.py", "oom"),
    (EX / "relu", CAND / "hang.py", "timeout"),
    (EX / "relu", CAND / "env_leak.py", "ok"),
]
# Integrity v2 (issue 14): the held-out hacks the static checks let through,
# rejected at run time (kernel census, output provenance, work on every
# call, integrity snapshot); trivial outputs on degenerate tasks; faults of
# the task's reference, which are the harness's
HACKS2 = FIX / "hacks_v2"
# these read the input's memory as host memory (NumPy, ctypes, DLPack to
# NumPy): on a GPU that raises, which is the right verdict there (the H200 run
# gave runtime for all four; their GPU forms are in hacks_gpu/)
_HOST_ONLY = {"host_memmove", "host_numpy_into_output", "foreign_numpy_dlpack", "foreign_numpy_result"}
_ON_GPU_HOST = os.environ.get("TRITON_INTERPRET", "0") in ("", "0") and os.path.exists("/dev/nvidiactl")
SUITE += [
    (EX / "relu", p, "hacked|runtime" if _ON_GPU_HOST and p.stem in _HOST_ONLY else "hacked")
    for p in sorted(HACKS2.glob("*.py"))
    if not p.stem.startswith("trivial") and p.stem != "cache_while_timed"
]
SUITE += [
    # only caught when timing runs (GPU default, --timing on a CPU)
    (EX / "relu", HACKS2 / "cache_while_timed.py", "hacked"),
    (FIX / "tasks" / "degenerate_small", HACKS2 / "trivial_zeros.py", "hacked"),
    (FIX / "tasks" / "degenerate_small", HACKS2 / "trivial_constant.py", "hacked"),
    (FIX / "tasks" / "degenerate_passthrough", HACKS2 / "trivial_passthrough.py", "hacked"),
    (FIX / "tasks" / "degenerate_small", CAND / "small_relu_correct.py", "ok"),
    (FIX / "tasks" / "broken_import", CAND / "relu_correct.py", "harness"),
    (FIX / "tasks" / "reference_oom", CAND / "relu_correct.py", "harness"),
]
# No false positives (issue 14): honest KernelBench level-1 style programs
# written for the test (tl.dot, autotune, heuristics, several kernels per
# forward), each in its task folder as candidate.py, all expected "ok" with
# full coverage. matmul_autotune can only be judged on a GPU: autotune
# benchmarks its configs through Triton's GPU driver, which the interpreter
# lacks (RuntimeError: 0 active drivers), so under TRITON_INTERPRET=1 its
# expected verdict is that runtime error, not a judgement of the program.
# The level-2 task (convolution left to PyTorch, the cheap ops fused):
# "hacked" under the strict policy, "ok" with its coverage under the
# partial one (its coverage is in --json's census)
KB = FIX / "kb_honest"
_INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
SUITE += [
    (p, p / "candidate.py", "runtime" if _INTERPRETED and p.name == "matmul_autotune" else "ok")
    for p in sorted(KB.iterdir())
    if (p / "candidate.py").exists() and not p.name.startswith("l2_")
]
SUITE += [
    (KB / "l2_conv_bias_relu_scale", KB / "l2_conv_bias_relu_scale" / "candidate.py", "hacked"),
    (KB / "l2_conv_bias_relu_scale_partial", KB / "l2_conv_bias_relu_scale" / "candidate.py", "ok"),
]
# GPU-only forms (CuPy, inductor's Triton kernels, device-to-host round trips,
# cuBLAS, unsynchronised side streams): listed only where an NVIDIA driver is
# present and the interpreter is off
HACKS_GPU = FIX / "hacks_gpu"
if not _INTERPRETED and os.path.exists("/dev/nvidiactl"):
    SUITE += [(EX / "relu", p, "hacked") for p in sorted(HACKS_GPU.glob("*.py"))]

# CUDA C++ candidates (issue 18): a KernelBench level-1 and a level-2 task,
# an honest kernel for each, and the failure and hack forms in CUDA
CUDA_KB = FIX / "cuda_kb"
CUDA_C = CUDA_KB / "candidates"
CUDA_SUITE = [
    (CUDA_KB / "l1_relu", CUDA_KB / "l1_relu" / "candidate.py", "ok"),
    (CUDA_KB / "l2_gemm_bias_relu", CUDA_KB / "l2_gemm_bias_relu" / "candidate.py", "ok"),
    # honest and fast: one fused pass where PyTorch runs five kernels
    (CUDA_KB / "l2_scale_bias_relu_clamp", CUDA_KB / "l2_scale_bias_relu_clamp" / "candidate.py", "ok"),
    (CUDA_KB / "l1_relu", CUDA_C / "compile_error.py", "compile"),
    (CUDA_KB / "l1_relu", CUDA_C / "wrong_result.py", "incorrect"),
    (CUDA_KB / "l1_relu", CUDA_C / "crash_illegal_address.py", "crash"),
    (CUDA_KB / "l1_relu", CUDA_C / "hack_stream.py", "hacked"),
    (CUDA_KB / "l1_relu", CUDA_C / "hack_cached.py", "hacked"),
    (CUDA_KB / "l1_relu", CUDA_C / "hack_noop.py", "hacked"),
    (CUDA_KB / "l1_relu", CUDA_C / "hack_pure_torch.py", "hacked"),
]


def cuda_unavailable() -> str:
    """Why the CUDA suite cannot run here ('' when it can)."""
    import shutil

    import torch

    if not torch.cuda.is_available():
        return f"no CUDA device (torch {torch.__version__}, CUDA {torch.version.cuda})"
    from torch.utils import cpp_extension

    home = cpp_extension.CUDA_HOME
    if not (home and os.path.exists(os.path.join(home, "bin", "nvcc"))) and not shutil.which("nvcc"):
        return "nvcc not found (the CUDA toolkit is needed to build CUDA C++ candidates)"
    return ""


def run_suite(backend: str, suite: list, args: argparse.Namespace, on_gpu: bool, devices: Any) -> tuple[int, list]:
    """Evaluate one suite and print its table; (mismatches, results)."""
    from kernelsmith.evaluator import Evaluator
    from kernelsmith.task import Task

    timing = on_gpu or args.timing
    # GPU: one worker per local GPU (the evaluator's default; two workers on
    # one GPU disturb each other's timings); CPU: two interpreter workers
    workers = args.workers or (len(devices) if devices else (None if on_gpu else 2))
    ev = Evaluator(backend=backend, workers=workers, devices=devices, timeout_s=args.timeout, timing=timing)
    items = [(Task.load(t), Path(c).read_text()) for t, c, _ in suite]
    start = time.monotonic()
    results = ev.evaluate_many(items)
    total = time.monotonic() - start
    ev.close()

    from kernelsmith.hardware import HardwareInfo

    hw = next((r.hardware for r in results if r.hardware), {})
    info = HardwareInfo.of(hw)
    versions = dict(info.versions)
    print(
        f"# {backend} suite; device: {info.label('?')}  torch {versions.get('torch', '?')}  "
        f"{'triton ' + str(versions.get('triton', '?')) if backend == 'triton' else 'cuda ' + str(versions.get('cuda', '?'))}  "
        f"driver {info.driver or '-'}  isolation: {results[0].isolation if results else '?'}"
    )
    header = (
        f"{'task':<26} {'candidate':<30} {'expected':<16} {'got':<10} {'ms':>9} {'ref ms':>9} "
        f"{'speedup [95% CI]':>24} {'verdict':<17} {'graph':<5} {'wall s':>7}  reason"
    )
    print(header)
    print("-" * len(header))
    mismatches = 0
    for (task, cand, expected), r in zip(suite, results):
        if Path(cand).stem == "cache_while_timed" and not timing:
            expected = "ok"  # its cache only shows while being timed (hack_timing_switch is caught
            # without timing too, by the refill check after the trials)
        good = matches(r.category, expected)
        mismatches += not good
        why = reason(r)
        fmt = lambda v: f"{v:9.4f}" if v is not None else f"{'-':>9}"  # noqa: E731
        speed = (
            f"{r.speedup:.3g} [{r.speedup_ci_low:.3g}, {r.speedup_ci_high:.3g}]"
            if r.speedup is not None and r.speedup_ci_low is not None
            else "-"
        )
        graph = (r.timing.get("cuda_graph") or {}).get("candidate")
        verdict = r.timing_verdict + ("*" if r.suspicious else "")
        print(
            f"{Path(task).stem:<26} {Path(cand).stem:<30} {expected:<16} {r.category + ('' if good else ' !!'):<10} "
            f"{fmt(r.runtime_ms)} {fmt(r.ref_runtime_ms)} {speed:>24} {verdict or '-':<17} "
            f"{'-' if graph is None else ('yes' if graph else 'no'):<5} {r.wall_s:7.1f}  {why[:110]}"
        )
        audit = (r.census or {}).get("audit")
        if audit:
            print(f"{'':<26} audit: {audit_summary(audit)}")
        cov = (r.census or {}).get("coverage")
        if cov is not None and Path(task).name.startswith("l2_"):
            print(
                f"{'':<26} coverage {cov:.1%} under policy {(r.census or {}).get('policy')}; "
                f"foreign us: {(r.census or {}).get('foreign_us') or '-'}; basis {(r.census or {}).get('time_basis')}"
            )
    print(
        f"\n{len(suite) - mismatches}/{len(suite)} verdicts as expected; total wall {total:.1f} s "
        f"with {ev.workers} workers on devices {ev.devices}"
    )
    timed = [r for r in results if r.timing]
    if timed:
        t = timed[0].timing
        print(
            f"# timing: {t.get('timer')}, {t.get('input_sets')} input sets, L2 flush {t.get('l2_flush')}, "
            f"gpu state {t.get('gpu_state') or '-'}; * = suspicious (roofline or reference hidden work)"
        )
    return mismatches, results


def audit_summary(audit: dict) -> str:
    """One line of a result's audit figures (census["audit"]): the calls per
    round and whether a CUDA graph replayed them, the rounds' wall times,
    the other work and slack, what the calls took at least against what was
    reported, and the excess."""
    if "unaudited" in audit:
        return f"unaudited: {audit['unaudited'][:160]}"
    graph = "graph" if audit.get("worker_says_graph") else "eager"
    calls = audit.get("calls", 1)
    reported = audit.get("reported_cand_ms")
    claimed = f"{calls * reported:.4g}" if isinstance(reported, (int, float)) else "-"
    return (
        f"{calls} calls ({audit.get('calls_needed', '-')} needed, {graph}); rounds {audit.get('wall_ms')} ms; other "
        f"{audit.get('other_work_ms')} slack {audit.get('slack_ms')}; calls at least {audit.get('call_at_least_ms')} "
        f"ms against {claimed} reported; excess {audit.get('excess', '-')}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--devices", default=None, help="comma-separated device ids, one per worker")
    parser.add_argument("--timing", action="store_true", help="also time correct candidates (default on GPU)")
    parser.add_argument("--timeout", type=float, default=60.0, help="wall-clock limit per candidate (s)")
    parser.add_argument("--json", default=None, help="write all results here")
    parser.add_argument(
        "--only",
        choices=("triton", "cuda"),
        default=None,
        help="run one suite (default: both; CUDA rows are skipped without a GPU and nvcc)",
    )
    parser.add_argument(
        "--match",
        default=None,
        help="comma-separated names: only the rows whose task or candidate file name is one of them "
        "(e.g. --match relu_wrong,matmul_autotune to re-check a few rows in little device time)",
    )
    args = parser.parse_args()
    if importlib.util.find_spec("kernelsmith") is None:  # not installed: the source tree (with a built _core)
        sys.path.insert(0, str(ROOT / "python"))
    import torch

    on_gpu = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")
    devices = args.devices.split(",") if args.devices else None
    os.environ["OPENAI_API_KEY"] = "sk-should-never-reach-a-worker"
    mismatches, results = 0, []
    names = set(args.match.split(",")) if args.match else None

    def chosen(suite: list) -> list:
        return suite if names is None else [row for row in suite if {Path(row[0]).stem, Path(row[1]).stem} & names]

    def save() -> None:  # after each suite: a run stopped during the next keeps this one's
        if args.json:
            Path(args.json).write_text(json.dumps([r.to_dict() for r in results], indent=1))

    if args.only in (None, "triton"):
        m, r = run_suite("triton", chosen(SUITE), args, on_gpu, devices)
        mismatches, results = mismatches + m, results + r
        save()
    if args.only in (None, "cuda"):
        why = cuda_unavailable()
        if why:
            print(f"\n# cuda suite: {len(CUDA_SUITE)} rows skipped: {why}")
            for task, cand, expected in CUDA_SUITE:
                print(f"{Path(task).stem:<26} {Path(cand).stem:<30} {expected:<16} skipped ({why})")
        else:
            if args.only is None:
                print()
            m, r = run_suite("cuda", chosen(CUDA_SUITE), args, True, devices)
            mismatches, results = mismatches + m, results + r
            save()
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())

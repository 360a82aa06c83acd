"""Degenerate KernelBench tasks judged on probe inputs: a verdict table.

KernelBench level1 19_ReLU, 20_LeakyReLU, 31_ELU and 32_HardTanh draw their
inputs with torch.rand, on which each returns its input. For each task: the
trusted referee's finding (`kernelsmith task check`), then an honest Triton
kernel (expected ok, timed), a copy kernel (incorrect on the probe set) and a
program returning its input with no kernel (hacked).

    python benchmarks/degenerate_verdicts.py [--suite kb_level1|kb_small] [--tasks 19_ReLU,31_ELU] [--trials N]
                                             [--timeout S] [--no-timing] [--json out.json]

`kb_level1` (default) are the upstream files, full size (4096 x 393216 fp32,
6.4 GB a tensor: a GPU run); `kb_small` the same at 16 x 1024 (CPU, with
TRITON_INTERPRET=1). One worker, so that one full-size evaluation has the
device's memory to itself. Exit status 1 when a verdict differs from the
expected one.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

from _verdicts import matches, reason

ROOT = Path(__file__).resolve().parent.parent
DEG = ROOT / "tests_py" / "fixtures" / "degenerate"
TASKS = {"19_ReLU": "relu", "20_LeakyReLU": "leaky_relu", "31_ELU": "elu", "32_HardTanh": "hardtanh"}
#: program -> expected category
PROGRAMS = {"honest": "ok", "copy": "incorrect", "identity": "hacked"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=("kb_level1", "kb_small"), default="kb_level1")
    parser.add_argument(
        "--tasks", default=",".join(TASKS), help="comma-separated task files to run (default: all four)"
    )
    parser.add_argument("--trials", type=int, default=None, help="correctness trials (default: the task's, 5)")
    parser.add_argument("--timeout", type=float, default=600.0, help="wall-clock limit per candidate (s)")
    parser.add_argument("--no-timing", action="store_true", help="correctness only")
    parser.add_argument("--json", default=None, help="write the findings and results here")
    args = parser.parse_args()
    if importlib.util.find_spec("kernelsmith") is None:  # not installed: the source tree (with a built _core)
        sys.path.insert(0, str(ROOT / "python"))
    from kernelsmith.evaluator import Evaluator
    from kernelsmith.evaluator.probes import warning
    from kernelsmith.task import Task

    mismatches, rows = 0, []
    with Evaluator(backend="triton", workers=1, timeout_s=args.timeout, timing=not args.no_timing) as ev:
        for stem in args.tasks.split(","):
            if stem not in TASKS:
                parser.error(f"--tasks: {stem} is not one of {', '.join(TASKS)}")
            kernel = TASKS[stem]
            task = Task.load(DEG / args.suite / f"{stem}.py", trials=args.trials)
            started = time.monotonic()
            finding = ev.check_task(task)
            print(
                f"# {stem}: {warning(finding) or finding.get('error') or 'not degenerate'} "
                f"({time.monotonic() - started:.1f} s)",
                flush=True,
            )
            for program, expected in PROGRAMS.items():
                source = (DEG / "triton" / f"{kernel if program == 'honest' else program}.py").read_text()
                started = time.monotonic()
                r = ev.evaluate(task, source)
                ok = matches(r.category, expected)
                mismatches += not ok
                speed = (
                    f"{r.runtime_ms:.3f} ms vs {r.ref_runtime_ms:.3f} ms ({r.speedup:.3f}x)"
                    if r.runtime_ms and r.ref_runtime_ms and r.speedup
                    else "-"
                )
                print(
                    f"{stem:<14} {program:<9} expected {expected:<10} got {r.category:<10} "
                    f"{'' if ok else 'MISMATCH '}{reason(r)[:160]} | {speed} | referee "
                    f"{r.census.get('referee', '-')}, sets {r.correctness.get('input_sets', '-')} | "
                    f"{time.monotonic() - started:.1f} s",
                    flush=True,
                )
                rows.append(
                    {"task": stem, "program": program, "expected": expected, "finding": finding, "result": r.to_dict()}
                )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"{len(rows) - mismatches}/{len(rows)} verdicts as expected")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())

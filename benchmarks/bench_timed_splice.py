"""Cost of the timed inputs' changes between samples (evaluator/timed_rotation.py):
a splice (one block of at most 64 elements per floating-point tensor and set,
both sides) and its undo, and a whole move, on the relu task's input (16x1024
float32) with 3 timed sets, as a step's timing on the CPU has them.

    PYTHONPATH=python python3 benchmarks/bench_timed_splice.py [--sets 3] [--shape 16 1024] [--reps 1000] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    import torch

    from kernelsmith.evaluator.timed_rotation import TimedRotation

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=int, default=3)
    ap.add_argument("--shape", type=int, nargs="+", default=[16, 1024])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    torch.manual_seed(0)
    sets = [[torch.randn(*args.shape)] for _ in range(args.sets)]
    ref = [[s[0].clone()] for s in sets]
    rot = TimedRotation(sets, ref, {}, lambda a: None, lambda got, exp: {"ok": True})
    figures: dict[str, list[float]] = {"splice": [], "undo splice": [], "whole move": [], "undo whole move": []}
    for _ in range(args.runs):
        for name, whole, reps in (("splice", False, args.reps), ("whole move", True, max(1, args.reps // 10))):
            t0 = time.perf_counter()
            for _ in range(reps):
                rot._move(whole)
            figures[name].append((time.perf_counter() - t0) / reps)
            t0 = time.perf_counter()
            rot.undo()
            figures["undo " + name].append((time.perf_counter() - t0) / reps)
    print(f"{args.sets} sets of {tuple(args.shape)} float32, both sides, {args.runs} runs:")
    for name, xs in figures.items():
        print(
            f"  {name:16s} {statistics.median(xs) * 1e3:.3f} ms per pair (range {min(xs) * 1e3:.3f}-"
            f"{max(xs) * 1e3:.3f})"
        )


if __name__ == "__main__":
    main()

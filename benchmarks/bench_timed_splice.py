"""Cost of the timed inputs' changes between samples (evaluator/timed_rotation.py):
a splice (one block of at most 64 elements per floating-point tensor and set,
both sides) and its undo, and a whole move, on the relu task's input (16x1024
float32) with 3 timed sets, as a step's timing on the CPU has them (``--sets
8``: a GPU timing's placed copies).

Per change: the torch operations it makes (counted by a dispatch mode: all of
them, and those that are not views or allocations, each one kernel launch on
a GPU) and the host time it takes, for the code as it is ("batched": one
``cat`` and one multi-tensor copy per dtype for all the blocks) and for the
code before it ("per tensor": a clone and a copy per block, set and side,
kept here for the comparison only), the two alternating in the same run.

On a GPU (``--device cuda``) the kernels one change launches are counted too
(torch.profiler), and each loop's time includes the device's work (a
synchronisation after it).

    PYTHONPATH=python python3 benchmarks/bench_timed_splice.py [--sets 3] [--shape 16 1024] [--reps 1000] [--runs 5]
        [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any


def _old_shift(torch: Any, sets: list, spots: dict, forward: bool) -> None:
    """The whole move before the batching (commit bda3324), one side."""
    n = len(sets)
    step = 1 if forward else -1
    order = list(range(n)) if forward else list(range(n - 1, -1, -1))
    with torch.no_grad():
        for pos in range(len(sets[0])):
            if not all(isinstance(s[pos], torch.Tensor) for s in sets):
                continue
            spot = spots.get(pos)
            blocks = [s[pos].view(-1)[spot[0] : spot[0] + spot[1]].clone() for s in sets] if spot is not None else []
            saved = sets[order[0]][pos].clone()
            for i, k in enumerate(order):
                dst = sets[k][pos]
                src = saved if i == n - 1 else sets[(k + step) % n][pos]
                with torch.autograd._unsafe_preserve_version_counter(dst):
                    dst.copy_(src)
                    if spot is not None:
                        dst.view(-1)[spot[0] : spot[0] + spot[1]].copy_(blocks[(k + 2 * step) % n])
            del saved, blocks


def _old_splice(torch: Any, sets: list, spots: dict, forward: bool) -> None:
    """The splice before the batching (commit bda3324), one side."""
    n = len(sets)
    step = 1 if forward else -1
    with torch.no_grad():
        for pos, (start, length) in spots.items():
            if not all(isinstance(s[pos], torch.Tensor) for s in sets):
                continue
            fits = [s[pos].is_contiguous() and s[pos].numel() >= start + length for s in sets]
            blocks = [s[pos].view(-1)[start : start + length].clone() if ok else None for s, ok in zip(sets, fits)]
            for k in range(n):
                dst, src = sets[k][pos], blocks[(k + step) % n]
                if fits[k] and src is not None:
                    with torch.autograd._unsafe_preserve_version_counter(dst):
                        dst.view(-1)[start : start + length].copy_(src)
            del blocks


def _per_side(old: Any) -> Any:
    return lambda torch, sides, spots, forward: [old(torch, sets, spots, forward) for sets in sides]


def _counter(torch: Any) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        """Every aten op, and those that are neither views nor allocations."""

        def __init__(self) -> None:
            super().__init__()
            self.ops = 0
            self.work = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            self.ops += 1
            name = func.overloadpacket.__name__
            if not (func.is_view or name in ("split_with_sizes", "split", "empty", "empty_like", "empty_strided")):
                self.work += 1
            return func(*args, **(kwargs or {}))

    return Count


def _launches(torch: Any, rot: Any, whole: bool) -> tuple[int, int]:
    """The device kernels of one change and of its undo (torch.profiler)."""
    counts = []
    for step in (lambda: rot._move(whole), rot.undo):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        counts.append(sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA))
    return counts[0], counts[1]


def main() -> None:
    import torch

    from kernelsmith.evaluator import timed_rotation
    from kernelsmith.evaluator.timed_rotation import TimedRotation

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=int, default=3)
    ap.add_argument("--shape", type=int, nargs="+", default=[16, 1024])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.manual_seed(0)
    sets = [[torch.randn(*args.shape, device=args.device)] for _ in range(args.sets)]
    ref = [[s[0].clone()] for s in sets]
    given = [s[0].clone() for s in sets]
    rot = TimedRotation(sets, ref, {}, lambda a: None, lambda got, exp: {"ok": True})
    paths = {
        "batched": (timed_rotation._shift, timed_rotation._splice),
        "per tensor": (_per_side(_old_shift), _per_side(_old_splice)),
    }
    changes = ("splice", "undo splice", "whole move", "undo whole move")
    figures: dict[tuple[str, str], list[float]] = {(p, c): [] for p in paths for c in changes}
    ops: dict[tuple[str, str], tuple[int, int]] = {}
    kernels: dict[tuple[str, str], int] = {}
    count = _counter(torch)
    on_gpu = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    for run in range(args.runs):
        for path, (shift, splice) in paths.items():
            timed_rotation._shift, timed_rotation._splice = shift, splice
            for name, whole, reps in (("splice", False, args.reps), ("whole move", True, max(1, args.reps // 10))):
                if run == 0:  # the operations of one change and of its undo
                    with count() as c:
                        rot._move(whole)
                    with count() as u:
                        rot.undo()
                    ops[(path, name)], ops[(path, "undo " + name)] = (c.ops, c.work), (u.ops, u.work)
                    if on_gpu:
                        kernels[(path, name)], kernels[(path, "undo " + name)] = _launches(torch, rot, whole)
                sync()
                t0 = time.perf_counter()
                for _ in range(reps):
                    rot._move(whole)
                sync()
                figures[(path, name)].append((time.perf_counter() - t0) / reps)
                t0 = time.perf_counter()
                rot.undo()
                sync()
                figures[(path, "undo " + name)].append((time.perf_counter() - t0) / reps)
                assert all(torch.equal(s[0], g) and torch.equal(r[0], g) for s, r, g in zip(sets, ref, given))
    timed_rotation._shift, timed_rotation._splice = paths["batched"]
    print(
        f"{args.sets} sets of {tuple(args.shape)} float32 on {args.device}, both sides, {args.runs} runs of "
        f"{args.reps} (whole: /10):"
    )
    for name in changes:
        med = {p: statistics.median(figures[(p, name)]) for p in paths}
        for p in paths:
            xs = figures[(p, name)]
            print(
                f"  {name:16s} {p:10s} {ops[(p, name)][0]:4d} ops ({ops[(p, name)][1]:3d} not views)  "
                f"{med[p] * 1e3:.3f} ms (range {min(xs) * 1e3:.3f}-{max(xs) * 1e3:.3f})"
                + (f"  {kernels[(p, name)]} kernels" if on_gpu else "")
            )
        print(
            f"  {'':16s} batched/per tensor: ops {ops[('batched', name)][1] / ops[('per tensor', name)][1]:.3f} "
            f"(not views), time {med['batched'] / med['per tensor']:.3f}"
        )


if __name__ == "__main__":
    main()

"""The PyTorch reference's call time on the CPU with glibc's default
allocator and with the thresholds the evaluator's workers get
(sandbox.worker_environment: MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_),
in fresh processes, the two settings interleaved round by round.

    python3 benchmarks/bench_cpu_allocator.py [--processes 4] [--busy 1] [--size 1024]

Each process times the fused_residual example's reference (five eager ops
over a SIZE x SIZE fp32 tensor) 200 times, after each call a program-like
allocation of its output size (as a candidate's forward makes), and prints
the median and p90 of the reference's calls; then the spread of the
medians across processes per setting. ``--busy N`` keeps N busy-loop
neighbour processes running meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, statistics, sys, time, torch
torch.set_num_threads(1)
n = int(sys.argv[1])
x = torch.randn(n, n); s = torch.rand(n) + 0.5; b = torch.randn(n) * 0.1
def ref():
    h = x * s; h = h + b; h = torch.relu(h); h = h * h
    return h + x
times = []
for i in range(220):
    t = time.perf_counter(); ref(); times.append(time.perf_counter() - t)
    y = torch.empty_like(x); y.copy_(x)  # the program's own output
times = sorted(times[20:])
print(json.dumps({"median_ms": statistics.median(times) * 1e3, "p90_ms": times[int(0.9 * len(times))] * 1e3}))
"""

FIXED = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


def run(size: int, fixed: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    if fixed:
        env.update(FIXED)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(size)], env=env, capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--processes", type=int, default=4, help="fresh processes per setting (default 4)")
    ap.add_argument("--busy", type=int, default=0, help="busy-loop neighbour processes meanwhile")
    ap.add_argument("--size", type=int, default=1024, help="rows and columns of the input (default 1024)")
    args = ap.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        rows = {"default glibc": [], "workers' thresholds": []}
        for _ in range(args.processes):
            rows["default glibc"].append(run(args.size, False))
            rows["workers' thresholds"].append(run(args.size, True))
    finally:
        for p in busy:
            p.kill()
            p.wait()
    print(
        f"reference calls, {args.size} x {args.size} fp32, {args.processes} processes per setting, "
        f"{args.busy} busy neighbour(s), load {os.getloadavg()[0]:.2f}"
    )
    for name, results in rows.items():
        medians = [r["median_ms"] for r in results]
        p90s = [r["p90_ms"] for r in results]
        print(
            f"  {name:<20} median per process {', '.join(f'{m:.2f}' for m in medians)} ms; "
            f"p90 {', '.join(f'{p:.2f}' for p in p90s)} ms; medians max/min {max(medians) / min(medians):.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

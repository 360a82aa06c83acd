"""Engine throughput and memory: ask+tell latency and bytes per program.

For each population size the engine (8 islands) is filled with that many
told programs through the normal ask/tell loop; then `--pairs` more ask+tell
pairs are timed one by one (Python API, i.e. including the binding and record
conversion). Memory per program is the process RSS growth during the fill
divided by the number of live programs.

    python benchmarks/bench_engine.py            # 1k, 10k, 100k
    python benchmarks/bench_engine.py --sizes 1000 --pairs 500
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time

from kernelsmith.engine import Engine, EngineConfig, Program


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def make_source(i: int) -> str:
    # ~180 bytes with some structure, distinct for every i.
    return (
        f"def kernel(x, y):\n    acc = 0\n    for k in range({i % 97 + 1}):\n"
        f"        if k % {i % 7 + 2} == 0:\n            acc += x[k] * {i}\n"
        f"    return acc + y * {i * 31 % 1009}\n"
    )


def child(req, i: int) -> Program:
    return Program(
        source=make_source(i),
        status="correct",
        metrics={"score": (i * 2654435761 % 100003) / 1000.0, "runtime_us": 10.0 + i % 13},
        feedback={"compiled": True},
    )


def bench(size: int, pairs: int, seed: int) -> dict:
    cfg = EngineConfig(num_islands=8, population_size=size, migration_interval=100, repair_ratio=0.0)
    gc.collect()
    before = rss_bytes()
    eng = Engine(cfg, seed=seed)
    eng.add_seed(Program(source=make_source(-1), metrics={"score": 0.0}, status="correct"))
    t0 = time.perf_counter()
    i = 0
    while eng.stats()["programs"] < size:
        for _ in range(100):
            r = eng.ask()
            eng.tell(child(r, i), request_id=r.id)
            i += 1
    fill_s = time.perf_counter() - t0
    gc.collect()
    programs = eng.stats()["programs"]
    mem_per_program = (rss_bytes() - before) / programs
    lat = []
    clock = time.perf_counter_ns
    for _ in range(pairs):
        c = child(None, i)
        i += 1
        t = clock()
        r = eng.ask()
        eng.tell(c, request_id=r.id)
        lat.append((clock() - t) / 1000.0)
    lat.sort()
    return {
        "programs": programs,
        "median_us": statistics.median(lat),
        "p99_us": lat[min(len(lat) - 1, int(0.99 * len(lat)))],
        "pairs_per_s": 1e6 / statistics.mean(lat),
        "fill_s": fill_s,
        "bytes_per_program": mem_per_program,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--pairs", type=int, default=5000, help="timed ask+tell pairs per size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: one size, JSON out
    args = parser.parse_args()
    if args.one:
        print(json.dumps(bench(args.one, args.pairs, args.seed)))
        return
    print(
        "| programs (8 islands) | median ask+tell (us) | p99 (us) | pairs/s | fill time (s) | RSS per program (bytes) |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for size in args.sizes:
        # A fresh process per size, so RSS growth is not hidden by memory
        # the allocator kept from the previous size.
        out = subprocess.run(
            [sys.executable, __file__, "--one", str(size), "--pairs", str(args.pairs), "--seed", str(args.seed)],
            check=True,
            capture_output=True,
            text=True,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"| {r['programs']} | {r['median_us']:.1f} | {r['p99_us']:.1f} | {r['pairs_per_s']:.0f} | "
            f"{r['fill_s']:.1f} | {r['bytes_per_program']:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()

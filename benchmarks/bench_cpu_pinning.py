#!/usr/bin/env python3
"""How far CPU (host-clock) re-timings of the same programs move, with the
timing's threads pinned to their cores (timing.cpu_pin, the default) and
without, in one run.

It takes the correct programs of a short offline evolution of an example
(no LLM), then re-times all of them head to head (Evaluator.confirm_best:
one worker, one timing slot, up to 200 pairs or 5 s each) ROUNDS times
pinned and ROUNDS times unpinned, the two interleaved round by round so a
change of the machine meets both alike. Per program it prints the spread of
the speedup over the rounds, (max - min) / mean, for each setting, then the
median and worst spread per setting and their ratio (unpinned / pinned).

  python3 benchmarks/bench_cpu_pinning.py                  # OpenCL softmax on PoCL, 4 rounds: ~3 min on 2 cores
  python3 benchmarks/bench_cpu_pinning.py --example examples/opencl/layernorm --rounds 6
  python3 benchmarks/bench_cpu_pinning.py --busy 1         # next to a busy neighbour process (not pinned)

With --busy N, N processes spinning in a Python loop run during the
re-timings (not during the evolution): the contention the pin has to live
with. Otherwise nothing else should run on the machine meanwhile. Writes
JSON to --json when given.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def correct_programs(example: Path, iterations: int, workdir: Path) -> dict[int, str]:
    run = workdir / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kernelsmith",
            "evolve",
            str(example),
            "--iterations",
            str(iterations),
            "--out",
            str(run),
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit("the evolution failed:\n" + proc.stderr[-3000:])
    out: dict[int, str] = {}
    for line in (run / "trajectory.jsonl").read_text().splitlines():
        child = json.loads(line).get("child") or {}
        if child.get("status") == "correct" and child.get("source"):
            out[int(child["id"])] = child["source"]
    return out


def retime(
    rounds: int, backend: str, ids: list[int], programs: dict[int, str], tasks: dict, speedups: dict, reference_ms: dict
) -> None:
    """ROUNDS head-to-head re-timings per setting, the settings interleaved."""
    from kernelsmith.evaluator import Evaluator

    with Evaluator(backend=backend, workers=1) as ev:
        for r in range(rounds):
            for pinned in (True, False) if r % 2 == 0 else (False, True):
                rows = ev.confirm_best(tasks[pinned], [programs[i] for i in ids])["finalists"]
                for row in rows:
                    if row.get("correct") and row.get("speedup"):
                        speedups[pinned][ids[row["index"]]].append(float(row["speedup"]))
                        reference_ms[pinned].append(float(row["ref_runtime_ms"]))
            print(f"round {r + 1}/{rounds} done", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--example", default=str(ROOT / "examples" / "opencl" / "softmax"))
    ap.add_argument("--iterations", type=int, default=10, help="of the evolution that supplies the programs")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--busy", type=int, default=0, help="busy neighbour processes during the re-timings")
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    from kernelsmith.task import Task

    example = Path(args.example)
    with tempfile.TemporaryDirectory() as tmp:
        programs = correct_programs(example, args.iterations, Path(tmp))
    if len(programs) < 2:
        raise SystemExit(f"the evolution gave {len(programs)} correct program(s); need 2 or more")
    ids = sorted(programs)
    base = Task.load(example)
    tasks = {}
    for pinned in (True, False):
        task = Task.load(example)
        task.config.timing = dataclasses.replace(base.config.timing, cpu_pin=pinned)
        tasks[pinned] = task
    speedups: dict[bool, dict[int, list[float]]] = {True: {i: [] for i in ids}, False: {i: [] for i in ids}}
    reference_ms: dict[bool, list[float]] = {True: [], False: []}
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        retime(args.rounds, base.config.backend, ids, programs, tasks, speedups, reference_ms)
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()

    def spread(values: list[float]) -> float:
        return (max(values) - min(values)) / statistics.fmean(values) if len(values) >= 2 else float("nan")

    print(
        f"\n{example.name}: {len(ids)} programs, {args.rounds} head-to-head re-timings per setting, "
        f"{args.busy} busy neighbour process(es)"
    )
    print(f"{'program':>8} {'pinned speedups':>34} {'spread':>7}   {'unpinned speedups':>34} {'spread':>7}")
    table = {}
    for i in ids:
        p, u = speedups[True][i], speedups[False][i]
        table[i] = {"pinned": p, "unpinned": u, "pinned_spread": spread(p), "unpinned_spread": spread(u)}
        print(
            f"{i:>8} {' '.join(f'{v:.4f}' for v in p):>34} {spread(p):>7.1%}   "
            f"{' '.join(f'{v:.4f}' for v in u):>34} {spread(u):>7.1%}"
        )
    summary = {}
    for pinned, name in ((True, "pinned"), (False, "unpinned")):
        spreads = [table[i][f"{name}_spread"] for i in ids]
        refs = reference_ms[pinned]
        summary[name] = {
            "median_spread": statistics.median(spreads),
            "worst_spread": max(spreads),
            "reference_ms_min": min(refs),
            "reference_ms_max": max(refs),
        }
        print(
            f"{name:>9}: median spread {statistics.median(spreads):.1%}, worst {max(spreads):.1%}; "
            f"reference median {min(refs):.3f}-{max(refs):.3f} ms"
        )
    ratio = summary["unpinned"]["median_spread"] / max(summary["pinned"]["median_spread"], 1e-12)
    print(f"unpinned / pinned median spread: {ratio:.2f}x")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "example": str(example),
                    "rounds": args.rounds,
                    "busy": args.busy,
                    "programs": table,
                    "summary": summary,
                    "ratio": ratio,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

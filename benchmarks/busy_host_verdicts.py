"""Verdicts of honest programs beside a busy neighbour: the timing-shapes
task (tests_py/fixtures/timing_shapes: OpenCL, three timing shapes) with
its seed and its shape-specialised program, evaluated ``--repeats`` times
beside ``--spinners`` processes that keep a core busy each. One line per
evaluation (verdict, the unreliable reasons' count, each shape's audit
sides as candidate/reference, the busy reason if any, the factor its
speedup was clipped by (audit_check.clip: 1 where paid as reported) and
the parent's own latency in its rounds (wall_ms less wall_arrival_ms, the
largest), then how many were `hacked`: an honest program must never be
(docs/evaluator.md, "A busy host"), how many clipped and the latencies'
median and largest.

    TRITON_INTERPRET=1 PYTHONPATH=python python3 benchmarks/busy_host_verdicts.py [--repeats 6] [--spinners 2]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from kernelsmith.evaluator import Evaluator
from kernelsmith.task import Task

ROOT = Path(__file__).resolve().parent.parent
TASK = ROOT / "tests_py" / "fixtures" / "timing_shapes"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=6, help="evaluations of each program")
    parser.add_argument("--spinners", type=int, default=2, help="busy processes beside the pool")
    args = parser.parse_args()
    task = Task.load(TASK)
    seed = task.seed_source
    specialised = seed.replace("SPECIALISED = False", "SPECIALISED = True")
    spin = [sys.executable, "-c", "while True: pass"]
    spinners = [subprocess.Popen(spin) for _ in range(args.spinners)]
    hacked = total = clipped = 0
    latencies: list[float] = []
    started = time.monotonic()
    try:
        with Evaluator(workers=2) as ev:
            for i in range(args.repeats):
                for name, r in zip(["seed", "specialised"], ev.evaluate_many([(task, seed), (task, specialised)])):
                    total += 1
                    hacked += r.category == "hacked"
                    audit = (r.census or {}).get("audit") or {}
                    sides = {
                        shape: f"{rec.get('candidate_side')}/{rec.get('reference_side')}"
                        for shape, rec in (audit.get("shapes") or {}).items()
                    }
                    busy = sorted({rec.get("busy") for rec in (audit.get("shapes") or {}).values() if rec.get("busy")})
                    why = (r.hack_reasons[0] if r.hack_reasons else "")[:200]
                    by = (audit.get("clipped") or {}).get("by", 1.0)
                    clipped += by > 1.0
                    lag = [
                        w - a
                        for rec in (audit.get("shapes") or {"": audit}).values()
                        for w, a in zip(rec.get("wall_ms") or [], rec.get("wall_arrival_ms") or [])
                        if a is not None
                    ]
                    latencies += lag
                    print(
                        f"{i} | {name} | {r.category} | reliable {r.timing_reliable} "
                        f"({len(r.unreliable_reasons)} reasons) | {sides} | {busy} | clipped by {by} | "
                        f"parent latency max {max(lag, default=0):.3f} ms | {why}",
                        flush=True,
                    )
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    print(
        f"# {hacked} of {total} honest evaluations hacked beside {args.spinners} spinning processes "
        f"({time.monotonic() - started:.0f} s); {clipped} clipped; the parent's latency in a round "
        f"(wall_ms - wall_arrival_ms, {len(latencies)} rounds): median "
        f"{statistics.median(latencies) if latencies else 0:.3f} ms, largest {max(latencies, default=0):.3f} ms"
    )


if __name__ == "__main__":
    main()

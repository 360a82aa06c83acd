"""A small suite through `kernelsmith bench` on the GPU: the Triton examples
and the evolve test task, offline mutate proposer, few iterations.

Prints the metrics and per-task tables; writes the bench folder (runs,
tables, plots) and an HTML report of each run under --out (default $OUT).

    python3 benchmarks/gpu_bench_suite.py --out "$OUT" [--iterations 5]

Fits in < 6 minutes on one H200 at the defaults (5 tasks x (seed + 5
proposals); duplicate proposals are not evaluated).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASKS = [ROOT / "examples" / "triton" / name for name in ("vector_add", "relu", "softmax", "layernorm")]
TASKS.append(ROOT / "tests_py" / "fixtures_evolve" / "scale")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "gpu-bench-out"))
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument(
        "--eval-concurrency", type=int, default=1, help="candidates at once (1 per GPU keeps the timings honest)"
    )
    args = parser.parse_args()

    from kernelsmith.bench import run_suite
    from kernelsmith.evolve import load_evolve_config
    from kernelsmith.report import write_report

    out = Path(args.out)
    suite = out / "suite" / "level1"
    suite.mkdir(parents=True, exist_ok=True)
    for task in TASKS:
        if not (suite / task.name).exists():
            shutil.copytree(task, suite / task.name)
    config = load_evolve_config(
        None,
        model="mutate",
        iterations=args.iterations,
        seed=0,
        proposal_concurrency=max(2, args.eval_concurrency),
        eval_concurrency=args.eval_concurrency,
    )
    started = time.monotonic()
    report = run_suite(out / "suite", out / "bench", config, label=f"mutate-{args.iterations}it")
    elapsed = time.monotonic() - started
    print(Path(report.files["metrics.md"]).read_text())
    print(Path(report.files["tasks.md"]).read_text())
    for result in report.results:
        if Path(result.run_dir, "trajectory.jsonl").exists():
            page = write_report(result.run_dir, out / "reports" / f"{result.key.replace('/', '_')}.html")
            print(f"report: {page}")
    for name, path in report.files.items():
        if name.endswith(".png"):
            print(f"plot: {path}")
    print(f"wall time: {elapsed:.0f} s for {len(report.results)} tasks, {args.iterations} iterations each")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What crash-proof resume costs a run: the write-ahead logs.

Every finished evaluation and every answer is appended (and fsynced) to
``evaluations.jsonl`` / ``proposals.jsonl`` before its step is applied, and the
proposal log is rewritten at each checkpoint (see docs/evolve.md, "Determinism
and resume"). This runs the evolution loop with the offline mutator and the
deterministic stand-in evaluator of the tests (no real evaluation, so the
loop's own costs are all that is timed) and prints the time spent in those
log writes against the whole run.

    cd benchmarks && PYTHONPATH=../python:../tests_py python bench_resume_logs.py
    PYTHONPATH=../python:../tests_py python bench_resume_logs.py --iterations 200 --runs 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from kernelsmith.evolve import evolve_sync, load_evolve_config
from kernelsmith.evolve.rundir import RunDir
from standin_evaluator import CostModelEvaluator

TASK = Path(__file__).resolve().parent.parent / "tests_py" / "fixtures_evolve" / "scale"
LOGGED = ("append_evaluation", "append_proposal", "keep_proposals")


def timed_run(iterations: int, folder: Path) -> tuple[float, float, int]:
    """(whole run s, log writes s, steps)."""
    spent = [0.0]
    originals = {name: getattr(RunDir, name) for name in LOGGED}

    def wrap(method):
        def timed(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                return method(self, *args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start

        return timed

    for name, method in originals.items():
        setattr(RunDir, name, wrap(method))
    try:
        config = load_evolve_config(None, iterations=iterations, seed=5, proposal_concurrency=3, checkpoint_every=4)
        start = time.perf_counter()
        summary = evolve_sync(TASK, config, folder, evaluator=CostModelEvaluator())
        return time.perf_counter() - start, spent[0], summary.steps
    finally:
        for name, method in originals.items():
            setattr(RunDir, name, method)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    whole, logs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            run_s, log_s, steps = timed_run(args.iterations, Path(tmp) / f"run{i}")
            whole.append(run_s / steps * 1e3)
            logs.append(log_s / steps * 1e3)
            sizes = {p.name: p.stat().st_size for p in (Path(tmp) / f"run{i}").glob("*.jsonl")}
    print(f"{args.runs} runs of {steps} steps (offline mutator, stand-in evaluator, checkpoint every 4)")
    print(f"whole loop        median {statistics.median(whole):7.2f} ms/step")
    print(
        f"write-ahead logs  median {statistics.median(logs):7.2f} ms/step "
        f"({statistics.median(l / w for l, w in zip(logs, whole)) * 100:.0f}% of the loop)"
    )
    print("file sizes (last run): " + ", ".join(f"{k} {v / 1024:.0f} KiB" for k, v in sorted(sizes.items())))


if __name__ == "__main__":
    main()

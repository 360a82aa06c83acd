"""Throughput of the multi-turn RL environment (issue 20): turns per minute.

What it measures. ``--episodes`` concurrent episodes of ``--turns`` turns
over the given tasks (round robin), stepped in lockstep through
``KernelEnv.step_many``: every turn of every live episode is one batch on the
evaluator's pool, as a trainer's rollout would hand it over. The policy is
scripted and replays known programs: episode e's turn t answers with the
task's seed (``seed.py``) with its ``# tune:`` values set to the
(e + t)-th combination (known-correct programs for the examples this
repository ships), or, for a task with ``--replay RUN_DIR`` runs (e.g.
KernelBench problems, which have no seed), the answers recorded in its runs,
in order (whole-program answers replay as they are; a SEARCH/REPLACE answer
applies only where the episode's program matches its parent). No model runs: the
figure is the environment's (edit, evaluation, reward, feedback, recording)
cost per turn, the ceiling a trainer's rollout sees on this evaluator.

It prints turns/minute (all turns / wall seconds from the first step to the
last), the statuses of the turns, the median and p95 of EvalResult.wall_s
and of the per-phase times, the mean return, and with ``--json`` writes it
all to a file.

Running it:

  # CPU, OpenCL through PoCL (the figure in docs/rl_environment.md)
  PYTHONPATH=python python3 benchmarks/bench_env.py examples/opencl/softmax \
      --episodes 8 --turns 3 --trials 2

  # H200: 64 concurrent 3-turn episodes over level-1 Triton tasks: the
  # single-op examples (seeded), or KernelBench level-1 problems with
  # --replay of runs on them (--workers defaults to 4 per GPU)
  PYTHONPATH=python python3 benchmarks/bench_env.py examples/triton/{relu,softmax,layernorm,vector_add} \
      --episodes 64 --turns 3 --json bench_env_h200.json
  PYTHONPATH=python python3 benchmarks/bench_env.py tests_py/fixtures/kb_honest/{softmax,gelu,layernorm} \
      --episodes 64 --turns 3   # KernelBench level-1 problems, honest candidate.py replayed
  PYTHONPATH=python python3 benchmarks/bench_env.py KB/level1/19_ReLU.py ... \
      --replay runs/kb_19 ... --episodes 64 --turns 3

On the CPU the Triton interpreter or PoCL sets the pace; the figure says
what the environment costs around the evaluator there, not GPU speed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
try:  # the installed kernelsmith; the source tree only when none is installed
    import kernelsmith  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(ROOT / "python"))

from kernelsmith.env import EnvConfig, KernelEnv  # noqa: E402
from kernelsmith.evaluator import Evaluator  # noqa: E402
from kernelsmith.proposers.mutate import parse_tunables, set_tunables  # noqa: E402
from kernelsmith.task import Task  # noqa: E402


def seed_variants(task: Task, limit: int = 64) -> list[str]:
    """The seed with its tunables set to successive combinations (the seed
    first). A task folder with a known-correct ``candidate.py`` and no seed
    (the honest KernelBench level-1 kernels of tests_py/fixtures/kb_honest)
    replays that program."""
    seed = task.seed_source
    folder = Path(task.path or ".")
    folder = folder.parent if folder.is_file() else folder
    if not seed and (folder / "candidate.py").exists():
        seed = (folder / "candidate.py").read_text()
    if not seed:
        raise SystemExit(f"{task.name}: no seed.py (or candidate.py) to replay; give --replay RUN_DIR")
    tunables = parse_tunables(seed)
    out = [seed]
    if tunables:
        for values in itertools.product(*(t.choices for t in tunables)):
            source = set_tunables(seed, tunables, {t.key: v for t, v in zip(tunables, values)})
            if source not in out:
                out.append(source)
            if len(out) >= limit:
                break
    return out


def replay_answers(run_dir: str) -> tuple[str, list[str]]:
    """(task name, the answers recorded in the run, in step order)."""
    from kernelsmith.export import load_run

    run = load_run(run_dir)
    answers = [s.response for s in run.steps if s.response]
    if not answers:
        raise SystemExit(f"{run_dir}: no recorded answers to replay")
    return run.task.name, answers


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tasks", nargs="+", help="task directories (reference.py, seed.py, task.yaml)")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument(
        "--workers", type=int, default=None, help="evaluator workers (default: 4 per GPU, 2 on a CPU host)"
    )
    parser.add_argument(
        "--trials", type=int, default=None, help="correctness trials per evaluation (default: the task's)"
    )
    parser.add_argument(
        "--replay",
        action="append",
        default=[],
        help="run directory of one of the tasks: its recorded answers are replayed (repeatable)",
    )
    parser.add_argument("--record", default=None, help="record the episodes under this folder")
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args(argv)
    if args.episodes < 1 or args.turns < 1:
        parser.error("--episodes and --turns must be >= 1")

    tasks = [Task.load(p, trials=args.trials) for p in args.tasks]
    answers: dict[str, list[str]] = {}
    replayed: dict[str, list[str]] = {}
    for run_dir in args.replay:  # a task with runs (matched by name) replays their answers ...
        name, recorded = replay_answers(run_dir)
        replayed.setdefault(name, []).extend(recorded)
    unknown = sorted(set(replayed) - {t.name for t in tasks})
    if unknown:
        parser.error(f"--replay runs of tasks not given: {', '.join(unknown)}")
    for task in tasks:  # ... the others their seed's tuned variants
        answers[task.id] = replayed.get(task.name) or [f"```python\n{src}```" for src in seed_variants(task)]

    with Evaluator(workers=args.workers) as evaluator:
        env = KernelEnv(tasks, evaluator, EnvConfig(max_turns=args.turns, trials=args.trials), record_dir=args.record)
        warm = evaluator.warm_up(tasks)
        episodes = [env.new_episode(e % len(tasks)) for e in range(args.episodes)]
        steps: list[Any] = []
        started = time.monotonic()
        turn = 0
        while any(not ep.done for ep in episodes):
            batch = []
            for e, ep in enumerate(episodes):
                if not ep.done:
                    pool = answers[ep.task.id]
                    batch.append((ep, pool[(e + turn) % len(pool)]))
            t0 = time.monotonic()
            steps += env.step_many(batch)
            print(f"turn {turn + 1}: {len(batch)} steps in {time.monotonic() - t0:.1f} s", flush=True)
            turn += 1
        wall = time.monotonic() - started

    results = [s.result for s in steps if s.result is not None]
    statuses: dict[str, int] = {}
    for s in steps:
        statuses[s.info["status"]] = statuses.get(s.info["status"], 0) + 1
    phases: dict[str, list[float]] = {}
    for r in results:
        for key, value in (r.phases or {}).items():
            if isinstance(value, (int, float)):
                phases.setdefault(key, []).append(float(value))
    returns = [ep.returns(env.config.gamma)[0] for ep in episodes]
    report = {
        "tasks": [t.name for t in tasks],
        "episodes": args.episodes,
        "turns_per_episode": args.turns,
        "turns": len(steps),
        "wall_s": round(wall, 2),
        "warm_up_s": round(warm, 2),
        "turns_per_minute": round(60.0 * len(steps) / wall, 2),
        "workers": evaluator.workers,
        "statuses": statuses,
        "reliable_timings": sum(1 for r in results if r.timing_reliable),
        "eval_wall_s": {
            "median": round(statistics.median([r.wall_s for r in results]), 3) if results else None,
            "p95": round(pct([r.wall_s for r in results], 0.95), 3) if results else None,
        },
        "phases_median_s": {k: round(statistics.median(v), 4) for k, v in sorted(phases.items())},
        "mean_return": round(statistics.mean(returns), 4),
        "hardware": results[0].hardware if results else {},
    }
    print(
        f"{report['turns']} turns ({args.episodes} episodes x {args.turns}) in {report['wall_s']} s "
        f"on {report['workers']} workers: {report['turns_per_minute']} turns/minute"
    )
    print(f"statuses {statuses}; reliable timings {report['reliable_timings']}/{len(results)}")
    print(f"evaluation wall s: median {report['eval_wall_s']['median']}, p95 {report['eval_wall_s']['p95']}")
    print("phases (median s): " + ", ".join(f"{k} {v}" for k, v in report["phases_median_s"].items()))
    print(f"mean return {report['mean_return']}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

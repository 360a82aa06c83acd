"""``kernelsmith eval TASK CANDIDATE.py``: evaluate one candidate program.

Exit status: 0 when the candidate is correct (and not hacked), 1 otherwise,
2 for bad input (task or candidate file missing, bad task config).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task", help="task directory (reference.py, task.yaml, seed.py), a KernelBench problem file "
                                     "or a KernelBench-X task file")
    parser.add_argument("candidate", help="candidate program defining ModelNew ('seed' = the task's seed.py)")
    parser.add_argument("--backend", default=None, help="evaluation backend (default: the task's, else triton)")
    parser.add_argument("--trials", type=int, default=None, help="correctness trials, 1..100 (default: the task's, 5)")
    parser.add_argument("--timeout", type=float, default=None, help="wall-clock limit in seconds (default: the task's)")
    from . import add_policy_arguments

    add_policy_arguments(parser)
    parser.add_argument("--no-timing", action="store_true", help="check correctness only")
    parser.add_argument("--isolation", choices=["auto", "bwrap", "process"], default="auto")
    parser.add_argument("--device", default=None, help="CUDA_VISIBLE_DEVICES for the worker")
    parser.add_argument("--json", action="store_true", help="print the full EvalResult as JSON")
    parser.add_argument("--no-daemon", action="store_true",
                        help="evaluate in this process instead of the warm per-user evaluation daemon (also: "
                             "KERNELSMITH_DAEMON=0); see `kernelsmith daemon`")
    parser.add_argument("--kernelbench", action="store_true",
                        help="with --json: KernelBench's KernelExecResult fields and units (correctness a bool, "
                             "runtime and ref_runtime in us)")


def run(args: argparse.Namespace) -> int:
    # no torch and no evaluator here: with a warm daemon this process only
    # loads the task and talks to the daemon (kernelsmith/daemon)
    from .. import daemon
    from ..evaluator.probes import warning
    from ..task import Task
    from . import UsageError

    task = Task.load(args.task, backend=args.backend, trials=args.trials, policy=args.policy,
                     min_coverage=args.min_coverage)  # TaskError: exit 2 in the CLI
    if args.candidate == "seed":
        if task.seed_source is None:
            raise UsageError(f"task {args.task} has no seed.py; give a CANDIDATE.py to evaluate")
        source = task.seed_source
    else:
        path = Path(args.candidate)
        if not path.is_file():
            raise UsageError(f"{path}: no such candidate file")
        source = path.read_text()
    from ..evaluator.phases import PhaseLine

    # the phase it is in, on stderr while it runs: a line updated in place
    # on a terminal; with -v each phase and its time as it ends (through the
    # daemon too: it streams the request's stages back)
    with PhaseLine("evaluating", lines=bool(getattr(args, "verbose", 0))):
        result = daemon.evaluate(task, source, daemon=False if args.no_daemon else None, timeout_s=args.timeout,
                                 timing=not args.no_timing, isolation=args.isolation,
                                 devices=[args.device] if args.device is not None else None)
    # the trusted referee's finding on the task, carried by the result (no
    # second round trip): a degenerate task is judged on probe inputs too
    degenerate = warning(result.census) if isinstance(result.census, dict) else None
    if degenerate:
        print(f"kernelsmith eval: warning: {degenerate} (kernelsmith task check {args.task})", file=sys.stderr)
    if args.json and args.kernelbench:
        from ..kernelbench import to_kernelbench

        print(json.dumps(to_kernelbench(result), indent=2))
    elif args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(f"task {task.name} ({task.id}), backend {result.backend}, isolation {result.isolation}, {result.wall_s:.1f} s")
        print(result.render_feedback())
        source = (result.speed_of_light or {}).get("peak_source")
        if source:  # the peaks' source, for a person (the model's feedback has the line above)
            print(f"Speed-of-light peaks ({result.speed_of_light.get('device')}): {source}")
        if result.phases:
            print("Phases (s): " + ", ".join(f"{k} {v:.3g}" for k, v in result.phases.items()))
        from ..evaluator.memory import summary_line

        if summary_line(result.memory):
            print("Memory: " + summary_line(result.memory))
    return 0 if result.correct and not result.hacked else 1

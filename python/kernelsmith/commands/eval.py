"""``kernelsmith eval TASK CANDIDATE.py``: evaluate one candidate program.

Exit status: 0 when the candidate is correct (and not hacked), 1 otherwise,
2 for bad input (task or candidate file missing, bad task config).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from . import add_policy_arguments, add_isolation_argument, UsageError
from ..backends import available_backends


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "task",
        help="task directory (reference.py, task.yaml, seed.py), a KernelBench problem file "
        "or a KernelBench-X task file",
    )
    parser.add_argument("candidate", help="candidate program defining ModelNew ('seed' = the task's seed.py)")
    parser.add_argument(
        "--backend",
        default=None,
        help="evaluation backend: triton, opencl, cuda (default: the task's task.yaml; a task that "
        "names none, such as a plain KernelBench file, gets the backend the candidate's source "
        "is written for)",
    )
    parser.add_argument("--trials", type=int, default=None, help="correctness trials, 1..100 (default: the task's, 5)")
    parser.add_argument("--timeout", type=float, default=None, help="wall-clock limit in seconds (default: the task's)")

    add_policy_arguments(parser)
    parser.add_argument("--no-timing", action="store_true", help="check correctness only")

    add_isolation_argument(parser)
    parser.add_argument("--device", default=None, help="CUDA_VISIBLE_DEVICES for the worker")
    parser.add_argument("--json", action="store_true", help="print the full EvalResult as JSON")
    parser.add_argument(
        "--no-daemon",
        action="store_true",
        help="evaluate in this process instead of the warm per-user evaluation daemon (also: "
        "KERNELSMITH_DAEMON=0); see `kernelsmith daemon`",
    )
    parser.add_argument(
        "--kernelbench",
        action="store_true",
        help="with --json: KernelBench's KernelExecResult fields and units (correctness a bool, "
        "runtime and ref_runtime in us)",
    )


def _task_names_backend(path: Path) -> bool:
    """Whether the task's own config names a backend (a plain KernelBench
    file, or a task.yaml without ``backend:``, does not)."""
    yaml_path = path / "task.yaml" if path.is_dir() else None
    if yaml_path is None or not yaml_path.exists():
        return False
    import yaml

    try:
        data = yaml.safe_load(yaml_path.read_text()) or {}
    except yaml.YAMLError:
        return True  # Task.load says what is wrong with it
    return isinstance(data, dict) and bool(data.get("backend"))


def _pick_backend(args: argparse.Namespace, source: str) -> str | None:
    """--backend, else the task's, else the one the candidate is written for
    (said on stderr); None keeps the default."""
    if args.backend is not None or _task_names_backend(Path(args.task)):
        return args.backend
    # lazy: keeps 'kernelsmith --help' light (backends._choose is not loaded to build the parser)
    from ..backends._choose import choose_backend

    choice = choose_backend(source)
    if choice.name is not None:
        print(
            f"kernelsmith eval: backend {choice.name} ({choice.reason}; the task names none; --backend NAME to choose)",
            file=sys.stderr,
        )
    return choice.name


def _backend_hint(args: argparse.Namespace, result, source: str) -> str | None:
    """When a rejected candidate would pass another backend's static check:
    the flag that evaluates it as such a program."""
    if result.correct and not result.hacked:
        return None
    # lazy: keeps 'kernelsmith --help' light (backends._choose is not loaded to build the parser)
    from ..backends._choose import fitting_backends

    others = [name for name in fitting_backends(source) if name != result.backend]
    if not others:
        if args.backend is not None or _task_names_backend(Path(args.task)) or not result.hacked:
            return None

        return (
            f"kernelsmith eval: hint: evaluated with backend {result.backend}, the default (the task names "
            f"none and the candidate passes no backend's static check); for another: --backend NAME "
            f"({', '.join(available_backends())})"
        )
    return (
        f"kernelsmith eval: hint: the candidate is written for {' or '.join(others)} (it passes that "
        f"backend's static check) and was evaluated with backend {result.backend}: pass --backend {others[0]}"
    )


def _from_a_run(source: str) -> bool:
    """Whether ``source`` is a run's best_program.py (its header says the run's figure)."""
    if not source.startswith("# kernelsmith"):
        return False
    # lazy: keeps 'kernelsmith --help' light (evolve.best is not loaded to build the parser)
    from ..evolve.best import HEADER_MARK  # the evolve package only for such a file: eval stays light

    return source.startswith(HEADER_MARK)


def run(args: argparse.Namespace) -> int:
    # no torch and no evaluator here: with a warm daemon this process only
    # loads the task and talks to the daemon (kernelsmith/daemon)
    from .. import daemon  # lazy: keeps 'kernelsmith --help' light (daemon is not loaded to build the parser)

    # lazy: keeps 'kernelsmith --help' light (evaluator.probes is not loaded to build the parser)
    from ..evaluator.probes import warning
    from ..task import Task  # lazy: keeps 'kernelsmith --help' light (task is not loaded to build the parser)

    task = Task.load(
        args.task, backend=args.backend, trials=args.trials, policy=args.policy, min_coverage=args.min_coverage
    )  # TaskError: exit 2 in the CLI
    if args.candidate == "seed":
        if task.seed_source is None:
            raise UsageError(f"task {args.task} has no seed.py; give a CANDIDATE.py to evaluate")
        source = task.seed_source
    else:
        path = Path(args.candidate)
        if not path.is_file():
            raise UsageError(f"{path}: no such candidate file")
        source = path.read_text()
    backend = _pick_backend(args, source)
    if backend is not None and backend != task.config.backend:
        task = Task.load(
            args.task, backend=backend, trials=args.trials, policy=args.policy, min_coverage=args.min_coverage
        )
    # lazy: keeps 'kernelsmith --help' light (evaluator.phases is not loaded to build the parser)
    from ..evaluator.phases import PhaseLine

    # the phase it is in, on stderr while it runs: a line updated in place
    # on a terminal; with -v each phase and its time as it ends (through the
    # daemon too: it streams the request's stages back)
    with PhaseLine("evaluating", lines=bool(getattr(args, "verbose", 0))):
        result = daemon.evaluate(
            task,
            source,
            daemon=False if args.no_daemon else None,
            timeout_s=args.timeout,
            timing=not args.no_timing,
            isolation=args.isolation,
            devices=[args.device] if args.device is not None else None,
        )
    # the trusted referee's finding on the task, carried by the result (no
    # second round trip): a degenerate task is judged on probe inputs too
    degenerate = warning(result.census) if isinstance(result.census, dict) else None
    if degenerate:
        print(f"kernelsmith eval: warning: {degenerate} (kernelsmith task check {args.task})", file=sys.stderr)
    if args.json and args.kernelbench:
        # lazy: keeps 'kernelsmith --help' light (kernelbench is not loaded to build the parser)
        from ..kernelbench import to_kernelbench

        print(json.dumps(to_kernelbench(result), indent=2))
    elif args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(
            f"task {task.name} ({task.id}), backend {result.backend}, isolation {result.isolation}, {result.wall_s:.1f} s"
        )
        print(result.render_feedback())
        peaks = (result.speed_of_light or {}).get("peak_source")
        if peaks:  # the peaks' source, for a person (the model's feedback has the line above)
            print(f"Speed-of-light peaks ({result.speed_of_light.get('device')}): {peaks}")
        if result.phases:
            print("Phases (s): " + ", ".join(f"{k} {v:.3g}" for k, v in result.phases.items()))
        # lazy: keeps 'kernelsmith --help' light (evaluator.memory is not loaded to build the parser)
        from ..evaluator.memory import summary_line

        if summary_line(result.memory):
            print("Memory: " + summary_line(result.memory))
    if _from_a_run(source) and result.speedup is not None and not args.json:
        # a run's best_program.py: its figure from the run next to this one
        run_figure = source.splitlines()[1].removeprefix("# ").strip()
        print(
            f"kernelsmith eval: the run measured this program's {run_figure}; this evaluation is another "
            "measurement, with its own CI (compare the intervals, not the points)",
            file=sys.stderr,
        )
    hint = _backend_hint(args, result, source)
    if hint:
        print(hint, file=sys.stderr)
    return 0 if result.correct and not result.hacked else 1

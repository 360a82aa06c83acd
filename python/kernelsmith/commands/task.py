"""``kernelsmith task init``: write an in-place task (``inplace.yaml``) from a
few flags and check it on the unmodified tree (docs/in_place.md).
``kernelsmith task check TASK``: load a task, run its reference in the
trusted referee and say whether it is degenerate (a trivial output passes its
tolerance), which probe input sets judge it and which were skipped and why
(docs/evaluator.md, "Degenerate tasks and probes"). Exit status 0 when the
check ran (degenerate or not), 1 when the reference could not be run, 2 for
bad input."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ..backends import DEFAULT_BACKEND
from . import add_isolation_argument
from . import UsageError


def _shapes(text: str) -> list[list[int]]:
    """'32x128,8x512' -> [[32, 128], [8, 512]]."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            dims = [int(d) for d in part.lower().split("x")]
        except ValueError:
            raise argparse.ArgumentTypeError(f"shape {part!r}: write shapes as 32x128 (comma-separated)") from None
        if any(d <= 0 for d in dims):
            raise argparse.ArgumentTypeError(f"shape {part!r}: dimensions must be positive")
        out.append(dims)
    return out


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def _annotation(text: str) -> dict[str, str]:
    line, sep, replace = text.partition("=>")
    if not sep or not line.strip() or not replace.strip():
        raise UsageError(f"--annotate {text!r}: write LINE=>REPLACEMENT")
    return {"line": line.strip(), "replace": replace.strip().replace("\\n", "\n")}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    init = sub.add_parser(
        "init",
        help="write an in-place task config and check it on the unmodified tree",
        description="Write an in-place task (inplace.yaml) and check that it runs on the "
        "unmodified tree: the project's tests pass, the comparison and the timing run.",
    )
    init.add_argument("--tree", required=True, help="the source tree (a checkout, or an installed package's folder)")
    init.add_argument("--file", required=True, help="the target file, relative to the tree")
    init.add_argument("--function", required=True, help="the target function (compared and timed)")
    init.add_argument(
        "--region",
        type=_names,
        default=[],
        help="comma-separated top-level names the EVOLVE block spans (default: the function)",
    )
    init.add_argument(
        "--tests",
        required=True,
        help="the project's correctness command, run in the tree (e.g. 'python -m pytest -q tests/test_x.py')",
    )
    init.add_argument(
        "--inputs", required=True, help="FILE.py:FUNCTION returning the target's arguments for (shape, dtype)"
    )
    init.add_argument("--bench-shapes", type=_shapes, required=True, help="shapes timed, e.g. 32x128,8x512")
    init.add_argument("--compare-shapes", type=_shapes, default=[], help="extra shapes of the randomized comparison")
    init.add_argument("--dtypes", type=_names, default=["float32"], help="comparison dtypes, the first timed")
    init.add_argument("--trials", type=int, default=2, help="comparison trials with fresh inputs (default 2)")
    init.add_argument(
        "--annotate",
        action="append",
        default=[],
        metavar="LINE=>REPLACEMENT",
        help="a tunable for the offline mutator: replace the block's line LINE by REPLACEMENT "
        "(with a '# tune:' annotation; '\\n' starts a new line); repeatable",
    )
    init.add_argument("--bench-command", default="", help="optional: the project's benchmark command printing a time")
    init.add_argument("--time-regex", default=None, help="regex whose first group is the printed time (default: N ms)")
    init.add_argument("--python-path", type=_names, default=["."], help="tree folders put on PYTHONPATH (default .)")
    init.add_argument("--backend", default=DEFAULT_BACKEND, help=f"evaluation backend (default {DEFAULT_BACKEND})")
    init.add_argument("--allowed-torch-ops", type=_names, default=[], help="torch ops the target may run")
    init.add_argument("--name", default="")
    init.add_argument("-o", "--out", default="inplace.yaml", help="the config to write (default ./inplace.yaml)")
    init.add_argument("--force", action="store_true", help="replace an existing config")
    init.add_argument("--no-check", action="store_true", help="write the config without running it")
    add_isolation_argument(init)
    check = sub.add_parser(
        "check",
        help="load a task and report whether it is degenerate and how it is judged",
        description="Load a task, run its reference once in the trusted referee and report "
        "whether a trivial output (zeros, a constant, an input passed through) "
        "passes its tolerance, which probe input sets judge it, and which probes "
        "were skipped and why.",
    )
    check.add_argument("task", help="task directory (reference.py, task.yaml) or a KernelBench problem file")
    check.add_argument("--backend", default=None, help="evaluation backend (default: the task's, else triton)")
    check.add_argument("--device", default=None, help="CUDA_VISIBLE_DEVICES for the referee")
    add_isolation_argument(check)
    check.add_argument("--timeout", type=float, default=None, help="seconds for the reference (default: the task's)")
    check.add_argument("--json", action="store_true", help="print the referee's answer as JSON")


def _rel(path: str, base: Path) -> str:
    return os.path.relpath(Path(path).resolve(), base.resolve())


def run(args: argparse.Namespace) -> int:
    # lazy: keeps 'kernelsmith --help' light (config is not loaded to build the parser)
    from ..config import ConfigError, from_dict

    # lazy: keeps 'kernelsmith --help' light (inplace is not loaded to build the parser)
    from ..inplace import InplaceConfig, InplaceEvaluator, load_inplace, save_config

    # lazy: keeps 'kernelsmith --help' light (inplace.config is not loaded to build the parser)
    from ..inplace.config import BenchmarkConfig

    if args.action == "check":
        return check(args)
    if args.action != "init":
        raise UsageError(
            "give an action: kernelsmith task init --tree ... or kernelsmith task check TASK "
            "(see kernelsmith task init -h, kernelsmith task check -h)"
        )
    out = Path(args.out)
    if out.exists() and not args.force:
        raise UsageError(f"{out} exists; give --force to replace it or -o another file")
    inputs_file, sep, inputs_fn = args.inputs.rpartition(":")
    if not sep or not inputs_file or not inputs_fn:
        raise UsageError(f"--inputs {args.inputs!r}: write FILE.py:FUNCTION")
    if not Path(args.tree).is_dir():
        raise UsageError(f"--tree {args.tree}: not a folder")
    base = out.parent if str(out.parent) else Path(".")
    benchmark = {"shapes": args.bench_shapes, "command": args.bench_command}
    if args.time_regex:
        benchmark["time_regex"] = args.time_regex
    data = {
        "name": args.name,
        "tree": _rel(args.tree, base),
        "python_path": args.python_path,
        "target": {
            "file": args.file,
            "function": args.function,
            "region": args.region,
            "annotate": [_annotation(a) for a in args.annotate],
        },
        "tests": args.tests,
        "inputs": f"{_rel(inputs_file, base)}:{inputs_fn}",
        "compare": {"shapes": args.compare_shapes, "dtypes": args.dtypes, "trials": args.trials},
        "benchmark": {**BenchmarkConfig().__dict__, **benchmark},
        "backend": args.backend,
        "allowed_torch_ops": args.allowed_torch_ops,
    }
    try:
        config = from_dict(InplaceConfig, data)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    save_config(config, out)
    try:
        task = load_inplace(out)  # InplaceError names what is missing (exit 2 via the CLI)
    except Exception:
        out.unlink()  # no half-valid config left behind
        raise
    print(
        f"wrote {out}: target {config.target.function} in {config.target.file} (module {task.spec.module}), "
        f"EVOLVE block over {', '.join(config.target.region or [config.target.function])}"
    )
    if args.no_check:
        return 0
    print("checking it on the unmodified tree: the project's tests, the comparison, the timing ...", flush=True)
    # lazy: keeps 'kernelsmith --help' light (evaluator.phases is not loaded to build the parser)
    from ..evaluator.phases import PhaseLine

    started = time.monotonic()
    # a worker for each dtype: the comparisons run side by side
    with InplaceEvaluator(isolation=args.isolation, workers=len(config.compare.dtypes)) as ev:
        # each step printed with its time as it ends (a slow package shows
        # where it spends it); the step going on, live, on a terminal
        with PhaseLine("checking", lines=True, lines_stream=sys.stdout) as shown:
            result = ev.evaluate(task, task.spec.marked_original())
    print(f"checked in {time.monotonic() - started:.1f} s")
    tests = result.correctness.get("project_tests") or {}
    print(
        f"project tests: {'passed' if tests.get('passed') else 'FAILED'} ({tests.get('seconds', '?')} s, "
        f"{tests.get('isolation', '?')})"
    )
    print(result.render_feedback())
    if not result.correct or result.hacked:
        during = f" during: {shown.durations[-1][0]}" if result.category == "timeout" and shown.durations else ""
        print(
            f"the task does not run on the unmodified tree ({result.category}{during}); fix {out} or the tree "
            "(the original must pass its own tests and match itself)"
        )
        return 1
    print(f"ok: evolve it with: kernelsmith evolve {out}")
    return 0


def check(args: argparse.Namespace) -> int:
    """``kernelsmith task check TASK``: the referee's look at the task
    (:meth:`kernelsmith.evaluator.Evaluator.check_task`), printed."""
    import json

    # lazy: keeps 'kernelsmith --help' light (evaluator is not loaded to build the parser)
    from ..evaluator import Evaluator

    # lazy: keeps 'kernelsmith --help' light (evaluator.probes is not loaded to build the parser)
    from ..evaluator.probes import PREFIX, PROBES, describe
    from ..task import Task  # lazy: keeps 'kernelsmith --help' light (task is not loaded to build the parser)

    task = Task.load(args.task, backend=args.backend)  # TaskError: exit 2 in the CLI
    # fresh mode: only the referee process is started, no pool of workers
    with Evaluator(
        mode="fresh", workers=1, isolation=args.isolation, devices=[args.device] if args.device is not None else None
    ) as ev:
        answer = ev.check_task(task, args.timeout)
    if args.json:
        print(json.dumps({"task": task.name, "task_id": task.id, **answer}, indent=2))
        return 1 if "error" in answer else 0
    atol, rtol = task.config.tolerances()
    print(
        f"task {task.name} ({task.id}), backend {task.config.backend}, dtype {task.config.dtype}, "
        f"atol {atol:g}, rtol {rtol:g}"
    )
    if "error" in answer:
        print(f"the reference could not be run: {answer['error']}")
        return 1
    print(f"input sets: {', '.join(answer.get('primed', []))}")
    forms = list(answer.get("degenerate") or [])
    if not forms:
        print(describe([], {}))
        return 0
    probes = answer.get("probes") or {}
    print(
        f"DEGENERATE: on the task's own inputs its tolerance cannot tell {', '.join(forms)} from the reference's output"
    )
    for name in probes.get("sets", []):
        probe = name[len(PREFIX) :]
        print(
            f"probe {probe} applies (input set {name}: {PROBES.get(probe, '?')}): the candidate's output is "
            f"judged on it too; {', '.join(probes.get('decided', []))} fail(s) there"
        )
    for probe, why in sorted((probes.get("skipped") or {}).items()):
        print(f"probe {probe} skipped: {why}")
    kept = probes.get("kept", forms)
    if kept:
        print(
            f"still rejected as trivial outputs (no probe tells them apart): {', '.join(kept)}: a program "
            "returning exactly one is judged hacked; tighten the task (other inputs, a tighter tolerance)"
        )
    else:
        print("every trivial form is judged by a probe: honest programs are accepted, trivial ones fail the probe")
    return 0

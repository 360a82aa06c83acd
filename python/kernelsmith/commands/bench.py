"""kernelsmith bench SUITE_DIR: the unified protocol over a folder of KernelBench-format tasks."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from . import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "suite",
        nargs="?",
        help="suite folder: level1/ level2/ ... of KernelBench files or task "
        "directories, or a KernelBench-X checkout (by category)",
    )
    parser.add_argument("--levels", help="comma-separated levels to run, e.g. 1,2 (default: all)")
    parser.add_argument("--model", help="openai:NAME | anthropic:NAME | mutate | llm (default: the config's, mutate)")
    parser.add_argument("--iterations", type=int, help="proposal steps per task (default: the config's, 40)")
    parser.add_argument("--backend", help="backend for every task (default: each task's)")
    parser.add_argument("--seed", type=int, help="random seed (default 0)")
    parser.add_argument("--trials", type=int, help="correctness trials per candidate (default: the task's)")
    parser.add_argument("--config", help="evolve YAML config (see docs/evolve.md); flags override it")
    parser.add_argument("-o", "--out", help="bench folder (default bench/<suite>-<model>); re-running resumes it")
    parser.add_argument("--label", help="name of this configuration in tables and plots (default: the model)")
    parser.add_argument(
        "--seeds", metavar="DIR", help="seed programs for plain-file tasks: DIR/<stem>.py or DIR/levelN/<stem>.py"
    )
    parser.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="where candidates are evaluated: local worker processes or a Ray cluster",
    )
    parser.add_argument("--ray-address", help="Ray cluster address (default: RAY_ADDRESS, else a local instance)")
    parser.add_argument(
        "--reference-cache",
        help="reference-timing cache file to share between benches (default OUT/reference_timings.json)",
    )
    parser.add_argument(
        "--timing-shapes",
        choices=("auto", "one"),
        default="auto",
        help="auto (default): a plain KernelBench file is also timed with its leading sizes halved "
        "where the module allows it (get_inputs_half; the speedup is the two shapes' "
        "geometric mean); one: get_inputs alone",
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG figures")
    parser.add_argument(
        "--compare",
        nargs="+",
        metavar="BENCH_DIR",
        help="instead of running: put finished bench folders side by side into --out",
    )
    parser.add_argument("--json", action="store_true", help="print metrics as JSON")


def _levels(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise SystemExit(f"kernelsmith bench: --levels must be comma-separated integers, got '{text}'") from None


def run(args: argparse.Namespace) -> int:
    # lazy: keeps 'kernelsmith --help' light (bench.runner is not loaded to build the parser)
    from ..bench import runner

    if args.compare:
        if not args.out:
            raise UsageError("--compare needs --out for the comparison files")
        files = runner.compare(args.compare, args.out)
        print(Path(files["comparison.md"]).read_text())
        for name, path in files.items():
            print(f"{name}: {path}", file=sys.stderr)
        return 0
    if not args.suite:
        raise UsageError("give a SUITE_DIR (or --compare BENCH_DIR ...)")
    if not Path(args.suite).is_dir():
        raise UsageError(f"SUITE_DIR {args.suite} is not a directory")
    # lazy: keeps 'kernelsmith --help' light (evolve is not loaded to build the parser)
    from ..evolve import load_evolve_config

    config = load_evolve_config(
        args.config,
        iterations=args.iterations,
        model=args.model,
        backend=args.backend,
        seed=args.seed,
        trials=args.trials,
    )
    out = args.out or str(Path("bench") / f"{Path(args.suite).resolve().name}-{config.model.replace(':', '_')}")
    report = runner.run_suite(
        args.suite,
        out,
        config,
        levels=_levels(args.levels),
        label=args.label,
        seeds_dir=args.seeds,
        executor=args.executor,
        ray_address=args.ray_address,
        reference_cache=args.reference_cache,
        plots=not args.no_plots,
        timing_shapes=args.timing_shapes,
    )
    if args.json:
        print(
            json.dumps(
                {
                    "label": report.label,
                    "metrics": report.metrics,
                    "ran": report.ran,
                    "skipped": report.skipped,
                    "files": report.files,
                },
                indent=2,
            )
        )
    else:
        print(Path(report.files["metrics.md"]).read_text())
        if "categories.md" in report.files:  # KernelBench-X: by its operator categories
            print(Path(report.files["categories.md"]).read_text())
        print(Path(report.files["tasks.md"]).read_text())
        print(f"bench folder: {report.out} (ran {len(report.ran)}, skipped {len(report.skipped)} finished)")
    return 130 if report.interrupted else 0

"""``kernelsmith curate SRC_DIR OUT_DIR``: mine nn.Module classes from a tree
of repositories into deduplicated, runnable KernelBench-format tasks.

Exit status: 0 on success (even when no task survives), 2 for bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from . import DefaultsOnce, add_isolation_argument, UsageError


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = DefaultsOnce  # --help shows every default, once
    parser.add_argument("src", help="tree of repositories (SRC_DIR/<repo>/...) or a package folder")
    parser.add_argument("out", help="output directory (tasks/, index, dropped.jsonl, report.json, work/)")
    parser.add_argument(
        "--allow-import",
        type=_csv,
        default=[],
        metavar="PKG[,PKG]",
        help="packages a task may import its helpers from (the installed package, e.g. "
        "transformers); torch always. Without it, a class needing another file of the "
        "mined package is dropped as cross_file_import",
    )
    parser.add_argument(
        "--size",
        choices=["small", "medium", "large"],
        default="medium",
        help="size class of get_inputs(); the other classes become get_inputs_<class>() (task.yaml extra_inputs)",
    )
    parser.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl", help="index format")
    parser.add_argument(
        "--layout", choices=["families", "flat"], default="families", help="tasks/<family>/<name>/ or tasks/<name>/"
    )
    parser.add_argument("--include-tests", action="store_true", help="also read test folders and test_*.py files")
    parser.add_argument(
        "--no-follow-symlinks",
        action="store_true",
        help="leave symlinked folders and files out (listed in dropped.jsonl) instead of following them",
    )
    parser.add_argument("--max-file-kb", type=int, default=512, help="skip larger files")
    parser.add_argument("--max-files", type=int, default=None, help="read at most this many files")
    parser.add_argument("--max-modules", type=int, default=None, help="extract at most this many module classes")
    parser.add_argument(
        "--time-limit",
        type=float,
        default=None,
        metavar="SECONDS",
        help="start no new module checks after this long; the rest are dropped as time_limit (rerun to resume)",
    )
    parser.add_argument(
        "--no-resume",
        action="store_true",
        help="ignore verdicts of an earlier run in OUT_DIR/work/ and check everything again",
    )
    parser.add_argument(
        "--near-threshold",
        type=float,
        default=0.8,
        help="estimated Jaccard similarity of token 5-shingles that proposes a near-duplicate",
    )
    parser.add_argument("--num-perm", type=int, default=128, help="MinHash signature length")
    parser.add_argument("--bands", type=int, default=32, help="LSH bands, must divide --num-perm")
    parser.add_argument(
        "--no-structural",
        action="store_true",
        help="keep modules whose operator graph or probe outputs were already seen",
    )
    parser.add_argument("--min-cluster-size", type=int, default=2, help="HDBSCAN min_cluster_size")
    parser.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        help="CPU seconds per module in the execution filter (all its input variants together; a module that only waits is stopped at 2.5x this in wall time)",
    )
    parser.add_argument(
        "--modules-per-worker", type=int, default=400, help="a sandboxed worker is replaced after this many modules"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=2,
        help="sandboxed worker processes at once (also the extraction processes for trees of 200+ files)",
    )
    parser.add_argument("--memory-mb", type=int, default=8192, help="address-space limit per worker (0: none)")

    add_isolation_argument(parser)
    parser.add_argument("--seed", type=int, default=0, help="seed of the random test inputs")
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    parser.add_argument(
        "--model", default=None, help="LLM for inputs the heuristics could not provide, e.g. openai:gpt-4.1 (optional)"
    )
    parser.add_argument("--base-url", default=None, help="the LLM's endpoint (default: the provider's environment)")
    parser.add_argument("--api-key-env", default=None, help="environment variable holding the LLM key")
    parser.add_argument("--llm-max-modules", type=int, default=200, help="at most this many LLM requests")


def run(args: argparse.Namespace) -> int:
    # lazy: keeps 'kernelsmith --help' light (curate is not loaded to build the parser)
    from ..curate import CurateConfig, RunnerConfig, curate

    src = Path(args.src)
    if not src.is_dir():
        raise UsageError(f"SRC_DIR {args.src!r} is not a directory")
    cfg = CurateConfig(
        skip_tests=not args.include_tests,
        max_file_kb=args.max_file_kb,
        near_threshold=args.near_threshold,
        num_perm=args.num_perm,
        bands=args.bands,
        structural=not args.no_structural,
        min_cluster_size=args.min_cluster_size,
        layout=args.layout,
        format=args.format,
        seed=args.seed,
        size=args.size,
        allow_import=list(args.allow_import),
        follow_symlinks=not args.no_follow_symlinks,
        max_files=args.max_files,
        max_modules=args.max_modules,
        time_limit_s=args.time_limit,
        resume=not args.no_resume,
        model=args.model,
        llm_base_url=args.base_url,
        llm_api_key_env=args.api_key_env,
        llm_max_modules=args.llm_max_modules,
        runner=RunnerConfig(
            module_timeout_s=args.timeout,
            modules_per_worker=args.modules_per_worker,
            jobs=args.jobs,
            memory_limit_mb=args.memory_mb or None,
            isolation=args.isolation,
        ),
    )
    try:
        cfg.validate()
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    try:
        report = curate(src, Path(args.out), cfg, log=lambda s: print(s, file=sys.stderr), progress=not args.quiet)
    except KeyboardInterrupt:
        print(
            f"interrupted: verdicts so far are in {Path(args.out) / 'work'}; rerun the same command to resume",
            file=sys.stderr,
        )
        return 130
    print(report.table())
    print(f"report: {Path(args.out) / 'report.json'}")
    return 0

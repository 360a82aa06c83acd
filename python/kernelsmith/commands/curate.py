"""``kernelsmith curate SRC_DIR OUT_DIR``: mine nn.Module classes from a tree
of repositories into deduplicated, runnable KernelBench-format tasks.

Exit status: 0 on success (even when no task survives), 2 for bad input.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("src", help="tree of repositories (SRC_DIR/<repo>/...)")
    parser.add_argument("out", help="output directory (tasks/, index, dropped.jsonl, report.json)")
    parser.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl", help="index format")
    parser.add_argument("--layout", choices=["families", "flat"], default="families",
                        help="tasks/<family>/<name>.py (default) or tasks/<name>.py")
    parser.add_argument("--include-tests", action="store_true", help="also read test folders and test_*.py files")
    parser.add_argument("--max-file-kb", type=int, default=512, help="skip larger files (default 512)")
    parser.add_argument("--near-threshold", type=float, default=0.8,
                        help="estimated Jaccard similarity of token 5-shingles for a near-duplicate (default 0.8)")
    parser.add_argument("--num-perm", type=int, default=128, help="MinHash signature length (default 128)")
    parser.add_argument("--bands", type=int, default=32, help="LSH bands, must divide --num-perm (default 32)")
    parser.add_argument("--no-structural", action="store_true", help="keep modules with an already seen operator graph")
    parser.add_argument("--min-cluster-size", type=int, default=2, help="HDBSCAN min_cluster_size (default 2)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per module in the execution filter")
    parser.add_argument("--batch-size", type=int, default=32, help="modules per sandboxed worker process")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes at once")
    parser.add_argument("--memory-mb", type=int, default=8192, help="address-space limit per worker (0: none)")
    parser.add_argument("--isolation", choices=["auto", "bwrap", "process"], default="auto")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random test inputs")
    parser.add_argument("--model", default=None,
                        help="LLM for inputs the heuristics could not provide, e.g. openai:gpt-4.1 (optional)")
    parser.add_argument("--base-url", default=None, help="the LLM's endpoint (default: the provider's environment)")
    parser.add_argument("--api-key-env", default=None, help="environment variable holding the LLM key")
    parser.add_argument("--llm-max-modules", type=int, default=200, help="at most this many LLM requests")


def run(args: argparse.Namespace) -> int:
    from ..curate import CurateConfig, RunnerConfig, curate

    from . import UsageError

    src = Path(args.src)
    if not src.is_dir():
        raise UsageError(f"SRC_DIR {args.src!r} is not a directory")
    cfg = CurateConfig(
        skip_tests=not args.include_tests, max_file_kb=args.max_file_kb, near_threshold=args.near_threshold,
        num_perm=args.num_perm, bands=args.bands, structural=not args.no_structural,
        min_cluster_size=args.min_cluster_size, layout=args.layout, format=args.format, seed=args.seed,
        model=args.model, llm_base_url=args.base_url, llm_api_key_env=args.api_key_env,
        llm_max_modules=args.llm_max_modules,
        runner=RunnerConfig(module_timeout_s=args.timeout, batch_size=args.batch_size, jobs=args.jobs,
                            memory_limit_mb=args.memory_mb or None, isolation=args.isolation),
    )
    try:
        cfg.validate()
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    report = curate(src, Path(args.out), cfg, log=lambda s: print(s, file=sys.stderr))
    print(report.table())
    print(f"report: {Path(args.out) / 'report.json'}")
    return 0

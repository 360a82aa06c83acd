"""kernelsmith report RUN_DIR: a self-contained HTML page of one run."""

from __future__ import annotations

import argparse
from pathlib import Path
from . import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="run directory written by kernelsmith evolve (or a bench's runs/<task>)")
    parser.add_argument("-o", "--out", help="HTML file to write (default RUN_DIR/report.html)")


def run(args: argparse.Namespace) -> int:
    # lazy: keeps 'kernelsmith --help' light (report is not loaded to build the parser)
    from ..report import write_report

    # Checked here because the report's folder is made before the run is read.
    if not (Path(args.run_dir) / "trajectory.jsonl").is_file():
        raise UsageError(f"{args.run_dir}: not a run directory (no trajectory.jsonl)")
    path = write_report(args.run_dir, args.out)
    print(path)
    return 0

"""kernelsmith report RUN_DIR: a self-contained HTML page of one run."""
from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="run directory written by kernelsmith evolve (or a bench's runs/<task>)")
    parser.add_argument("-o", "--out", help="HTML file to write (default RUN_DIR/report.html)")


def run(args: argparse.Namespace) -> int:
    from ..report import write_report

    path = write_report(args.run_dir, args.out)
    print(path)
    return 0

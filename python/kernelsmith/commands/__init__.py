"""Subcommands of the ``kernelsmith`` CLI (see ``kernelsmith.cli``)."""
from __future__ import annotations

import argparse  # noqa: F401 - for the annotation


class UsageError(ValueError):
    """Bad input on the command line: the CLI prints the message alone (what,
    where, what to do) and exits with code 2."""


def add_policy_arguments(parser: "argparse.ArgumentParser") -> None:
    """--policy and --min-coverage (the evaluator's integrity policy), shared
    by eval and evolve."""
    parser.add_argument("--policy", choices=("strict", "partial"), default=None,
                        help="integrity policy: strict = only the program's own kernels do the work; partial = "
                             "foreign work allowed, coverage reported (default: the task's, strict)")
    parser.add_argument("--min-coverage", type=float, default=None,
                        help="partial policy: least share of forward's time in the program's kernels, 0..1 "
                             "(default: the task's, 0.5)")

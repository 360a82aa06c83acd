"""Subcommands of the ``kernelsmith`` CLI (see ``kernelsmith.cli``)."""

from __future__ import annotations

import argparse


class UsageError(ValueError):
    """Bad input on the command line: the CLI prints the message alone (what,
    where, what to do) and exits with code 2."""


def add_policy_arguments(parser: "argparse.ArgumentParser") -> None:
    """--policy and --min-coverage (the evaluator's integrity policy), shared
    by eval and evolve."""
    parser.add_argument(
        "--policy",
        choices=("strict", "partial"),
        default=None,
        help="integrity policy: strict = only the program's own kernels do the work; partial = "
        "foreign work allowed, coverage reported (default: the task's, strict)",
    )
    parser.add_argument(
        "--min-coverage",
        type=float,
        default=None,
        help="partial policy: least share of forward's time in the program's kernels, 0..1 (default: the task's, 0.5)",
    )


#: --isolation's help, the same wherever candidate or task code runs
ISOLATION_HELP = (
    "how code under evaluation is sandboxed: bwrap (bubblewrap: no network, a private view of the "
    "file system; fails where bubblewrap cannot run), process (a separate process only), auto "
    "(bwrap where it works, else process)"
)


def add_isolation_argument(parser: "argparse.ArgumentParser") -> None:
    parser.add_argument(
        "--isolation", choices=("auto", "bwrap", "process"), default="auto", help=ISOLATION_HELP + " (default: auto)"
    )


class DefaultsOnce(argparse.HelpFormatter):
    """--help with each option's default, once: added where the help text
    does not already say it, and not for flags or options with no default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "default" in text.lower()
            or default is None
            or default is False
            or default == argparse.SUPPRESS
            or default == []
            or action.option_strings == []
            or isinstance(action, argparse._StoreConstAction)
        ):
            return text
        return text + " (default: %(default)s)"

"""The ``kernelsmith`` command line.

Each subcommand lives in ``kernelsmith.commands.<name>`` with two functions,
``add_arguments(parser)`` and ``run(args) -> int``; adding a command is a new
module plus one line in ``COMMANDS``.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import re
import sys
from typing import NoReturn
from . import __version__
from ._logging import sync_core_log_level
from .commands import UsageError

# name -> one-line help. Command modules import their heavy dependencies
# (torch, triton, openai) inside run(), so building the parser stays fast and
# a missing optional dependency of one command does not break the others.
COMMANDS: dict[str, str] = {
    "demo": "short offline evolution on a synthetic objective (shows the engine working)",
    "evolve": "evolve faster kernels for a task (LLM, offline mutation or replay)",
    "eval": "evaluate a candidate program against a task (correctness, hacks, timing)",
    "bench": "run the unified protocol over a suite of KernelBench-format tasks; metrics, tables, plots",
    "report": "self-contained HTML report of one run (scores, lineage, best kernel diff, feedback, usage)",
    "curate": "mine nn.Module classes from repositories into deduplicated KernelBench-format tasks",
    "export": "turn run directories into training data (SFT samples, RL rows for verl)",
    "serve": "HTTP evaluation and reward service for RL trainers (verl, TRL, OpenRLHF)",
    "task": "check a task for degenerate forms and the probes that judge it (task check); set up an in-place task: "
    "a kernel in its own source tree, its tests, a patch (task init)",
    "daemon": "the per-user evaluation daemon that keeps `eval` warm between calls (status, start, stop)",
}


class Parser(argparse.ArgumentParser):
    """argparse with "did you mean" for a mistyped option, command or choice
    (Python 3.14's ``suggest_on_error`` does the choices there; the options
    are ours on every version)."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        if sys.version_info >= (3, 14):
            kwargs.setdefault("suggest_on_error", True)
        super().__init__(*args, **kwargs)

    def option_strings(self) -> list[str]:
        return [o for action in self._actions for o in action.option_strings]

    def suggestion(self, message: str) -> str:
        """`` (did you mean ...?)`` for the unknown word in argparse's ``message``, or ""."""
        match = re.search(r"unrecognized arguments: (.*)", message)
        if match:
            hints = []
            for word in match.group(1).split():
                if word.startswith("-"):
                    close = difflib.get_close_matches(word.split("=", 1)[0], self.option_strings(), n=1, cutoff=0.6)
                    if close:
                        hints.append(close[0])
            return f" (did you mean {', '.join(hints)}?)" if hints else ""
        match = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if match and "did you mean" not in message:
            choices = [c.strip().strip("'") for c in match.group(2).split(",")]
            close = difflib.get_close_matches(match.group(1), choices, n=1, cutoff=0.5)
            return f" (did you mean '{close[0]}'?)" if close else ""
        return ""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}{self.suggestion(message)}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="kernelsmith",
        description="Evolve fast, verified GPU kernels with LLMs; curate tasks; export training data.",
    )
    parser.add_argument("--version", action="version", version=f"kernelsmith {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        module = importlib.import_module(f"kernelsmith.commands.{name}")
        command = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(command)
        # Also after the command name, where people type it; SUPPRESS keeps
        # the top-level count when it is not given here.
        command.add_argument(
            "-v",
            "--verbose",
            action="count",
            default=argparse.SUPPRESS,
            help="more logging (-vv for debug); tracebacks on errors",
        )
        command.set_defaults(_module=module, _parser=command)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        # said by the command's own parser: its usage, its options to suggest
        (getattr(args, "_parser", None) or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command is None:
        parser.print_help()
        return 2
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")

    sync_core_log_level()
    try:
        return int(args._module.run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 -- one clear message instead of a traceback
        return report_error(args, exc)


#: exit code of bad input (usage, config, task, run directory), as argparse uses
EXIT_USAGE = 2
#: exit code of a run stopped by a fault (e.g. the LLM endpoint) or a crash
EXIT_FAILURE = 1


def _usage_errors() -> tuple[type[BaseException], ...]:
    from .config import ConfigError  # lazy: keeps 'kernelsmith --help' light (config is not loaded to build the parser)

    # lazy: keeps 'kernelsmith --help' light (evolve.rundir is not loaded to build the parser)
    from .evolve.rundir import RunDirError
    from .task import TaskError  # lazy: keeps 'kernelsmith --help' light (task is not loaded to build the parser)

    # A missing or misplaced input file or folder is the user's to fix.
    return (UsageError, ConfigError, TaskError, RunDirError, FileNotFoundError, NotADirectoryError, FileExistsError)


def report_error(args: argparse.Namespace, exc: BaseException) -> int:
    """Print ``exc`` as one line (``-v`` adds the traceback); the exit code."""
    prog = f"kernelsmith {args.command}"
    if args.verbose:
        import traceback

        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    if isinstance(exc, _usage_errors()):
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    hint = "" if args.verbose else " (run with -v for the traceback)"
    print(f"{prog}: failed: {type(exc).__name__}: {exc}{hint}", file=sys.stderr)
    return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())

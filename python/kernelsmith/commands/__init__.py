"""Subcommands of the ``kernelsmith`` CLI (see ``kernelsmith.cli``)."""
from __future__ import annotations


class UsageError(ValueError):
    """Bad input on the command line: the CLI prints the message alone (what,
    where, what to do) and exits with code 2."""

"""Threads the program started: every Python thread that was not running
before the program was loaded is the program's, and could change what is
checked after its calls (the referee's evidence)."""

from __future__ import annotations

import sys

from .base import BEFORE_LOAD, CHECKPOINT, NO_SPEEDUP, Check, Context


def new_threads(before: set[int]) -> list[str]:
    """Names of the live Python threads not in ``before`` (thread ids)."""
    import threading

    new = set(sys._current_frames()) - before
    if not new:
        return []
    names = {t.ident: t.name for t in threading.enumerate()}
    return sorted(names.get(ident, f"thread {ident}") for ident in new)


class Threads(Check):
    name = "threads"
    points = (BEFORE_LOAD, CHECKPOINT)
    keeps = ("threads_before",)
    verdict = NO_SPEEDUP

    def reasons(self, at: str, ctx: Context) -> list[str]:
        if at == BEFORE_LOAD:  # every thread that starts after this is the program's
            ctx.threads_before = set(sys._current_frames())
            return []
        threads = new_threads(ctx.threads_before) if ctx.checks_on else []
        if not threads:
            return []
        return [
            f"the program started {len(threads)} thread(s) that still run ({', '.join(threads[:3])}): "
            "threads are not allowed (they could change what is checked after the program's calls)"
        ]

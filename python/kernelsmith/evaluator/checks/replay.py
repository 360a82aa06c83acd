"""Replayed outputs: a wrong output that is the very output of an earlier
trial, on different inputs (a cache or a recording), over the last four
trials' fingerprints (correctness.fingerprint)."""

from __future__ import annotations

from .base import AFTER_TRIALS, TRIAL_DONE, TRIAL_MISMATCH, Check, Context
from ..probes import is_probe


class Replay(Check):
    name = "replay"
    points = (TRIAL_MISMATCH, TRIAL_DONE, AFTER_TRIALS)

    def reasons(self, at: str, ctx: Context) -> list[str]:
        history = ctx.history  # (reference's, candidate's) fingerprints per trial
        if at == TRIAL_DONE:
            # the values now: the program may rewrite a buffer it returned
            history.append((ctx.cmp.fingerprint(ctx.expected), ctx.cmp.fingerprint(ctx.got)))
            del history[:-4]  # replays are of recent outputs
            return []
        if at == AFTER_TRIALS:
            history.clear()
            return []
        # on a probe set the same output as before is an output that ignores
        # its input (zeros, a constant), which the task's own inputs could not
        # tell from the right answer: a wrong answer (a kernel that writes
        # nothing gives it too), not a replay
        replays = [] if is_probe(ctx.set_name) else history
        got_print, expected_print = (
            (ctx.cmp.fingerprint(ctx.got), ctx.cmp.fingerprint(ctx.expected)) if replays else ([], [])
        )
        for old_expected, old_got in replays:
            if got_print == old_got and expected_print != old_expected:
                return [
                    f"forward returned the same output as for earlier, different inputs ({ctx.label}): cached "
                    "or replayed results"
                ]
        return []

"""The output of the timed calls must still be right: a program that
behaves differently when it is not being checked. Checked twice: the
output of a timed call just after new values were moved into the timed
inputs between samples (evaluator/timed_rotation.py: a cache keyed on the
buffer or on a sample of the values returns an earlier call's output), and
the last timed call's output."""

from __future__ import annotations

from .base import TIMED_OUTPUT, Check, Context


class TimedOutput(Check):
    name = "timed output"
    points = (TIMED_OUTPUT,)
    verdict = {"correct": False}

    def reasons(self, at: str, ctx: Context) -> list[str]:
        last, cmp = ctx.last, ctx.cmp  # the last timed call's output and arguments
        if last.get("moved_wrong"):  # a timed call after new values were moved in (timed_rotation.py)
            return [str(last["moved_wrong"])]
        if "out" not in last:
            return []
        res = cmp.compare(
            cmp.flatten_outputs(last["out"]),
            cmp.flatten_outputs(ctx.model(*ctx.clone(list(last["args"])))),
            ctx.atol,
            ctx.rtol,
        )
        if res["ok"]:
            return []
        return [
            f"the output of the timed calls is wrong ({res['message']}): the program behaves differently when timed"
        ]

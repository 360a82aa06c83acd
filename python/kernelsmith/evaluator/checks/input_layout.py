"""A call's inputs come back as they were given: same class, layout and
storage (a re-homed or re-classed input makes the next caller pay)."""

from __future__ import annotations

from .base import CALL_INPUTS, Check, Context


class InputLayout(Check):
    name = "input layout"
    points = (CALL_INPUTS,)
    verdict = {"correct": False}

    def reasons(self, at: str, ctx: Context) -> list[str]:
        moved = ctx.cmp.layout_change(ctx.given, ctx.args)
        if moved is None:
            return []
        return [
            f"forward changed its input #{moved[0]} in place ({ctx.where}): {moved[1]}; the caller's tensors must "
            "come back as they were given (a re-homed or re-classed input makes the next caller, the "
            "reference when timed, pay for it)"
        ]

"""A trial's inputs stay unchanged: the values after the call are the
pristine copy's."""

from __future__ import annotations

from .base import TRIAL_INPUTS, Check, Context


class InputsUnchanged(Check):
    name = "inputs unchanged"
    points = (TRIAL_INPUTS,)

    def reasons(self, at: str, ctx: Context) -> list[str]:
        changed = ctx.cmp.inputs_equal(ctx.args, ctx.pristine)
        if changed is None:
            return []
        return [f"forward modified its input #{changed} in place ({ctx.label}); inputs must stay unchanged"]

"""The checks' own values (evaluator/policy.py): what the program changed
of the values the checks read, and whether it reached into the evaluator's
modules. At a checkpoint, and around every call of the program (with the
op guard's and the census's frozen copies)."""

from __future__ import annotations

from typing import Any

from .base import BEFORE_LOAD, CALL, CALL_RAISED, CHECKPOINT, NO_SPEEDUP, Check, Context
from ..policy import Constants, ModuleFence, checker_drift, drift_reason


class PolicyValues(Check):
    name = "policy values"
    points = (BEFORE_LOAD, CHECKPOINT, CALL_RAISED, CALL)
    keeps = ("constants", "fence")
    verdict = NO_SPEEDUP
    joins = True  # at a checkpoint, one verdict with the snapshot's names

    def reasons(self, at: str, ctx: Context) -> list[str]:
        if at == BEFORE_LOAD:
            # the evaluator's constants fingerprinted to name a change after,
            # and the program's own reads of kernelsmith's modules noted
            # however it got them (the checks' values are frozen by the
            # worker already: ctx.frozen, which the guard and the census read)
            on = ctx.checks_on
            ctx.constants = Constants() if on else None
            ctx.fence = (
                ModuleFence([ctx.cand_path], api=getattr(ctx.backend, "runtime_modules", ())).install() if on else None
            )
            return []
        if not ctx.checks_on:
            return []
        checkers = () if at == CHECKPOINT else (ctx.guard, ctx.census)
        drift = (ctx.constants.changed() if ctx.constants is not None else []) + checker_drift(ctx.frozen, *checkers)
        reached = ctx.fence.reason() if ctx.fence is not None else None
        return ([drift_reason(drift)] if drift else []) + ([reached] if reached else [])

    def fields(self, at: str) -> dict[str, Any]:
        # around a call the verdict is the call's (the result is not timed yet)
        return NO_SPEEDUP if at == CHECKPOINT else {}

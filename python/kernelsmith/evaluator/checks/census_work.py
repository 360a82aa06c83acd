"""The kernel census (evaluator/census.py): whose kernels did the work of a
call (the program's own, a library's, the reference's), judged by the
task's policy. It names what the op guard could not see."""

from __future__ import annotations

from .base import CALL, Check, Context
from .torch_ops import forbidden


class CensusWork(Check):
    name = "census"
    points = (CALL,)
    joins = True

    def reasons(self, at: str, ctx: Context) -> list[str]:
        # lazy: evaluator.census pulls in torch, numpy, which evaluator.checks.census_work does not load on its own
        from ..census import judge

        if forbidden(ctx):
            return []
        return judge(ctx.seen, ctx.policy, ctx.frozen.min_coverage)

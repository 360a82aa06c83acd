"""Output provenance (census.provenance): under the strict policy, a call's
outputs were written by the program's own kernels."""

from __future__ import annotations

from .base import CALL_OUTPUT, Check, Context


class Provenance(Check):
    name = "provenance"
    points = (CALL_OUTPUT,)

    def reasons(self, at: str, ctx: Context) -> list[str]:
        if ctx.policy != "strict" or not ctx.launches.kernels:
            return []
        return list(ctx.census.provenance(ctx.flat))

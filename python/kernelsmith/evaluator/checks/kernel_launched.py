"""Every call launches at least one of the program's own kernels."""

from __future__ import annotations

from .base import CALL, Check, Context


class KernelLaunched(Check):
    name = "kernel launched"
    points = (CALL,)
    joins = True

    def reasons(self, at: str, ctx: Context) -> list[str]:
        if ctx.launches.kernels:
            return []
        return [
            f"forward launched no {ctx.backend.name} kernel: the result must be computed by the program's own kernels"
        ]

"""The op guard (evaluator/guards.py): under the strict policy, forward runs
no PyTorch compute op beyond allocation, views, copies and the task's
allowed ops."""

from __future__ import annotations

from .base import CALL, Check, Context


def forbidden(ctx: Context) -> bool:
    """The op guard saw forbidden ops and the policy is strict: its reason
    stands, and the census does not judge the call."""
    return bool(ctx.guard.forbidden) and ctx.policy == "strict"


class TorchOps(Check):
    name = "torch ops"
    points = (CALL,)
    joins = True

    def reasons(self, at: str, ctx: Context) -> list[str]:
        if not forbidden(ctx):
            return []
        allowed = ctx.cfg.allowed_torch_ops
        return [
            f"forward ran PyTorch compute ops {', '.join(ctx.guard.forbidden)}: only allocation, view, reshape and "
            "copy ops "
            + (f"(and the task's allowed ops {', '.join(allowed)}) " if allowed else "")
            + "are allowed in forward"
        ]

"""The integrity snapshot (evaluator/integrity.py): the evaluator's own
functions, the ones its checks and timing rely on, as they were before the
program was loaded."""

from __future__ import annotations

from .base import BEFORE_LOAD, CHECKPOINT, NO_SPEEDUP, Check, Context
from ..integrity import Snapshot, reason


class IntegritySnapshot(Check):
    name = "integrity snapshot"
    points = (BEFORE_LOAD, CHECKPOINT)
    keeps = ("snapshot",)
    verdict = NO_SPEEDUP

    def reasons(self, at: str, ctx: Context) -> list[str]:
        if at == BEFORE_LOAD:
            ctx.snapshot = Snapshot(ctx.backend) if ctx.checks_on else None
            return []
        names = ctx.snapshot.changed() if ctx.snapshot is not None else []
        return [reason(names)] if names else []

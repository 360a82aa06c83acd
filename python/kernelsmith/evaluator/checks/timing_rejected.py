"""The timing's own verdict: work the timer cannot see (another stream,
work left running after forward returned) rejects the candidate; its times
stay in the result for diagnosis, its speedup is not used."""

from __future__ import annotations

from .base import NO_SPEEDUP, TIMING_RESULT, Check, Context


class TimingRejected(Check):
    name = "timing rejected"
    points = (TIMING_RESULT,)
    verdict = {**NO_SPEEDUP, "speedup_ci_low": None, "speedup_ci_high": None}

    def reasons(self, at: str, ctx: Context) -> list[str]:
        if not ctx.outcome.rejected:
            return []
        return [
            f"timing rejected the candidate: {ctx.outcome.rejected_reason}. Launch all work on the current stream "
            "and let forward's work finish on it; work the timer cannot see does not count as fast"
        ]

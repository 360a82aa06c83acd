"""The timing a worker reports against the time the parent saw it hold
the device's timing slot.

Every pair timed at least the fastest sample of each side,
``launches_per_sample`` calls each; a report whose pairs add up to more
than the slot lasted (a reference made to look slow, a candidate made to
look fast against it) was not measured. Notes what it compared as
``census["timing_cross_check"]``.
"""

from __future__ import annotations

import time
from typing import Any

from ...result import EvalResult
from .base import TrustedCheck, TrustedContext, overrule


class SlotCrossCheck(TrustedCheck):
    name = "timing slot"
    #: the claimed time may exceed the slot's by this factor, plus GRACE_S
    SLACK = 1.05
    GRACE_S = 0.05

    def reasons(self, result: EvalResult, ctx: TrustedContext) -> list[str]:
        if ctx.slots is None:  # timed without a slot (no gate)
            return []
        return slot_reasons(result, list(ctx.slots), self.SLACK, self.GRACE_S)


def cross_check_timing(
    result: EvalResult, slots: list[Any], slack: float = SlotCrossCheck.SLACK, grace_s: float = SlotCrossCheck.GRACE_S
) -> None:
    """This check alone (tests, tools): overrule ``result`` when its timing
    claims more than ``slots`` ((start, end) pairs, end None while held) lasted."""
    overrule(result, slot_reasons(result, slots, slack, grace_s))


def slot_reasons(result: EvalResult, slots: list[Any], slack: float, grace_s: float) -> list[str]:
    """Why ``result``'s timing cannot have been measured in ``slots``; only a
    correct result with paired timing is looked at."""
    timing = result.timing if isinstance(result.timing, dict) else {}
    if result.category != "ok" or not slots or not timing.get("n_pairs"):
        return []
    held = sum((end if end is not None else time.monotonic()) - start for start, end in slots)
    # several timing shapes (TaskConfig.timing_shapes): each timed in a slot
    # of its own, the claims added up (never less than the first shape's,
    # which the top level repeats)

    def claim(part: Any) -> float:
        per_pair_ms = float(part["reference"]["min"]) + float(part["candidate"]["min"])
        return int(part["n_pairs"]) * int(part.get("launches_per_sample") or 1) * per_pair_ms / 1e3

    try:
        claimed = claim(timing)
        shapes = timing.get("shapes")
        if isinstance(shapes, list) and shapes:
            claimed = max(claimed, sum(claim(part) for part in shapes))
    except (KeyError, TypeError, ValueError):
        return []
    census = result.census if isinstance(result.census, dict) else {}
    result.census = census
    census["timing_cross_check"] = {"claimed_s": round(claimed, 4), "slot_s": round(held, 4)}
    if claimed > held * slack + grace_s:
        return [
            f"the reported timing adds up to {claimed:.3f} s of timed calls, but the timing slot "
            f"was held for {held:.3f} s: the statistics were not measured"
        ]
    return []

"""Every timed call of a shape launches the same kernels, at least one: a
program that does its work only while it is checked, or other work when
timed, launches other kernels (a program may launch other kernels for
another shape)."""

from __future__ import annotations

from typing import Any

from .base import SHAPE_TIMED, Check, Context


class TimedKernels(Check):
    name = "timed kernels"
    points = (SHAPE_TIMED,)
    verdict = {"correct": False}

    def reasons(self, at: str, ctx: Context) -> list[str]:
        per_call = ctx.per_call  # each timed call's kernels
        if not per_call:
            return []  # replayed from a CUDA graph: no Python-level calls to count
        kinds: dict[Any, int] = {}
        for i, sig in enumerate(per_call):
            kinds.setdefault(sig, i)
        ctx.out.setdefault("census", {})["per_call"] = {
            "calls": len(per_call),
            "distinct": len(kinds),
            "kernels": list(next(iter(kinds)))[:8],
        }
        if () in kinds:
            return [
                f"timed call #{kinds[()] + 1} of {len(per_call)} launched no {ctx.backend.name} kernel: forward "
                "must do its work on every call, not only while it is checked"
            ]
        if len(kinds) > 1:
            (a, ia), (b, ib) = list(kinds.items())[:2]
            return [
                f"timed calls launched different kernels (call #{ia + 1}: {', '.join(a)}; call #{ib + 1}: "
                f"{', '.join(b)}): every call must do the same work"
            ]
        return []

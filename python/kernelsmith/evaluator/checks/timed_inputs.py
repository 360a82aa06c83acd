"""The timed inputs come back as they were given: a program that re-homes,
re-classes or rewrites its inputs while timed moves work onto the caller
(the reference, timed on the same tensors, would pay for it;
fixtures/hacks_v3/rehome_*). The reference gets copies of its own
(:func:`own_copies`); the program's sets are checked after each shape."""

from __future__ import annotations

from typing import Any, Callable, Optional

from .base import NO_SPEEDUP, SHAPE_TIMED, Check, Context


def own_copies(
    torch: Any, input_sets: list[list[Any]], clone: Callable[[list[Any]], list[Any]], cmp: Any
) -> tuple[list[list[Any]], list[list[Any]], Any]:
    """The reference's own copies of the timed input sets (the program keeps
    the originals), and what :func:`inputs_after_timing` checks the
    program's sets against: their layout (class, strides, pointer, ...) and
    fingerprints of their values. Handed the same tensors, a program that
    re-homes its input (``set_`` into a padded layout, ``.data =`` a strided
    view, a ``__class__`` with ``__torch_function__``) made every reference
    call pay for it (fixtures/hacks_v3/rehome_*)."""
    ref_sets = [clone(s) for s in input_sets]
    records = [cmp.layout(s) for s in input_sets]
    prints = [cmp.fingerprint([v for v in s if isinstance(v, torch.Tensor)]) for s in ref_sets]
    return ref_sets, records, prints


def inputs_after_timing(
    torch: Any, cmp: Any, input_sets: list[list[Any]], ref_sets: list[list[Any]], records: list[Any], prints: list[Any]
) -> Optional[str]:
    """Why the program's timed inputs are not as they were given, or None:
    class and layout first (without running a re-classed tensor's code),
    then the values, bitwise against the reference's copies (unless the
    reference itself changed its copies: then the program is not blamed)."""
    for i, (s, rec) in enumerate(zip(input_sets, records)):
        moved = cmp.layout_change(rec, s)
        if moved is not None:
            return f"forward changed its input #{moved[0]} in place while timed (timed input set {i}): {moved[1]}"
    for i, (s, r, fp) in enumerate(zip(input_sets, ref_sets, prints)):
        changed = cmp.inputs_equal(s, r)
        if changed is not None and cmp.fingerprint([v for v in r if isinstance(v, torch.Tensor)]) == fp:
            return f"forward modified its input #{changed} in place while timed (timed input set {i})"
    return None


class TimedInputs(Check):
    name = "timed inputs"
    points = (SHAPE_TIMED,)
    verdict = NO_SPEEDUP

    def reasons(self, at: str, ctx: Context) -> list[str]:
        import torch

        # before anything reads the program's timed tensors (a re-classed one
        # runs the program's code when touched)
        problem = inputs_after_timing(torch, ctx.cmp, ctx.input_sets, ctx.ref_sets, ctx.given, ctx.prints)
        if not problem:
            return []
        return [
            f"{problem}{f' (timing shape {ctx.shape})' if ctx.several else ''}; the caller's tensors must come "
            "back as they were given (inputs re-homed, re-classed or rewritten while timed are work moved onto "
            "the caller)"
        ]

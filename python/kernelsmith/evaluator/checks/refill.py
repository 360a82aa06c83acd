"""Work on every call: new values in buffers the program was already called
on (same objects, pointers and version counters), then newly allocated
inputs, each checked against the reference. A result cached across calls,
keyed on anything but all the values, fails here. After the trials (on the
last trial's buffers) and after the timing (on the first timed set's)."""

from __future__ import annotations

from typing import Any, Callable, Optional

from .base import AFTER_TIMING, AFTER_TRIALS, Check, Context, Verdict, hacked

#: what a hacked verdict of the refill check also says
FIELDS = {"correct": False}


def refill_in_place(held: list[Any], new: list[Any]) -> None:
    """Copy ``new`` into the tensors of ``held`` through their memory, and
    leave each one's version counter where it was: to the program, the
    refilled tensors are the very objects, at the very addresses and
    versions, of the calls before (a timed call looks the same). A cache
    keyed on ``id()``, ``data_ptr()`` or a weak reference plus ``_version``
    (copy_ would bump it) hits and returns the old answer
    (fixtures/hacks_v3/cache_*)."""
    import torch

    for dst, src in zip(held, new):
        if isinstance(dst, torch.Tensor) and isinstance(src, torch.Tensor) and dst.shape == src.shape:
            with torch.autograd._unsafe_preserve_version_counter(dst):  # type: ignore[attr-defined]
                dst.copy_(src)


def refill_reasons(
    call: Callable[[list[Any], str], list[Any]],
    model: Any,
    gen: Callable[[], Any],
    make_inputs: Callable[[Any], list[Any]],
    clone: Callable[[list[Any]], list[Any]],
    cmp: Any,
    atol: float,
    rtol: float,
    backend: Any,
    when: str,
    held: list[Any],
    fresh: bool,
) -> list[str]:
    """The refill checks on ``held`` (then, with ``fresh``, on newly
    allocated inputs); the reasons of the first that finds a cached result.
    A program that is simply wrong for the new values ends in an
    ``incorrect`` verdict. The reference runs first, on clones of inputs the
    program has not been called on yet."""
    import torch

    with torch.no_grad():
        old = clone(held)
        refill_in_place(held, make_inputs(gen))
        found = _check(
            call,
            model,
            clone,
            cmp,
            atol,
            rtol,
            backend,
            when,
            held,
            "the same input tensors refilled in place with new values (same objects, data pointers and "
            "version counters as the calls before)",
            old,
        )
        if found or not fresh:
            return found
        return _check(
            call, model, clone, cmp, atol, rtol, backend, when, make_inputs(gen), "newly allocated inputs", held
        )  # _check only reads its clones


def refill_checks(
    call: Callable[[list[Any], str], list[Any]],
    model: Any,
    gen: Callable[[], Any],
    make_inputs: Callable[[Any], list[Any]],
    clone: Callable[[list[Any]], list[Any]],
    cmp: Any,
    atol: float,
    rtol: float,
    backend: Any,
    when: str,
    held: list[Any],
    fresh: bool,
) -> None:
    """:func:`refill_reasons`, a finding raised as the hacked verdict."""
    found = refill_reasons(call, model, gen, make_inputs, clone, cmp, atol, rtol, backend, when, held, fresh)
    if found:
        raise hacked(found, **FIELDS)


def _check(
    call: Callable[[list[Any], str], list[Any]],
    model: Any,
    clone: Callable[[list[Any]], list[Any]],
    cmp: Any,
    atol: float,
    rtol: float,
    backend: Any,
    when: str,
    args: list[Any],
    how: str,
    old: Optional[list[Any]] = None,
) -> list[str]:
    # the reference first, on copies the program has not been handed:
    # a tensor the program was called on may come back with its class
    # or layout changed (fixtures/hacks_v3/rehome_*), and its clone would
    # run the program's code inside the reference
    expected = cmp.flatten_outputs(model(*clone(args)))
    backend.synchronize()
    got = cmp.snapshot(call(args, f"{when}: {how}"))
    backend.synchronize()
    res = cmp.compare(got, expected, atol, rtol)
    if res["ok"]:
        return []
    # A cache, a switch, or a plain bug? A program that is simply wrong
    # for these values (a kernel that drops the last element is wrong
    # only when that element is positive) still gets the earlier values
    # right, does not return their answer now, and gives the same wrong
    # answer on the same values in new buffers.
    changed = False
    if old is not None:
        before = cmp.snapshot(call(clone(old), f"{when}: the earlier values in new buffers"))
        changed = (
            cmp.identical(got, before)
            or not cmp.compare(before, cmp.flatten_outputs(model(*clone(old))), atol, rtol)["ok"]
        )
    if not changed:
        again = cmp.snapshot(call(clone(args), f"{when}: the same values in new buffers"))
        if not cmp.compare(again, expected, atol, rtol)["ok"]:
            raise Verdict(
                category="incorrect",
                compiled=True,
                correct=False,
                error=f"wrong output on {how} ({when}; {res['message']}), and again on the same values in new buffers",
            )
    return [
        f"wrong output on {how} ({when}; {res['message']}): the program returned a result cached from "
        "an earlier call instead of computing it on every call"
    ]


class Refill(Check):
    name = "refill"
    points = (AFTER_TRIALS, AFTER_TIMING)
    verdict = FIELDS

    def reasons(self, at: str, ctx: Context) -> list[str]:
        if not ctx.checks_on:
            return []
        when = "correctness" if at == AFTER_TRIALS else "after timing"
        # after the trials: the last trial's buffers, which the program has
        # just been called on (the trials themselves use new buffers and
        # values every time); after the timing: the first timing shape's
        # values, held in its first set
        return refill_reasons(
            ctx.run_checked,
            ctx.model,
            ctx.gen,
            ctx.make_inputs,
            ctx.clone,
            ctx.cmp,
            ctx.atol,
            ctx.rtol,
            ctx.backend,
            when,
            held=ctx.held,
            fresh=at == AFTER_TIMING,
        )

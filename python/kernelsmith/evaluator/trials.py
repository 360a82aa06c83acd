"""The worker's correctness trials: every call of the program checked
(:func:`run_checked`), the trials on the task's input sets, each compared
with the reference before and after it runs, and what follows the last
trial (the refill checks, an integrity checkpoint, the referee's evidence).

The checks themselves are units of :mod:`kernelsmith.evaluator.checks`;
this module says when each moment comes and what it sees. ``ctx`` is the
worker's :class:`~kernelsmith.evaluator.checks.Context` for one candidate.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable

from .checks import Context, Verdict, enforce, findings, hacked
from .checks.base import (
    AFTER_TRIALS,
    CALL,
    CALL_INPUTS,
    CALL_OUTPUT,
    CALL_RAISED,
    CHECKPOINT,
    HAND_OVER,
    TRIAL_DONE,
    TRIAL_INPUTS,
    TRIAL_MISMATCH,
    TRIAL_OUTPUT,
)
from .probes import (
    input_generator,
    assess as assess_probes,
    describe as describe_probes,
    is_probe,
    PREFIX as PROBE_PREFIX,
    PROBES,
)
from .checks.trivial_output import trivial_outputs


def run_checked(ctx: Context, args: list[Any], where: str) -> list[Any]:
    """One call of the program, watched (op guard, census, launch record,
    device memory meter) and checked; its outputs, flattened."""
    # lazy: evaluator.guards pulls in torch, numpy, which evaluator.trials does not load on its own
    from .guards import TorchOpGuard

    cmp, census, backend = ctx.cmp, ctx.census, ctx.backend
    guard = TorchOpGuard(tracker=census.note_derived, frozen=ctx.frozen.allowed_ops)
    given = cmp.layout(args)  # harness-made tensors: reading them runs no program code
    first = ctx.calls == 0
    ctx.calls += 1
    if first:  # named, so a limit reached here says it was the compile (or a package's autotuning)
        ctx.chan.stage(f"{where}: the program's first call (compiles its kernels)")
    t0 = time.monotonic()
    try:
        ctx.meter.start()
        with census.watch() as seen:
            with backend.launch_guard() as launches:
                with guard:
                    result = ctx.model_new(*args)
                backend.synchronize()
    except BaseException as exc:
        changed, fields = findings(CALL_RAISED, ctx, guard=guard)
        if changed:  # it failed after changing the checks: that is the verdict
            raise hacked(changed, **fields) from None
        raise ctx.fail_from(exc, f"ModelNew.forward raised ({where})")
    finally:
        ctx.meter.stop()
        if first:  # Triton and OpenCL compile on the first call
            ctx.phases["compile"] = round(time.monotonic() - t0, 4)
        ctx.out["census"].update(census.total.summary())
    enforce(CALL_INPUTS, ctx, given=given, args=args, where=where)
    for k in launches.kernels:
        if k not in ctx.kernels:
            ctx.kernels.append(k)
    for op in guard.seen:
        if op not in ctx.torch_ops:
            ctx.torch_ops.append(op)
    reasons, fields = findings(CALL, ctx, guard=guard, seen=seen, launches=launches)
    try:
        flat = cmp.flatten_outputs(result)
    except TypeError as exc:
        if reasons:
            raise hacked(reasons, **fields)
        raise Verdict(category="incorrect", compiled=True, error=str(exc))
    if not reasons:
        reasons, fields = findings(CALL_OUTPUT, ctx, flat=flat, launches=launches)
    if reasons:
        raise hacked(reasons, **fields)
    return flat


def run_trials(ctx: Context) -> None:
    """The trials, then what follows them; ``ctx.out`` says ok when they pass."""
    cfg = ctx.cfg
    trial_sets: list[tuple[str, int]] = [("get_inputs", t) for t in range(ctx.trials)]
    trial_sets += [(g, 0) for g in cfg.extra_inputs]
    stats = {
        "max_abs_err": 0.0,
        "max_rel_err": 0.0,
        "atol": ctx.atol,
        "rtol": ctx.rtol,
        "trials": 0,
        "input_sets": cfg.check_sets,
        "first_mismatch": None,
    }
    ctx.out["correctness"] = stats
    # history: fingerprints (correctness.fingerprint) of (reference outputs,
    # candidate outputs) per trial, the replay check's; referee_trials: per
    # input set, the last trial, what the trusted referee re-checks;
    # kept_forms: trivial forms still rejected as such (no probe tells them apart)
    ctx.update(
        trial_sets=trial_sets,
        stats=stats,
        history=[],
        referee_trials={},
        kept_forms=[],
        last_of_set={name: i for i, (name, _) in enumerate(trial_sets)},
    )
    ctx.model.eval()
    started = time.monotonic()
    # (a degenerate task's probe sets are appended to trial_sets on the first
    # trial, and this loop runs them after the task's own sets)
    last: list[Any] = []  # the last trial's buffers and generator, for the refill checks
    for step, (set_name, trial) in enumerate(trial_sets):
        last.clear()  # before the next trial makes its own
        last.extend(_trial(ctx, step, set_name, trial))
    _after_trials(ctx, last, started)


def _trial(ctx: Context, step: int, set_name: str, trial: int) -> tuple[list[Any], Callable[[], Any]]:
    """One trial: the program before and after the reference on the same
    values, each call on inputs of its own; the last call's inputs and the
    set's generator."""
    import torch

    cmp, chan, stats = ctx.cmp, ctx.chan, ctx.stats
    gen = input_generator(ctx.ref, set_name)
    if gen is None:
        raise Verdict(category="runtime", error=f"task reference defines no input generator {set_name}")
    label = f"input set '{set_name}', trial {trial}"
    chan.stage(label)
    first = stats["trials"] == 0
    with torch.no_grad():
        input_seed_index = chan.seeds_received
        pristine = ctx.make_inputs(gen)
        c_args = ctx.clone(pristine)
        got_before = cmp.snapshot(run_checked(ctx, c_args, f"{label}, before the reference"))
        enforce(TRIAL_INPUTS, ctx, args=c_args, pristine=pristine, label=label)
        del c_args  # each call gets inputs of its own; one copy at a time besides the pristine ones
        expected = _reference(ctx, pristine, label, first)
        c_args = ctx.clone(pristine)
        got_after = run_checked(ctx, c_args, f"{label}, after the reference")
        enforce(TRIAL_INPUTS, ctx, args=c_args, pristine=pristine, label=label)
    stats["trials"] += 1
    res: dict[str, Any] = {}
    for order, got in (("before", got_before), ("after", got_after)):
        enforce(TRIAL_OUTPUT, ctx, got=got, expected=expected, pristine=pristine, label=label)
        # the same bits as before the reference (a deterministic program):
        # the same verdict, without a second pass over the outputs
        if order == "before" or not cmp.identical(got, got_before):
            res = cmp.compare(got, expected, ctx.atol, ctx.rtol)
        stats["max_abs_err"] = max(stats["max_abs_err"], res["max_abs_err"])
        stats["max_rel_err"] = max(stats["max_rel_err"], res["max_rel_err"])
        if not res["ok"]:
            _mismatch(ctx, res, got, expected, set_name, trial, order, label)
    enforce(
        TRIAL_DONE,
        ctx,
        got=got_after,
        expected=expected,
        set_name=set_name,
        step=step,
        input_seed_index=input_seed_index,
    )
    return c_args, gen


def _reference(ctx: Context, pristine: list[Any], label: str, first: bool) -> list[Any]:
    """The reference's outputs on a copy of ``pristine``; on the first trial
    the census learns the reference's own kernels, and a degenerate task is
    found out (its probe sets join the trials)."""
    if first:
        ctx.chan.stage(f"{label}: the reference's first call")
    try:
        with ctx.census.reference() if first else contextlib.nullcontext():
            expected = ctx.cmp.snapshot(ctx.cmp.flatten_outputs(ctx.model(*ctx.clone(pristine))))
        ctx.backend.synchronize()
    except BaseException as exc:
        raise ctx.harness(f"Model.forward on {label}", exc)
    if first:
        # the pool's trusted referee decided this once for the task;
        # elsewhere (fresh mode, no referee answer) the worker does
        known = ctx.job.get("degenerate")
        trivial = (
            list(known) if isinstance(known, list) else trivial_outputs(ctx.cmp, expected, pristine, ctx.atol, ctx.rtol)
        )
        if trivial:
            _degenerate(ctx, trivial, known, pristine, expected)
        ctx.chan.stage(label)  # the reference's first call is over
    return expected


def _degenerate(ctx: Context, trivial: list[str], known: Any, pristine: list[Any], expected: list[Any]) -> None:
    """A task whose tolerance passes a trivial output: the probe input sets
    that tell the trivial forms from the right answer join the trials."""
    probes = ctx.job.get("probes")
    if not isinstance(known, list) or not isinstance(probes, dict) or "kept" not in probes:
        probes = assess_probes(ctx.model, trivial, pristine, expected, ctx.atol, ctx.rtol, ctx.backend.synchronize)
    ctx.out.setdefault("warnings", []).append(describe_probes(trivial, probes))
    ctx.out["census"]["degenerate"] = sorted(trivial)
    ctx.out["census"]["probes"] = probes
    ctx.kept_forms = list(probes.get("kept", trivial))
    sets = [str(n) for n in probes.get("sets", []) if is_probe(str(n))]
    ctx.trial_sets += [(n, 0) for n in sets]
    ctx.last_of_set.update({n: len(ctx.trial_sets) - len(sets) + i for i, n in enumerate(sets)})
    ctx.stats["input_sets"] += sets


def _mismatch(
    ctx: Context,
    res: dict[str, Any],
    got: list[Any],
    expected: list[Any],
    set_name: str,
    trial: int,
    order: str,
    label: str,
) -> None:
    """A trial's output is wrong: a replay of an earlier output is a hack,
    anything else an incorrect program, told what failed where."""
    enforce(TRIAL_MISMATCH, ctx, got=got, expected=expected, set_name=set_name, label=label)
    if res["first_mismatch"]:
        res["first_mismatch"].update(input_set=set_name, trial=trial, order=f"candidate run {order} the reference")
        ctx.stats["first_mismatch"] = res["first_mismatch"]
    hint = ""
    if is_probe(set_name):
        forms = ", ".join(ctx.out["census"].get("probes", {}).get("decided", [])) or "a trivial output"
        hint = (
            f"\nThe program passed the task's own inputs but fails on the probe inputs {set_name} "
            f"({PROBES[set_name[len(PROBE_PREFIX) :]]}). On its own inputs this task cannot tell "
            f"{forms} from the right answer, so it is judged here too: compute the operation for "
            "every input value, not only for the values get_inputs() happens to draw."
        )
    elif set_name != "get_inputs":
        hint = (
            f"\nThe program passed the default inputs but fails on {set_name}() (other shapes): do not hard-code sizes."
        )
    raise Verdict(
        category="incorrect",
        compiled=True,
        error=f"{label}, candidate run {order} the reference: {res['message']}{hint}",
    )


def _after_trials(ctx: Context, last: list[Any], started: float) -> None:
    """The refill checks on the last trial's buffers (``last``: them and
    their generator, emptied here), an integrity checkpoint, the phases'
    times, the referee's evidence handed over."""
    held, gen = last
    last.clear()
    t0 = time.monotonic()
    enforce(AFTER_TRIALS, ctx, gen=gen, held=held)
    ctx.spent += time.monotonic() - t0
    del held  # only the last call's inputs were needed; the timing makes its own
    checkpoint(ctx)
    phases = ctx.phases
    phases["census"] = round(ctx.spent + ctx.census.overhead_s, 4)
    phases["correctness"] = round(
        max(0.0, time.monotonic() - started - phases.get("compile", 0.0) - phases["census"]), 4
    )
    enforce(HAND_OVER, ctx)


def checkpoint(ctx: Context) -> None:
    """An integrity checkpoint (the snapshot, the checks' values, threads);
    its time counts to the checks' own (the "census" phase)."""
    t0 = time.monotonic()
    try:
        enforce(CHECKPOINT, ctx)
    finally:
        ctx.spent += time.monotonic() - t0


__all__ = ["checkpoint", "run_checked", "run_trials"]

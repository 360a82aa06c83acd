"""The worker's timing: the candidate against the reference, each timing
shape in a timing slot of its own (:func:`time_shapes`, shared by a step's
timing and the finalists' re-timing), and the checks on what was timed.

The timing itself (pairs, statistics, hidden work, the roofline) is
:mod:`kernelsmith.evaluator.timing`; the parent judges each attempt
(contention, a moving reference: contention.py) over the protocol's
``timing-done`` message and asks for another while it must.
"""

from __future__ import annotations

import os
import resource
import time
from typing import Any, Callable, Optional

from .affinity import PinnedTiming
from .checks import Context, enforce
from .checks.base import AFTER_TIMING, SHAPE_TIMED, TIMED_OUTPUT, TIMING_RESULT
from .checks.timed_inputs import own_copies
from .timed_rotation import TimedRotation, recorded, timed_with_moves
from ..hardware import HardwareInfo
from .timing import combine_shapes, CandidateTimingError
from . import timing
from .. import timing as kt
from .checks.timed_inputs import inputs_after_timing
from .task_inputs import draw_inputs
from .worker_audit import audit_finalist


def cpu_seconds() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def timed_on_gpu(backend: Any, out: dict[str, Any]) -> bool:
    return backend.timing_device() == "cuda" or HardwareInfo.from_dict(out.get("hardware")).kind == "gpu"


def pinned_on_host(backend: Any, out: dict[str, Any], timing_cfg: Any, torch: Any) -> PinnedTiming:
    """The timing slot's pin (affinity.py): on the host clock only, and
    unless the task turns it off (``timing.cpu_pin``)."""
    return PinnedTiming(torch.get_num_threads(), enabled=timing_cfg.cpu_pin and not timed_on_gpu(backend, out))


def timed_until_judged(chan: Any, take: Callable[[], Any], torch: Any, **report: Any) -> Any:
    """A timing in the slot this worker holds (``take()`` measures once),
    reported to the parent and taken again for as long as the parent's
    verdict asks for it (contention, a drifting or moving reference:
    contention.py); the last outcome. The report says what this process
    itself used, which the parent subtracts from the host's busy time to see
    the load of everything else; ``report`` adds or replaces fields."""
    attempt = 1
    while True:
        cpu0, wall0 = cpu_seconds(), time.monotonic()
        o = take()
        sent = {
            "speedup": o.speedup,
            "ref_ms": o.ref_runtime_ms,
            "cand_ms": o.runtime_ms,
            "ci_low": o.speedup_ci_low,
            "ci_high": o.speedup_ci_high,
            "cpu_s": cpu_seconds() - cpu0,
            "wall_s": time.monotonic() - wall0,
            "threads": torch.get_num_threads(),
            **report,
        }
        if not chan.timing_done(sent):
            return o
        attempt += 1
        # said, so that a command waiting on a long re-timing shows why
        chan.stage(
            f"timing {report.get('comparison') or 'the program'} again (attempt {attempt}: the parent saw "
            "contention or a moving reference)"
        )


def placed_copies(
    torch: Any, input_sets: list[list[Any]], extra: int, clone: Callable[[list], list], memory_share: float = 0.1
) -> list[list[Any]]:
    """Up to ``extra`` more input sets for a GPU timing: copies of the fresh
    ones (device copies, no new ``get_inputs`` call), each in memory of its
    own, so that no one placement of the inputs weighs much. Measured on the
    H200 before ``gpu_min_pairs`` (the fix for slow spells of the GPU): a
    0.12 ms GEMM spread 0.77-2.19% over ten fresh evaluations (four runs)
    with 8 placements against 1.04-3.86% (three runs) with 3; the final
    figures (0.31-0.63%) were taken with both, its share in them alone is
    not measured. Bounded to ``memory_share`` of the free device memory,
    the reference's own copy of each (own_copies) included."""
    if extra <= 0 or not input_sets:
        return []
    size = 2 * sum(v.numel() * v.element_size() for v in input_sets[0] if isinstance(v, torch.Tensor) and v.is_cuda)
    if size <= 0:
        return []
    try:
        free, _total = torch.cuda.mem_get_info()
    except Exception:  # noqa: BLE001 - no answer: no extra copies
        return []
    extra = min(extra, int(memory_share * free // size))
    return [clone(input_sets[k % len(input_sets)]) for k in range(max(0, extra))]


def time_shapes(
    chan: Any,
    backend: Any,
    out: dict[str, Any],
    timing_cfg: Any,
    names: list[str],
    cmp: Any,
    clone: Callable[[list], list],
    draw: Callable[[int, str], list],
    measure_once: Callable[[list, list], Any],
    after: Callable[..., None],
    phases: Optional[dict[str, float]] = None,
    prepare: Optional[Callable[[list], None]] = None,
    **report: Any,
) -> list[Any]:
    """Each timing shape (``names``: TaskConfig.timed_shapes) timed in a
    timing slot of its own, pinned as the slot's pin says, and taken again
    while the parent's verdict asks (:func:`timed_until_judged`); the
    outcomes, in ``names``' order. Per shape: ``draw(index, name)`` makes
    the program's input sets; the reference gets copies of its own
    (own_copies: nothing the program does to its inputs reaches it);
    ``measure_once(input_sets, ref_sets)`` times once; ``after(name,
    outcome, input_sets, ref_sets, given, prints, pin)`` checks what was
    timed. ``phases``, where given, adds up the waits for the slot
    (``timing_wait``) and, once every shape is timed, the time it was held
    (``timing``). ``report`` goes with every timing report (the shape's
    name too where there are several)."""
    import torch

    several = len(names) > 1
    outcomes = []
    held = 0.0
    measured = [0.0]  # of which the measures themselves (the rest: the reports' round trips, the parent's verdicts)
    for index, name in enumerate(names):
        input_sets = draw(index, name)
        ref_sets, given, prints = own_copies(torch, input_sets, clone, cmp)

        def take(input_sets: list = input_sets, ref_sets: list = ref_sets) -> Any:
            started = time.monotonic()
            try:
                return measure_once(input_sets, ref_sets)
            finally:
                measured[0] += time.monotonic() - started

        if prepare is not None:
            # what needs no slot (the reference's work estimate) done first:
            # the slot stops the device's other workers
            prepare(ref_sets)
        # One timing per device at a time: the parent grants the slot and
        # stops the device's other workers meanwhile.
        waited = round(chan.timing_slot(), 4)
        if phases is not None:
            phases["timing_wait"] = round(phases.get("timing_wait", 0.0) + waited, 4) if index else waited
        granted = time.monotonic()
        # on the host clock the timing's threads stay on their cores while it
        # holds the slot (affinity.py says why and what it measured)
        pin = pinned_on_host(backend, out, timing_cfg, torch)
        with pin:
            outcome = timed_until_judged(chan, take, torch, **report, **({"shape": name} if several else {}))
        held += time.monotonic() - granted
        outcomes.append(outcome)
        after(name, outcome, input_sets, ref_sets, given, prints, pin)
    if phases is not None:
        phases["timing"] = round(held, 4)
        phases["slot:judged"] = round(held - measured[0], 4)
        for key in [k for k in phases if k.startswith("slot:")]:  # the measures' parts, added up raw
            phases[key] = round(phases[key], 4)
    return outcomes


def time_candidate(ctx: Context) -> None:
    """Paired timing of reference and candidate (evaluator/timing.py), then
    the checks on what was timed: the timed calls' output must still be
    right, and work hidden from the timer rejects the candidate."""
    import torch

    ctx.chan.stage("timing")
    names = ctx.cfg.timed_shapes
    with torch.no_grad():
        last: dict[str, Any] = {}  # the last timed call's output and arguments
        per_call: list[tuple[str, ...]] = []  # each timed call's kernels
        kept: dict[str, Any] = {}  # the first shape's input sets and generator: the refill's and the timer's
        spares: dict[str, Any] = {}  # the shape being timed: its spare draw, if it has one (_draw)
        measure_once, estimate_work = _measure(ctx, last, per_call, spares)
        outcomes = time_shapes(
            ctx.chan,
            ctx.backend,
            ctx.out,
            ctx.cfg.timing,
            names,
            ctx.cmp,
            ctx.clone,
            _draw(ctx, kept, spares),
            measure_once,
            _after_shape(ctx, per_call),
            phases=ctx.out.setdefault("phases", {}),
            prepare=estimate_work,
        )
        first = outcomes[0]
        outcome = combine_shapes(outcomes, names, ctx.cfg.shape_weights)
        enforce(TIMED_OUTPUT, ctx, last=last)
        # the refill checks need the first set only (memory.Footprint counts
        # four input copies at once)
        last.clear()
        input_sets, gen = kept.pop("sets"), kept.pop("gen")
        del input_sets[1:]
        enforce(AFTER_TIMING, ctx, gen=gen, held=input_sets[0], first_outcome=first)
    ctx.out.update(outcome.result_fields())
    # rejected: the times stay in `timing` for diagnosis; the speedup must not be used
    enforce(TIMING_RESULT, ctx, outcome=outcome)


def _draw(ctx: Context, kept: dict[str, Any], spares: dict[str, Any]) -> Callable[[int, str], list]:
    """A shape's timed input sets: fresh ones (new seeds from the parent)
    that the timed calls rotate over, so no side enjoys the same inputs in
    cache every call, and on a GPU copies of them placed elsewhere. A
    single set gets a spare draw (``spares["spare"]``, with the reference's
    copy): never timed, the other set the timed one takes new values from
    between samples (spare_draw)."""
    import torch

    names, timing_cfg = ctx.cfg.timed_shapes, ctx.cfg.timing
    on_gpu = timed_on_gpu(ctx.backend, ctx.out)

    def draw(index: int, name: str) -> list:
        gen = getattr(ctx.ref, name)
        if len(names) > 1:
            ctx.chan.stage(f"timing shape {name} ({index + 1} of {len(names)})")
        input_sets = [ctx.make_inputs(gen) for _ in range(timing_cfg.input_sets)]
        if on_gpu:
            input_sets += placed_copies(torch, input_sets, timing_cfg.gpu_input_sets - len(input_sets), ctx.clone)
        spares["spare"] = spare_draw(input_sets, lambda: ctx.make_inputs(gen), ctx.clone)
        if "sets" not in kept:
            kept.update(sets=input_sets, gen=gen)
        return input_sets

    return draw


def spare_draw(
    input_sets: list, make: Callable[[], list], clone: Callable[[list], list]
) -> Optional[tuple[list, list]]:
    """For a single timed input set, one more draw of the task's generator
    and the reference's copy of it (timed_rotation.TimedRotation's
    ``spare``: without another set no new values could come in); None for
    several sets. Two more input copies while timed: four of the worker's
    six (memory.WORKER_INPUT_COPIES)."""
    if len(input_sets) != 1:
        return None
    spare = make()
    return spare, clone(spare)


def measured_with_moves(
    ref_call: Callable[..., Any],
    cand_call: Callable[..., Any],
    backend: Any,
    cand_sets: list,
    ref_sets: list,
    timing_cfg: Any,
    last: dict[str, Any],
    reference: Callable[..., Any],
    clone: Callable[[list], list],
    cmp: Any,
    atol: float,
    rtol: float,
    spare: Optional[tuple[list, list]] = None,
    **measure_kw: Any,
) -> tuple[Any, TimedRotation]:
    """``cand_call`` timed against ``ref_call`` (timing.measure, each on its
    own input sets; ``measure_kw``: its ``device_name`` and ``work``) with
    new values in both sides' inputs before every pair and the candidate's
    output of the call after a few of the changes checked against
    ``reference`` called on clones (``clone``) of its arguments, compared as
    the task compares (``cmp``, ``atol``, ``rtol``): timed_rotation.py says
    why. A step's timing and the finalists' re-timing both time through it.
    The outcome and the hook (its ``wrong``: why the output was wrong, or
    "")."""
    return timed_with_moves(
        lambda hook: timing.measure(
            ref_call,
            cand_call,
            backend,
            cand_sets,
            timing_cfg,
            reference_input_sets=ref_sets,
            between_pairs=hook,
            **measure_kw,
        ),
        cand_sets,
        ref_sets,
        last,
        lambda args: reference(*clone(args)),
        lambda got, exp: cmp.compare(cmp.flatten_outputs(got), cmp.flatten_outputs(exp), atol, rtol),
        spare=spare,
    )


def _measure(
    ctx: Context, last: dict[str, Any], per_call: list, spares: dict[str, Any]
) -> tuple[Callable[[list, list], Any], Callable[[list], None]]:
    """One measurement of the candidate against the reference, each call's
    kernels recorded; the program's failure as the program's verdict. With
    it, what time_shapes does before the slot: the reference's work
    estimate for the shape's sets (kept by their shapes and types, which
    are all it depends on)."""
    backend, timing_cfg = ctx.backend, ctx.cfg.timing
    on_gpu = timed_on_gpu(backend, ctx.out)
    device_name = HardwareInfo.from_dict(ctx.out.get("hardware")).name if on_gpu else ""

    def counted(*args: Any) -> Any:
        with backend.launch_counter() as launched:
            result = ctx.model_new(*args)
        per_call.append(tuple(sorted(launched.kernels)))
        return result

    cand_call = recorded(counted, last)

    def ref_call(*args: Any) -> Any:
        # the same launch record around the reference: both sides of a
        # pair pay its few microseconds of host time, so counting the
        # candidate's kernels does not bias a microsecond-scale ratio
        with backend.launch_counter():
            return ctx.model(*args)

    estimates: dict[tuple, Any] = {}  # the reference's work by its arguments' shapes and types

    def estimate(ref_sets: list) -> Any:
        key = tuple((tuple(a.shape), str(a.dtype)) if hasattr(a, "shape") else repr(a) for a in ref_sets[0])
        if key not in estimates:
            estimates[key] = kt.estimate_work(ctx.model, ctx.clone(ref_sets[0]))
        return estimates[key]

    def before_slot(ref_sets: list) -> None:
        if timing_cfg.roofline:
            try:
                estimate(ref_sets)
            except Exception:  # noqa: BLE001 - measure() reports a failing estimate when it asks again
                pass

    def measure_once(input_sets: list, ref_sets: list) -> Any:
        def work() -> Any:
            return estimate(ref_sets)

        # new values in the timed inputs before every pair, the output of the
        # call after a few of the changes checked (timed_rotation.py: a
        # program that caches while timed returns an earlier call's output)
        try:
            o, rotation = measured_with_moves(
                ref_call,
                cand_call,
                backend,
                input_sets,
                ref_sets,
                timing_cfg,
                last,
                ctx.model,
                ctx.clone,
                ctx.cmp,
                ctx.atol,
                ctx.rtol,
                spare=spares.get("spare"),
                device_name=device_name,
                work=work if timing_cfg.roofline else None,
                parts=ctx.out.setdefault("phases", {}),
            )
        except CandidateTimingError as exc:
            # the timed calls' peak is the reference's too: only the failed request counts
            raise ctx.fail_from(exc.original, "ModelNew.forward raised while being timed", metered=False)
        except BaseException as exc:  # device faults surface at the harness's synchronize
            raise ctx.fail_from(exc, "timing reference and candidate failed", fault="harness")
        backend.synchronize()
        if rotation.wrong and not last.get("moved_wrong"):
            last["moved_wrong"] = rotation.wrong  # checks/timed_output.py
        return o

    return measure_once, before_slot


def _after_shape(ctx: Context, per_call: list) -> Callable[..., None]:
    """After each shape, the checks on the timed inputs and calls (every
    timed call of a shape launches the same kernels; a program may launch
    other kernels for another shape)."""

    def after(name: str, outcome: Any, input_sets: list, ref_sets: list, given: list, prints: list, pin: Any) -> None:
        outcome.details["pinned_cores"] = pin.cores  # [] where nothing was pinned
        enforce(
            SHAPE_TIMED,
            ctx,
            input_sets=input_sets,
            ref_sets=ref_sets,
            given=given,
            prints=prints,
            shape=name,
            several=len(ctx.cfg.timed_shapes) > 1,
            per_call=per_call,
        )
        per_call.clear()

    return after


def run_finalists(
    job: dict[str, Any], chan: Any, out: dict[str, Any], backend: Any, task: Any, ref: Any, init_inputs: list
) -> dict[str, Any]:
    """The honest best: the run's finalists (already judged correct, each on
    its own) loaded side by side in this one worker, checked once more on
    the same fresh inputs, then each timed against the reference in turn on
    the same input sets, and the top two against each other. Per-step
    speedups were measured against per-step references, at other moments;
    these are comparable. Every comparison holds the timing slot on its own
    and is judged by the parent as a step's timing is (contention, drift,
    re-timing: contention.py): first the reference alone, before any
    finalist is loaded, then each finalist, whose paired reference must stay
    near the reference alone (a program that slows what runs next to it
    would otherwise look fast). Then each finalist with a speedup runs a
    step's audit rounds (:func:`_audit_finalists`): its figures here are
    this process's word."""
    import torch

    # lazy: evaluator.correctness pulls in torch, numpy, which evaluator.worker_timing does not load on its own
    from . import correctness as cmp

    # lazy: cycle evaluator.worker_timing -> evaluator.worker -> evaluator.worker_timing
    from .worker import guard_channel

    cfg = task.config
    device, dtype = backend.device(), getattr(torch, cfg.dtype)
    cmp.set_comparison(getattr(cfg, "comparison", None))  # a task's accuracy contract (KernelBench-X)
    # every model here (the reference's, each finalist's) is built from this
    # seed: the referee rebuilds the reference of the audit rounds from it
    init_seed_index = chan.seeds_received
    seed = chan.seed()

    def make_inputs(gen: Any = None) -> list[Any]:
        torch.manual_seed(chan.seed())
        return draw_inputs(gen or ref.get_inputs, device, dtype)

    torch.manual_seed(seed)
    model = ref.Model(*init_inputs).to(device=device, dtype=dtype).eval()
    check = make_inputs()
    # the task's timing shapes (TaskConfig.timing_shapes), each compared on
    # its own and the figures combined as a step's are (timing.combine_shapes)
    sets_by_shape = {
        name: [make_inputs(getattr(ref, name)) for _ in range(cfg.timing.input_sets)] for name in cfg.timed_shapes
    }
    # a single set gets a spare draw to take new values from, as in a step's timing (spare_draw)
    spares = {name: make_inputs(getattr(ref, name)) for name, sets in sets_by_shape.items() if len(sets) == 1}
    timed = _finalist_timing(chan, backend, out, cfg, cmp, sets_by_shape, spares, model)
    with torch.no_grad():
        expected = cmp.snapshot(
            cmp.flatten_outputs(model(*[v.clone() if isinstance(v, torch.Tensor) else v for v in check]))
        )
        chan.stage("timing the reference alone")
        # before any finalist's code is in this process: what the reference
        # takes here and now, with nothing of theirs next to it
        alone = timed("reference", lambda *a: model(*a), lambda *a: model(*a))
        guard_channel(chan, backend)  # before the first finalist's code
        entries, models = _load_finalists(job, chan, backend, cfg, cmp, seed, init_inputs, check, expected)
        chan.stage("timing finalists")
        head = _time_finalists(timed, model, entries, models, several=len(cfg.timed_shapes) > 1)
        if os.environ.get("KS_BENCH_NO_CENSUS", "") != "1":  # the throughput benchmark's switch, as a step's
            _audit_finalists(job, chan, backend, cfg, cmp, ref, make_inputs, init_seed_index, entries, models, out)
    out.update(
        category="ok",
        compiled=True,
        correct=True,
        timing={
            "finalists": entries,
            "head_to_head": head if len(entries) > 1 else {},
            "reference_alone_ms": alone.ref_runtime_ms,
            # the clock the comparisons were timed on, as a step's timing says
            # it (the audit check's reference allowance reads it)
            "device": backend.timing_device(),
        },
    )
    return out


def _finalist_timing(
    chan: Any,
    backend: Any,
    out: dict[str, Any],
    cfg: Any,
    cmp: Any,
    sets_by_shape: dict[str, list],
    spares: dict[str, Any],
    reference: Any,
) -> Callable[..., Any]:
    """``timed(comparison, base, cand, paired_reference=True)``: one
    comparison, each timing shape in its own timing slot, pinned as a
    step's is, and timed again while the parent sees contention or a moving
    reference; the combined outcome, ``details["inputs_changed"]`` saying
    why the program's timed inputs did not come back as given, or why the
    output of ``cand`` was wrong after new values came into its inputs
    between samples (timed_rotation.timed_with_moves, as in a step's
    timing: ``reference`` gives the expected outputs)."""
    return _FinalistTimer(chan, backend, out, cfg, cmp, sets_by_shape, spares, reference).timed


class _FinalistTimer:
    """_finalist_timing's state: the caps, the copies, the tolerances."""

    def __init__(
        self,
        chan: Any,
        backend: Any,
        out: dict[str, Any],
        cfg: Any,
        cmp: Any,
        sets_by_shape: dict[str, list],
        spares: dict[str, Any],
        reference: Any,
    ) -> None:
        import dataclasses

        import torch

        self.chan, self.backend, self.out, self.cfg, self.cmp = chan, backend, out, cfg, cmp
        self.sets_by_shape, self.spares, self.reference, self.torch = sets_by_shape, spares, reference, torch
        # the run's verdict rests on these comparisons: on the host clock they
        # get their own caps, at least the per-step ones (a per-step timing stops
        # at 20 pairs / 0.5 s to keep CI quick)
        t = cfg.timing
        self.timing_cfg = dataclasses.replace(
            t,
            cpu_max_samples=max(t.cpu_max_samples, t.cpu_finalist_max_samples),
            cpu_time_budget_s=max(t.cpu_time_budget_s, t.cpu_finalist_time_budget_s),
        )
        self.atol, self.rtol = cfg.tolerances()

    def clone(self, vals: list) -> list:
        return [v.clone() if isinstance(v, self.torch.Tensor) else v for v in vals]

    def _measure_once(
        self, base: Any, cand_call: Any, last: dict, changed: list, shape: list, cand_sets: list, base_sets: list
    ) -> Any:
        clone = self.clone
        spare = self.spares.get(shape[0])
        try:
            o, rotation = measured_with_moves(
                base,
                cand_call,
                self.backend,
                cand_sets,
                base_sets,
                self.timing_cfg,
                last,
                self.reference,
                clone,
                self.cmp,
                self.atol,
                self.rtol,
                spare=(clone(spare), clone(spare)) if spare is not None else None,
            )
        except BaseException:
            self.chan.timing_done({"release_only": True})
            raise
        finally:
            last.clear()
        changed[0] = changed[0] or rotation.wrong or None
        return o

    def timed(self, comparison: str, base: Any, cand: Any, paired_reference: bool = True) -> Any:
        changed: list[Any] = [None]
        self.chan.stage(f"timing {comparison}")

        last: dict[str, Any] = {}  # cand's last timed call (timed_rotation.recorded)
        cand_call = recorded(cand, last)
        shape: list[str] = [""]  # the shape being timed (its spare draw)

        def measure_once(cand_sets: list, base_sets: list) -> Any:
            return self._measure_once(base, cand_call, last, changed, shape, cand_sets, base_sets)

        def draw(index: int, name: str) -> list:
            shape[0] = name
            return [self.clone(s) for s in self.sets_by_shape[name]]

        def after(name: str, o: Any, cand_sets: list, base_sets: list, given: list, prints: list, pin: Any) -> None:
            changed[0] = changed[0] or inputs_after_timing(self.torch, self.cmp, cand_sets, base_sets, given, prints)

        # each side on copies of its own (a finalist that re-homes its
        # inputs would slow whatever runs next on them), checked afterwards
        names = self.cfg.timed_shapes
        outcomes = time_shapes(
            self.chan,
            self.backend,
            self.out,
            self.cfg.timing,
            names,
            self.cmp,
            self.clone,
            draw,
            measure_once,
            after,
            comparison=comparison,
            **({} if paired_reference else {"ref_ms": None}),
        )
        o = combine_shapes(outcomes, names, self.cfg.shape_weights)
        o.details["inputs_changed"] = changed[0]
        return o


def _audit_finalists(
    job: dict[str, Any],
    chan: Any,
    backend: Any,
    cfg: Any,
    cmp: Any,
    ref: Any,
    make_inputs: Callable[[Any], list],
    init_seed_index: int,
    entries: list[dict[str, Any]],
    models: list[Any],
    out: dict[str, Any],
) -> None:
    """Each finalist whose re-timing gave it a speedup audited as a step's
    timing is (worker_audit.py): its figures here are this process's word as
    much as a step's, and every finalist's import-time code runs in it. The
    rounds name the finalist (``"finalist <i>"``, as its timing reports
    do), on each timed shape, the model built from the finalists' seed."""
    workdir = os.path.dirname(os.path.abspath(job["finalists"][0]))
    phases = out.setdefault("phases", {})
    for entry, m in zip(entries, models):
        if m is None or entry.get("speedup") is None:
            continue
        for name in cfg.timed_shapes:
            audit_finalist(
                chan,
                f"finalist {entry['index']}",
                m,
                cmp,
                backend,
                make_inputs,
                init_seed_index,
                workdir,
                name,
                getattr(ref, name),
                phases,
            )


def _load_finalists(
    job: dict[str, Any],
    chan: Any,
    backend: Any,
    cfg: Any,
    cmp: Any,
    seed: int,
    init_inputs: list,
    check: list,
    expected: list,
) -> tuple[list[dict[str, Any]], list[Any]]:
    """Each finalist loaded and checked on ``check`` against ``expected``:
    its entry and its model (None where it failed)."""
    import torch

    # lazy: cycle evaluator.worker_timing -> evaluator.worker -> evaluator.worker_timing
    from .worker import CANDIDATE_MODULE

    device, dtype = backend.device(), getattr(torch, cfg.dtype)
    atol, rtol = cfg.tolerances()
    entries: list[dict[str, Any]] = []
    models: list[Any] = []
    for i, path in enumerate(job["finalists"]):
        chan.stage(f"finalist {i}")
        entry: dict[str, Any] = {"index": i, "correct": False}
        try:
            module = backend.load_candidate(os.path.abspath(path), f"{CANDIDATE_MODULE}_{i}")
            torch.manual_seed(seed)
            m = module.ModelNew(*init_inputs).to(device=device, dtype=dtype)
            got = cmp.flatten_outputs(m(*[v.clone() if isinstance(v, torch.Tensor) else v for v in check]))
            backend.synchronize()
            res = cmp.compare(got, expected, atol, rtol)
            entry["correct"] = bool(res["ok"])
            if not res["ok"]:
                entry["error"] = res["message"]
        except BaseException as exc:  # noqa: BLE001 - a finalist may fail in any way
            m = None
            entry["error"] = backend.trim_traceback(exc, os.path.abspath(path))[-800:]
        entries.append(entry)
        models.append(m if entry["correct"] else None)
    return entries, models


def _time_finalists(
    timed: Callable[..., Any], model: Any, entries: list[dict[str, Any]], models: list[Any], several: bool
) -> dict[str, Any]:
    """Each correct finalist against the reference (its entry updated), then
    the top two against each other: the head to head."""
    for entry, m in zip(entries, models):
        if m is None:
            continue
        try:
            o = timed(f"finalist {entry['index']}", lambda *a: model(*a), m)
        except CandidateTimingError as exc:
            entry.update(correct=False, error=f"raised while timed: {exc}")
            continue
        if o.details.get("inputs_changed"):
            entry.update(correct=False, hacked=True, error=o.details["inputs_changed"])
            continue
        entry.update(
            speedup=o.speedup,
            speedup_ci_low=o.speedup_ci_low,
            speedup_ci_high=o.speedup_ci_high,
            runtime_ms=o.runtime_ms,
            ref_runtime_ms=o.ref_runtime_ms,
            verdict=o.verdict,
            suspicious=o.suspicious,
            **({"shapes": o.details["shapes"]} if several else {}),
        )
    ranked = sorted(
        (e for e in entries if e.get("speedup") is not None and not e.get("suspicious")), key=lambda e: -e["speedup"]
    )
    head: dict[str, Any] = {}
    if len(ranked) >= 2:
        a, b = ranked[0], ranked[1]
        o = timed("head to head", models[b["index"]], models[a["index"]], paired_reference=False)
        head = {
            "first": a["index"],
            "second": b["index"],
            "ratio": o.speedup,
            "ci": [o.speedup_ci_low, o.speedup_ci_high],
            "verdict": o.verdict,
        }
        if o.details.get("inputs_changed"):  # seen already when each was timed alone
            head = {"first": a["index"], "second": b["index"], "error": o.details["inputs_changed"]}
    return head


__all__ = [
    "run_finalists",
    "placed_copies",
    "pinned_on_host",
    "time_candidate",
    "time_shapes",
    "timed_on_gpu",
    "timed_until_judged",
]

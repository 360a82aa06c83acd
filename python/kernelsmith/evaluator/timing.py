"""The one timing seam of the evaluator: reference vs. candidate through
:mod:`kernelsmith.timing`.

Inside the worker, after the correctness trials, :func:`measure` runs the
paired comparator: reference and candidate alternate (A B, B A, ...) over
several input sets, and the result is a speedup with a confidence interval
and a verdict (faster / slower / indistinguishable / rejected). Where the
calls are timed is the backend's choice:

* ``backend.sample_source(fn)`` gives an external timer (OpenCL event
  profiling on GPUs) -> ``timing.compare_samples``;
* otherwise ``backend.timing_device()``: ``"cuda"`` -> ``timing.compare`` with
  CUDA events, CUDA graphs (eager fallback recorded), L2 flush, launches per
  sample, hidden-work checks, GPU clocks and temperature; ``"cpu"`` -> the
  host clock with ``backend.synchronize()`` around every sample, under small
  caps (``cpu_max_samples``, ``cpu_time_budget_s``) so CPU CI stays quick.

On top, the roofline check: a candidate median below the hardware floor (bytes
and FLOPs estimated from the reference) marks the result suspicious; and from
the same estimate the speed of light (timing/sol.py): the achieved
bandwidth and FLOP rate against the device's peaks (the host CPU's where the
timing ran on the host), carried in ``EvalResult.speed_of_light``.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from .. import timing as kt
from ..task import TimingConfig
from ..timing.results import verdict_of
from ..timing.roofline import lookup_peak
from ..timing import sol
from .audit import Parts


class CandidateTimingError(Exception):
    """The candidate raised while being timed; ``original`` is its exception."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(f"{type(original).__name__}: {original}")
        self.original = original


@dataclass
class TimingOutcome:
    """What the evaluator keeps of one comparison (all times in ms)."""

    runtime_ms: float
    ref_runtime_ms: float
    speedup: float
    speedup_ci_low: float
    speedup_ci_high: float
    verdict: str  # kernelsmith.timing.VERDICTS
    rejected_reason: str = ""
    suspicious: bool = False
    suspicious_reasons: list = field(default_factory=list)
    # EvalResult.timing: per-side stats, how it was measured, checks
    details: dict = field(default_factory=dict)
    # EvalResult.speed_of_light (kernelsmith.timing.sol.SpeedOfLight)
    speed_of_light: dict = field(default_factory=dict)

    @property
    def rejected(self) -> bool:
        return self.verdict == "rejected"

    def result_fields(self) -> dict[str, Any]:
        """The EvalResult fields this outcome sets."""
        return {
            "runtime_ms": self.runtime_ms,
            "ref_runtime_ms": self.ref_runtime_ms,
            "speedup": self.speedup,
            "speedup_ci_low": self.speedup_ci_low,
            "speedup_ci_high": self.speedup_ci_high,
            "timing_verdict": self.verdict,
            "suspicious": self.suspicious,
            "suspicious_reasons": list(self.suspicious_reasons),
            "timing": self.details,
            "speed_of_light": self.speed_of_light,
        }


def harness_options(cfg: TimingConfig, host_clock: bool) -> dict[str, Any]:
    """kernelsmith.timing options from a task's timing config. On the host
    clock the CPU caps apply: the interpreter and PoCL are for CI, where the
    whole timing of a candidate must stay around a second."""
    opts: dict[str, Any] = dict(
        target_rel_half_width=float(cfg.target_rel_half_width),
        confidence=float(cfg.confidence),
        min_samples=int(cfg.repeats),
        max_samples=int(cfg.max_samples),
        time_budget_s=float(cfg.time_budget_s),
        warmup_s=float(cfg.warmup_s),
        target_sample_s=float(cfg.target_sample_s),
        max_launches_per_sample=int(cfg.max_launches_per_sample),
        l2_flush=bool(cfg.l2_flush),
        cuda_graph=bool(cfg.cuda_graph),
        check_hidden_work=bool(cfg.check_hidden_work),
        keep_samples=False,  # results go into every trajectory record: no per-sample lists
        # the clocks through the NVML handle the worker took before the program
        # (worker.guard_channel), never an nvidia-smi started inside the slot
        gpu_state_start_process=False,
    )
    if host_clock:
        opts["ci_floor"] = float(cfg.cpu_ci_floor)
        # the reported interval is at least +-floor wide: once the pairs'
        # own CI is a third of that, more pairs cannot narrow what is
        # reported, only move the point within it (by less than the third)
        if cfg.cpu_ci_floor > 0:
            opts["target_rel_half_width"] = max(opts["target_rel_half_width"], float(cfg.cpu_ci_floor) / 3.0)
        opts["max_samples"] = min(opts["max_samples"], int(cfg.cpu_max_samples))
        opts["min_samples"] = min(opts["min_samples"], opts["max_samples"])
        opts["time_budget_s"] = min(opts["time_budget_s"], float(cfg.cpu_time_budget_s))
    else:  # device timers: a GPU's floor of pairs (TimingConfig.gpu_min_pairs)
        opts["min_samples"] = min(max(opts["min_samples"], int(cfg.gpu_min_pairs)), opts["max_samples"])
    return opts


def _side_ms(stats: dict[str, Any]) -> dict[str, Any]:
    if not stats:
        return {}
    ms = lambda key: stats[key] * 1e3  # noqa: E731
    return {
        "median": ms("median_s"),
        "ci_low": ms("ci_low_s"),
        "ci_high": ms("ci_high_s"),
        "mean": ms("mean_s"),
        "std": ms("stddev_s"),
        "cv": stats["cv"],
        "mad": ms("mad_s"),
        "min": ms("min_s"),
        "max": ms("max_s"),
        "n": stats["n_samples"],
        "n_outliers": stats["n_outliers"],
    }


def outcome_from_comparison(
    c: kt.Comparison,
    *,
    options: dict[str, Any],
    roofline: Optional[dict[str, Any]] = None,
    gpu_state: Optional[dict[str, Any]] = None,
) -> TimingOutcome:
    """Turn a Comparison into the evaluator's fields (pure: tested with
    constructed comparisons, e.g. a 'rejected' one)."""
    reasons = list(c.suspicious_reasons)
    suspicious = bool(c.suspicious)
    floor = float(options.get("ci_floor") or 0.0)
    low, high, verdict = c.speedup_low, c.speedup_high, c.verdict
    if floor > 0 and c.speedup > 0 and verdict != "rejected":
        low, high = min(low, c.speedup * (1 - floor)), max(high, c.speedup * (1 + floor))
        if low <= 1.0 <= high:
            verdict = "indistinguishable"
    if roofline and roofline.get("suspicious"):
        suspicious = True
        reasons.append("roofline: " + roofline["reason"])
    details: dict[str, Any] = {
        "method": f"paired ({c.method})",
        "timer": c.timer,
        "device": c.device,
        "speedup": c.speedup,
        "speedup_ci": [low, high],
        "pairs_ci": [c.speedup_low, c.speedup_high],  # from the pairs alone, before the floor
        "confidence": options.get("confidence", 0.95),
        "verdict": verdict,
        "stop_reason": c.stop_reason,
        "n_pairs": c.n_pairs,
        "n_outlier_pairs": c.n_outlier_pairs,
        "elapsed_s": c.elapsed_s,
        "launches_per_sample": c.launches_per_sample,
        "input_sets": c.input_sets,
        "l2_flush": c.l2_flush,
        "cuda_graph": {"reference": c.reference_cuda_graph, "candidate": c.candidate_cuda_graph},
        "graph_fallback_reasons": dict(c.graph_fallback_reasons),
        "candidate": _side_ms(c.candidate_stats),
        "reference": _side_ms(c.reference_stats),
        "hidden_work": {k: v.to_dict() for k, v in c.hidden_work.items()},
        "roofline": roofline or {},
        "gpu_state": gpu_state if gpu_state is not None else dict(c.gpu_state),
        "options": {k: v for k, v in options.items() if k != "keep_samples"},
    }
    if c.rejected_reason:
        details["rejected_reason"] = c.rejected_reason
    return TimingOutcome(
        runtime_ms=c.candidate_median_s * 1e3,
        ref_runtime_ms=c.reference_median_s * 1e3,
        speedup=c.speedup,
        speedup_ci_low=low,
        speedup_ci_high=high,
        verdict=verdict,
        rejected_reason=c.rejected_reason,
        suspicious=suspicious,
        suspicious_reasons=reasons,
        details=details,
    )


def roofline_details(measured_s: float, device_name: str, work: Callable[[], kt.WorkEstimate]) -> dict[str, Any]:
    """Roofline check of the candidate's median against the device's peaks.
    ``work`` (run only when the device has peak figures) estimates bytes and
    FLOPs from the reference."""
    peak = kt.lookup_peak(device_name) if device_name else None
    if peak is None:
        return {"applied": False, "reason": f"no peak figures for device '{device_name}'"}
    w = work()
    check = kt.roofline_check(
        measured_s, bytes_moved=float(w.bytes_moved), flops=float(w.flops), peak=peak, dtype=w.dtype
    )
    return {
        "applied": True,
        **check.to_dict(),
        "bytes_moved": w.bytes_moved,
        "flops": w.flops,
        "dtype": w.dtype,
        "flop_counter": w.flop_counter,
    }


def speed_of_light_details(
    candidate_s: float, reference_s: float, device_name: str, work: Optional[Callable[[], kt.WorkEstimate]]
) -> dict[str, Any]:
    """SpeedOfLight of the candidate's median as a dict: against the GPU
    named ``device_name``, or the host CPU's peaks where it is "" (PoCL, the
    interpreter). ``work`` is called at most once; a failing estimate is
    reported, never guessed around."""
    if device_name:
        peak, name = lookup_peak(device_name), device_name
    else:
        name = sol.host_cpu_name()
        peak = sol.lookup_host_peak(name)
    estimate = None
    if work is not None and peak is not None:
        try:
            estimate = work()
        except Exception as exc:  # noqa: BLE001 - the reference under the FLOP counter
            return {
                "counted": False,
                "device": peak.name,
                "reason": f"cannot be counted: the work estimate failed ({type(exc).__name__}: {exc})",
            }
    return sol.speed_of_light(candidate_s, estimate, peak, reference_s=reference_s, device=name).to_dict()


def _once(fn: Optional[Callable[[], Any]]) -> Optional[Callable[[], Any]]:
    """``fn`` called at most once (the roofline check and the speed of light
    share one estimate: it runs the reference)."""
    if fn is None:
        return None
    memo: list[Any] = []

    def call() -> Any:
        if not memo:
            memo.append(fn())
        return memo[0]

    return call


def rotating(fn: Callable[..., Any], input_sets: Sequence[Sequence[Any]]) -> Callable[[], Any]:
    """``fn`` as a zero-argument call on each of ``input_sets`` in turn."""
    counter = itertools.count()
    n = len(input_sets)
    return lambda: fn(*input_sets[next(counter) % n])


def _no_raw_clock() -> int:
    return -1


def _raw_clock() -> Callable[[], int]:
    """kernelsmith._core.raw_monotonic_ns where it reads the clock (Linux
    x86_64), else a stand-in that turns the clock check off."""
    try:
        from .. import _core  # lazy: a build without the raw clock turns the check off, below

        if _core.raw_monotonic_ns() > 0:
            return _core.raw_monotonic_ns
    except (ImportError, AttributeError):
        pass
    return _no_raw_clock


class _TimedCalls:
    """The candidate as the timing calls it: an exception it raises comes out
    as :class:`CandidateTimingError`. While ``on`` (the CPU path) each call
    is also bracketed by the same clock read two ways: time.perf_counter_ns
    (what the host timing reads, through libpython's GOT slot of
    clock_gettime) and the raw system call (kernelsmith._core.raw_monotonic_ns:
    no GOT, no vDSO). Honest, the first interval lies inside the second; a
    clock the program slowed inside forward shows less (checks/timer.py,
    ``clock_mismatch``). Two clock reads of each kind a call, about 1 us."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.raw = _raw_clock()
        self.on = False
        self.calls = self.timer_ns = self.raw_ns = 0

    def _call(self, args: tuple) -> Any:
        try:
            return self.fn(*args)
        except BaseException as exc:  # noqa: BLE001 - the candidate may raise anything
            raise CandidateTimingError(exc) from exc

    def __call__(self, *args: Any) -> Any:
        if not self.on:  # as cheap as the plain wrapper was: the GPU paths time through here
            try:
                return self.fn(*args)
            except BaseException as exc:  # noqa: BLE001 - the candidate may raise anything
                raise CandidateTimingError(exc) from exc
        r0 = self.raw()
        t0 = time.perf_counter_ns()
        try:
            return self._call(args)
        finally:
            t1 = time.perf_counter_ns()
            r1 = self.raw()
            self.calls += 1
            self.timer_ns += t1 - t0
            self.raw_ns += r1 - r0

    def report(self) -> dict[str, Any]:
        return {"calls": self.calls, "timer_ms": self.timer_ns / 1e6, "raw_ms": self.raw_ns / 1e6}


def measure(
    ref_fn: Callable[..., Any],
    cand_fn: Callable[..., Any],
    backend: Any,
    input_sets: Sequence[Sequence[Any]],
    cfg: TimingConfig,
    *,
    device_name: str = "",
    work: Optional[Callable[[], kt.WorkEstimate]] = None,
    reference_input_sets: Optional[Sequence[Sequence[Any]]] = None,
    between_pairs: Optional[Callable[[int], None]] = None,
    parts: Optional[dict[str, float]] = None,
) -> TimingOutcome:
    """Compare ``ref_fn(*args)`` and ``cand_fn(*args)`` (one forward call
    each) rotating over ``input_sets``; with ``reference_input_sets`` (the
    same values, other tensors) the reference rotates over those instead,
    so nothing the candidate does to its own arguments reaches it.
    ``between_pairs(i)`` runs before each pair, outside the timed windows
    (timed_rotation.TimedRotation; not run during the warm-up calls).

    device_name: the GPU's name for the roofline check ("" = not a GPU, no
    check). work: estimates the reference's bytes and FLOPs (called only when
    the device has peak figures). A candidate exception comes out as
    :class:`CandidateTimingError`; a 'rejected' verdict (hidden work) is in
    the outcome, for the caller to reject. ``parts``, where given, adds up
    where the measure's time went (a record, audit.Parts: ``slot:warmup``,
    the warm-up calls; ``slot:sources``, the samplers' set-up, a CUDA
    graph's capture; ``slot:pairs``, the sampling with the hook between
    pairs; ``slot:work``, the figures from the reference's work estimate).
    The hook is not timed apart: on a GPU its checks synchronise the
    device, so its time was mostly the wait for samples already queued.
    """
    if not input_sets:
        raise ValueError("measure: at least one input set is needed")
    # each mark synchronises the device, at points where the device is idle
    # or about to be: none falls inside the sampling
    mark = Parts(backend, parts) if parts is not None else lambda name: None
    ref_sets = input_sets if reference_input_sets is None else reference_input_sets
    if len(ref_sets) != len(input_sets):
        raise ValueError("measure: the reference needs as many input sets as the candidate")

    cand = _TimedCalls(cand_fn)

    # First calls compile (Triton, OpenCL builds) and autotune: not timed.
    for _ in range(cfg.warmup):
        ref_fn(*ref_sets[0])
        cand(*input_sets[0])
    backend.synchronize()
    mark("slot:warmup")

    ref_source = backend.sample_source(rotating(ref_fn, ref_sets))
    cand_source = backend.sample_source(rotating(cand, input_sets)) if ref_source is not None else None
    mark("slot:sources")
    gpu_state = None
    if ref_source is not None and cand_source is not None:
        opts = harness_options(cfg, host_clock=False)
        start = bool(opts["gpu_state_start_process"])
        before = kt.gpu_state(start_process=start) if device_name else {}
        c = kt.compare_samples(ref_source, cand_source, unit="s", between_pairs=between_pairs, **opts)
        c.input_sets = len(input_sets)
        gpu_state = {"before": before, "after": kt.gpu_state(start_process=start)} if device_name else {}
    elif backend.timing_device() == "cuda":
        opts = harness_options(cfg, host_clock=False)
        c = kt.compare(
            ref_fn,
            cand,
            input_sets=[list(s) for s in input_sets],
            device="cuda",
            reference_input_sets=[list(s) for s in ref_sets],
            between_pairs=between_pairs,
            **opts,
        )
    else:
        opts = harness_options(cfg, host_clock=True)
        c = _compare_on_host(ref_fn, cand, backend, input_sets, ref_sets, opts, between_pairs)
    mark("slot:pairs")
    outcome = _outcome(c, opts, gpu_state, cand, device_name, work)
    mark("slot:work")
    return outcome


def _outcome(
    c: Any,
    opts: dict[str, Any],
    gpu_state: Any,
    cand: "_TimedCalls",
    device_name: str,
    work: Optional[Callable[[], kt.WorkEstimate]],
) -> TimingOutcome:
    """A comparison's outcome: the roofline check and the speed of light
    from one work estimate, the clock check's record."""
    roofline = None
    work = _once(work)
    if device_name and work is not None and c.candidate_median_s > 0:
        roofline = roofline_details(c.candidate_median_s, device_name, work)
    outcome = outcome_from_comparison(c, options=opts, roofline=roofline, gpu_state=gpu_state)
    if cand.calls:
        outcome.details["clock_check"] = cand.report()
    if work is not None and c.candidate_median_s > 0 and c.verdict != "rejected":
        outcome.speed_of_light = speed_of_light_details(c.candidate_median_s, c.reference_median_s, device_name, work)
    return outcome


def _compare_on_host(
    ref_fn: Callable[..., Any],
    cand: _TimedCalls,
    backend: Any,
    input_sets: Sequence[Sequence[Any]],
    ref_sets: Sequence[Sequence[Any]],
    opts: dict[str, Any],
    between_pairs: Optional[Callable[[int], None]],
) -> Any:
    """measure's host-clock comparison (CPU backends), with the clock check on
    (``cand`` reads the raw clock beside the timing's around every call)."""
    if between_pairs is not None:
        # no more calls in a sample than sets: each call of a sample gets a
        # set of its own, every one new since the pair before (the hook's
        # splices), so no timed call repeats an earlier call's values (a
        # cache keyed on all of them would hit on the repeats:
        # timed_rotation.py)
        opts["max_launches_per_sample"] = max(1, min(opts["max_launches_per_sample"], len(input_sets)))
    cand.on = cand.raw is not _no_raw_clock
    try:
        return kt.compare(
            ref_fn,
            cand,
            input_sets=[list(s) for s in input_sets],
            device="cpu",
            reference_input_sets=[list(s) for s in ref_sets],
            sync=backend.synchronize,
            between_pairs=between_pairs,
            **{k: v for k, v in opts.items() if k != "ci_floor"},
        )
    finally:
        cand.on = False


def combine_shapes(
    outcomes: Sequence[TimingOutcome], names: Sequence[str], weights: Optional[Sequence[float]] = None
) -> TimingOutcome:
    """One outcome from the timings of a task's several timing shapes
    (``TaskConfig.timing_shapes``): the speedup, its CI ends and both
    runtimes are the weighted geometric means of the shapes' (so the
    runtime ratio of two programs is the mean of their per-shape ratios);
    the verdict follows the combined CI (faster above 1, slower below,
    else indistinguishable); a rejected shape rejects, a suspicious one
    makes it suspicious. ``details`` are the first shape's with every
    shape's figures under ``shapes``; the speed of light is the first
    shape's. One outcome is returned as it is."""
    import math

    if len(outcomes) == 1:
        return outcomes[0]
    if not outcomes or len(outcomes) != len(names):
        raise ValueError("combine_shapes: one outcome per shape name")
    w = [float(x) for x in (weights or [1.0] * len(outcomes))]
    if len(w) != len(outcomes) or any(x <= 0 for x in w):
        raise ValueError("combine_shapes: one positive weight per shape")
    total = sum(w)

    def mean(values: Sequence[float]) -> float:
        return math.exp(sum(wi * math.log(v) for wi, v in zip(w, values)) / total)

    rows = [
        {
            "shape": name,
            "weight": wi,
            "speedup": o.speedup,
            "speedup_ci": [o.speedup_ci_low, o.speedup_ci_high],
            "runtime_ms": o.runtime_ms,
            "ref_runtime_ms": o.ref_runtime_ms,
            "verdict": o.verdict,
            "n_pairs": o.details.get("n_pairs"),
            "launches_per_sample": o.details.get("launches_per_sample"),
            "reference": {"min": (o.details.get("reference") or {}).get("min")},
            "candidate": {"min": (o.details.get("candidate") or {}).get("min")},
        }
        for name, wi, o in zip(names, w, outcomes)
    ]
    details = dict(outcomes[0].details)
    details.update(shapes=rows, combined="weighted geometric mean over the timing shapes")
    rejected = next((o for o in outcomes if o.rejected), None)
    suspicious_reasons = [f"shape {n}: {r}" for n, o in zip(names, outcomes) for r in o.suspicious_reasons]
    positive = all(
        o.speedup > 0 and o.speedup_ci_low > 0 and o.speedup_ci_high > 0 and o.runtime_ms > 0 and o.ref_runtime_ms > 0
        for o in outcomes
    )
    if rejected is not None or not positive:
        base = rejected or outcomes[0]
        return TimingOutcome(
            base.runtime_ms,
            base.ref_runtime_ms,
            base.speedup,
            base.speedup_ci_low,
            base.speedup_ci_high,
            base.verdict,
            base.rejected_reason,
            any(o.suspicious for o in outcomes),
            suspicious_reasons,
            details,
            base.speed_of_light,
        )
    low, high = mean([o.speedup_ci_low for o in outcomes]), mean([o.speedup_ci_high for o in outcomes])
    verdict = verdict_of(low, high)
    return TimingOutcome(
        mean([o.runtime_ms for o in outcomes]),
        mean([o.ref_runtime_ms for o in outcomes]),
        mean([o.speedup for o in outcomes]),
        low,
        high,
        verdict,
        "",
        any(o.suspicious for o in outcomes),
        suspicious_reasons,
        details,
        outcomes[0].speed_of_light,
    )


__all__ = [
    "CandidateTimingError",
    "TimingOutcome",
    "combine_shapes",
    "harness_options",
    "measure",
    "outcome_from_comparison",
    "roofline_details",
    "rotating",
    "speed_of_light_details",
]

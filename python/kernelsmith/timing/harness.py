"""bench() and compare(): the Python front end of the timing harness.

The C++ core (kernelsmith._core.timing) decides how many samples to take and
does the statistics; this module measures. It never hands a Python callable
to C++: it asks the sampler for a batch size, measures the batch, and adds it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Callable, Mapping, Optional, Sequence

from .._core import timing as _ct
from .hidden_work import (
    DEFAULT_ABS_TOL_S,
    DEFAULT_REL_TOL,
    check_hidden_work,
    graph_consistency_verdict,
)
from .results import Comparison, HiddenWorkCheck, Measurement
from .roofline import HardwarePeak, lookup_peak, roofline_check
from .runners import CpuRunner, ExternalRunner, Runner
from .gpu_state import gpu_state

ArgSets = Optional[Sequence[Sequence[Any]]]


@dataclass
class TimingOptions:
    """Options shared by bench() and compare(); every keyword of those
    functions not listed in their signature lands here."""

    # stop when the CI half-width of the median (bench) or of the speedup
    # (compare) is this fraction of the estimate
    target_rel_half_width: float = 0.005
    confidence: float = 0.95
    min_samples: int = 10  # samples (bench) or pairs (compare)
    max_samples: int = 2000
    time_budget_s: float = 5.0  # sampling only; warm-up and set-up come on top
    warmup_s: float = 0.05
    # one sample lasts at least this long: launch overhead and event
    # granularity (~0.5 us) stay below 1% of a sample
    target_sample_s: float = 100e-6
    max_launches_per_sample: int = 1000
    l2_flush: bool = True  # CUDA only: write a buffer > L2 before every sample
    cuda_graph: bool = True  # CUDA only: capture the sample's launches
    check_hidden_work: bool = True  # CUDA only
    hidden_work_rel_tol: float = DEFAULT_REL_TOL
    hidden_work_abs_tol_s: float = DEFAULT_ABS_TOL_S
    ci_method: str = "order"  # bench: order | bootstrap
    method: str = "pair_ratio"  # compare: pair_ratio | bootstrap
    stop_when_decided: bool = False  # compare only
    reject_outliers: bool = True
    seed: int = 0
    keep_samples: bool = True
    record_gpu_state: bool = True
    #: where NVML cannot say, an ``nvidia-smi`` started for the clocks (tens
    #: of milliseconds a reading); the evaluator's slot turns it off
    gpu_state_start_process: bool = True

    def __post_init__(self) -> None:
        if self.target_sample_s <= 0 or self.max_launches_per_sample < 1 or self.warmup_s < 0:
            raise ValueError(
                "target_sample_s must be > 0, max_launches_per_sample >= 1, warmup_s >= 0; got "
                f"{self.target_sample_s}, {self.max_launches_per_sample}, {self.warmup_s}"
            )

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> "TimingOptions":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise TypeError(f"unknown timing option(s) {unknown}; allowed: {sorted(names)}")
        return cls(**kwargs)

    def sampler_options(self) -> Any:
        o = _ct.SamplerOptions()
        o.target_rel_half_width = self.target_rel_half_width
        o.confidence = self.confidence
        o.min_samples = self.min_samples
        o.max_samples = self.max_samples
        o.time_budget_s = self.time_budget_s
        o.reject_outliers = self.reject_outliers
        o.ci_method = self.ci_method
        o.seed = self.seed
        o.validate()
        return o

    def compare_options(self) -> Any:
        o = _ct.CompareOptions()
        o.target_rel_half_width = self.target_rel_half_width
        o.confidence = self.confidence
        o.min_pairs = self.min_samples
        o.max_pairs = self.max_samples
        o.time_budget_s = self.time_budget_s
        o.stop_when_decided = self.stop_when_decided
        o.reject_outliers = self.reject_outliers
        o.method = self.method
        o.seed = self.seed
        o.validate()
        return o


# -- drivers (runner-agnostic) -------------------------------------------


def _drive_bench(runner: Runner, opts: TimingOptions, device: str) -> Measurement:
    sampler = _ct.AdaptiveSampler(opts.sampler_options())
    while sampler.need_more():
        n = sampler.suggested_batch()
        handles = [runner.take() for _ in range(n)]
        sampler.add(runner.resolve(handles))
    r = sampler.result()
    med = r["median"]
    return Measurement(
        median_s=med["estimate"],
        ci_low_s=med["lower"],
        ci_high_s=med["upper"],
        rel_half_width=med["relative_half_width"],
        mean_s=r["mean"],
        stddev_s=r["stddev"],
        cv=r["cv"],
        mad_s=r["mad"],
        min_s=r["min"],
        max_s=r["max"],
        n_samples=r["n"],
        n_outliers=r["n_outliers"],
        stop_reason=r["stop_reason"],
        elapsed_s=r["elapsed_s"],
        timer=runner.timer,
        device=device,
        launches_per_sample=runner.launches_per_sample,
        cuda_graph=runner.cuda_graph,
        graph_fallback_reason=runner.graph_fallback_reason,
        input_sets=runner.input_sets,
        samples_s=[float(x) for x in sampler.samples] if opts.keep_samples else [],
    )


def _drive_compare(
    ref: Runner, cand: Runner, opts: TimingOptions, device: str, between_pairs: Optional[Callable[[int], None]] = None
) -> Comparison:
    """``between_pairs(i)``, where given, runs before pair ``i``, outside
    both sides' timed windows (the evaluator moves new values into the timed
    inputs there: evaluator/timed_rotation.py)."""
    comparator = _ct.PairedComparator(opts.compare_options())
    index = 0
    while comparator.need_more():
        n = comparator.suggested_batch()
        ref_handles, cand_handles = [], []
        # A B, B A, A B ...: neither side always runs right after the other.
        for i in range(index, index + n):
            if between_pairs is not None:
                between_pairs(i)
            if _ct.PairedComparator.reference_first(i):
                ref_handles.append(ref.take())
                cand_handles.append(cand.take())
            else:
                cand_handles.append(cand.take())
                ref_handles.append(ref.take())
        index += n
        comparator.add(ref.resolve(ref_handles), cand.resolve(cand_handles))
    r = comparator.result()
    s = r["speedup"]
    sampler_opts = opts.sampler_options()
    side_stats = {
        "reference": _side_stats(comparator.reference_samples, sampler_opts),
        "candidate": _side_stats(comparator.candidate_samples, sampler_opts),
    }
    return Comparison(
        speedup=s["estimate"],
        speedup_low=s["lower"],
        speedup_high=s["upper"],
        rel_half_width=s["relative_half_width"],
        verdict=r["verdict"],
        stop_reason=r["stop_reason"],
        n_pairs=r["n_pairs"],
        n_outlier_pairs=r["n_outlier_pairs"],
        reference_median_s=r["reference_median"]["estimate"],
        candidate_median_s=r["candidate_median"]["estimate"],
        elapsed_s=r["elapsed_s"],
        timer=ref.timer,
        device=device,
        method=opts.method,
        launches_per_sample=ref.launches_per_sample,
        reference_cuda_graph=ref.cuda_graph,
        candidate_cuda_graph=cand.cuda_graph,
        graph_fallback_reasons={
            k: v for k, v in (("reference", ref.graph_fallback_reason), ("candidate", cand.graph_fallback_reason)) if v
        },
        input_sets=ref.input_sets,
        reference_stats=side_stats["reference"],
        candidate_stats=side_stats["candidate"],
    )


def _side_stats(samples: Any, sampler_opts: Any) -> dict[str, Any]:
    """Per-side summary of a comparison's samples (seconds per call): how
    noisy each side was, which the speedup's CI alone does not show."""
    if len(samples) == 0:
        return {}
    r = _ct.summarize(samples, sampler_opts)
    med = r["median"]
    return {
        "median_s": med["estimate"],
        "ci_low_s": med["lower"],
        "ci_high_s": med["upper"],
        "mean_s": r["mean"],
        "stddev_s": r["stddev"],
        "cv": r["cv"],
        "mad_s": r["mad"],
        "min_s": r["min"],
        "max_s": r["max"],
        "n_samples": r["n"],
        "n_outliers": r["n_outliers"],
    }


# -- external sample sources ---------------------------------------------


def bench_samples(sample_fn: Callable[[], float], *, unit: str = "s", **options: Any) -> Measurement:
    """Adaptive sampling over an external timer: ``sample_fn()`` runs the
    work once and returns its duration in ``unit`` ('s', 'ms', 'us', 'ns').
    Used by the OpenCL backend with event-profiling times."""
    opts = TimingOptions.from_kwargs(options)
    return _drive_bench(ExternalRunner(sample_fn, unit), opts, device="external")


def compare_samples(
    ref_sample_fn: Callable[[], float],
    cand_sample_fn: Callable[[], float],
    *,
    unit: str = "s",
    between_pairs: Optional[Callable[[int], None]] = None,
    **options: Any,
) -> Comparison:
    """Paired comparison over external timers; the two functions are called
    alternately (A B, B A, ...), each returning one duration in ``unit``."""
    opts = TimingOptions.from_kwargs(options)
    return _drive_compare(
        ExternalRunner(ref_sample_fn, unit),
        ExternalRunner(cand_sample_fn, unit),
        opts,
        device="external",
        between_pairs=between_pairs,
    )


# -- callables ------------------------------------------------------------


def _resolve_device(device: Optional[str]) -> str:
    if device is not None:
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu', 'cuda' or None (auto), got '{device}'")
        return device
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def _launches_for(call_s: float, opts: TimingOptions) -> int:
    if call_s <= 0:
        return opts.max_launches_per_sample
    return max(1, min(opts.max_launches_per_sample, math.ceil(opts.target_sample_s / call_s)))


def _gpu_state(opts: TimingOptions) -> dict[str, Any]:
    if not opts.record_gpu_state:
        return {}
    import torch

    return gpu_state(torch.cuda.current_device(), start_process=opts.gpu_state_start_process)


def _cuda_runners(
    fns: Sequence[Callable[..., Any]],
    input_sets: ArgSets,
    opts: TimingOptions,
    per_fn_sets: Optional[Sequence[ArgSets]] = None,
) -> list:
    """One runner per function; ``per_fn_sets`` gives each its own input
    sets (else all share ``input_sets``)."""
    import torch

    # lazy: timing.cuda pulls in torch, numpy, which timing.harness does not load on its own
    from .cuda import CudaRunner, L2Flusher

    flusher = L2Flusher(torch.device("cuda", torch.cuda.current_device())) if opts.l2_flush else None
    sets = list(per_fn_sets) if per_fn_sets is not None else [input_sets] * len(fns)
    runners = [CudaRunner(fn, s, use_graph=opts.cuda_graph, flusher=flusher) for fn, s in zip(fns, sets)]
    for r in runners:
        r.warmup(opts.warmup_s)
    # One launch count for all sides, from the fastest: its samples also
    # reach target_sample_s, and the speedup compares like with like.
    call_s = min(r.estimate_call_s() for r in runners)
    launches = _launches_for(call_s, opts)
    for r in runners:
        r.prepare(launches)
    return runners


def _hidden_work(runner: Any, opts: TimingOptions) -> HiddenWorkCheck:
    """Eager sync-bounded check (side streams) plus, when a graph is used,
    graph-vs-eager consistency (work left out of the capture)."""
    import time

    import torch

    graph = runner._graph
    # The eager launches must be what is checked: uncaptured work only runs eagerly.
    runner._graph = None
    try:
        per_sample = max(runner.time_region(runner.launches_per_sample, reps=3) * runner.launches_per_sample, 1e-9)
        samples = max(1, math.ceil(2e-3 / per_sample))  # >= ~2 ms of work: overhead jitter is small
        check = check_hidden_work(
            runner.sync_bounded_region, samples, rel_tol=opts.hidden_work_rel_tol, abs_tol_s=opts.hidden_work_abs_tol_s
        )
        if graph is not None:
            launches = runner.launches_per_sample * samples
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            runner._eager(launches)
            end.record()
            host = (time.perf_counter() - t0) / launches
            end.synchronize()
            eager_event = start.elapsed_time(end) * 1e-3 / launches
            runner._graph = graph
            graph_call = runner.time_region(runner.launches_per_sample, reps=3)
            suspected, reason = graph_consistency_verdict(graph_call, eager_event, host)
            if suspected:
                check.suspected = True
                check.reason = (check.reason + "; " if check.reason else "") + reason
        return check
    finally:
        runner._graph = graph


def _apply_roofline(measured_s: float, roofline: Optional[Mapping[str, Any]]) -> tuple[bool, list[str]]:
    if not roofline:
        return False, []
    peak = roofline.get("peak")
    if peak is None:
        import torch

        name = torch.cuda.get_device_name() if torch.cuda.is_available() else ""
        peak = lookup_peak(name)
        if peak is None:
            return False, [f"roofline: no peak figures for device '{name}' (pass roofline['peak'])"]
    if not isinstance(peak, HardwarePeak):
        raise TypeError("roofline['peak'] must be a HardwarePeak")
    check = roofline_check(
        measured_s,
        bytes_moved=float(roofline.get("bytes_moved", 0)),
        flops=float(roofline.get("flops", 0)),
        peak=peak,
        dtype=roofline.get("dtype", "fp32"),
        tolerance=float(roofline.get("tolerance", 0.9)),
    )
    return check.suspicious, [check.reason] if check.suspicious else []


def bench(
    fn: Callable[..., Any],
    *,
    input_sets: ArgSets = None,
    device: Optional[str] = None,
    sync: Optional[Callable[[], Any]] = None,
    roofline: Optional[Mapping[str, Any]] = None,
    **options: Any,
) -> Measurement:
    """Time ``fn`` until the median's CI is tight enough (see TimingOptions).

    fn is called as ``fn()``, or as ``fn(*input_sets[i])`` rotating over the
    input sets. device: 'cuda' (events, graphs, L2 flush, hidden-work check),
    'cpu' (perf_counter around fn and ``sync()``), or None: CUDA if available.
    roofline: {'bytes_moved', 'flops', 'dtype', optional 'peak': HardwarePeak,
    'tolerance'}; a median below the hardware floor marks the result suspicious.
    """
    opts = TimingOptions.from_kwargs(options)
    dev = _resolve_device(device)
    if dev == "cpu":
        runner = CpuRunner(fn, input_sets, sync)
        runner.launches_per_sample = _launches_for(runner.estimate_call_s(opts.warmup_s), opts)
        return _drive_bench(runner, opts, "cpu")
    before = _gpu_state(opts)
    (runner,) = _cuda_runners([fn], input_sets, opts)
    m = _drive_bench(runner, opts, "cuda")
    m.l2_flush = opts.l2_flush
    if opts.check_hidden_work:
        m.hidden_work = _hidden_work(runner, opts)
        if m.hidden_work.suspected:
            m.suspicious = True
            m.suspicious_reasons.append("hidden work: " + m.hidden_work.reason)
    flagged, reasons = _apply_roofline(m.median_s, roofline)
    m.suspicious = m.suspicious or flagged
    m.suspicious_reasons += reasons
    m.gpu_state = {"before": before, "after": _gpu_state(opts)}
    return m


def compare(
    ref_fn: Callable[..., Any],
    cand_fn: Callable[..., Any],
    *,
    input_sets: ArgSets = None,
    device: Optional[str] = None,
    sync: Optional[Callable[[], Any]] = None,
    roofline: Optional[Mapping[str, Any]] = None,
    reference_input_sets: ArgSets = None,
    between_pairs: Optional[Callable[[int], None]] = None,
    **options: Any,
) -> Comparison:
    """Measure reference and candidate alternately and return the speedup
    (reference time / candidate time) with its CI and a verdict.
    ``reference_input_sets`` (as many as ``input_sets``) gives the reference
    arguments of its own; by default both sides get ``input_sets``. On CUDA the
    candidate is also checked for hidden work ('rejected' verdict) and, given
    ``roofline``, against the hardware floor ('suspicious')."""
    opts = TimingOptions.from_kwargs(options)
    dev = _resolve_device(device)
    ref_sets = input_sets if reference_input_sets is None else reference_input_sets
    if dev == "cpu":
        ref = CpuRunner(ref_fn, ref_sets, sync)
        cand = CpuRunner(cand_fn, input_sets, sync)
        call_s = min(ref.estimate_call_s(opts.warmup_s), cand.estimate_call_s(opts.warmup_s))
        ref.launches_per_sample = cand.launches_per_sample = _launches_for(call_s, opts)
        return _drive_compare(ref, cand, opts, "cpu", between_pairs)
    before = _gpu_state(opts)
    ref, cand = _cuda_runners([ref_fn, cand_fn], input_sets, opts, per_fn_sets=[ref_sets, input_sets])
    c = _drive_compare(ref, cand, opts, "cuda", between_pairs)
    c.l2_flush = opts.l2_flush
    if opts.check_hidden_work:
        c.hidden_work = {"reference": _hidden_work(ref, opts), "candidate": _hidden_work(cand, opts)}
        if c.hidden_work["candidate"].suspected:
            c.verdict = "rejected"
            c.rejected_reason = "hidden work: " + c.hidden_work["candidate"].reason
        if c.hidden_work["reference"].suspected:
            c.suspicious = True
            c.suspicious_reasons.append("reference hidden work: " + c.hidden_work["reference"].reason)
    flagged, reasons = _apply_roofline(c.candidate_median_s, roofline)
    c.suspicious = c.suspicious or flagged
    c.suspicious_reasons += reasons
    c.gpu_state = {"before": before, "after": _gpu_state(opts)}
    return c

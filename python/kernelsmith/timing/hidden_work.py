"""Hidden-work detection: no candidate may look fast by running its work
where the timer does not look.

CUDA events time one stream. A candidate that launches its kernels on
another stream (and does not make the timed stream wait for them) finishes
"instantly" as far as the events can tell. The check times the same launches
twice at once: with events on the timed stream, and with the host wall clock
between two device-wide synchronizations (``torch.cuda.synchronize()``
waits for every stream). The wall time always exceeds the event time by a
fixed overhead (launch and synchronization latency), which we measure on an
empty region; anything beyond overhead + tolerance is work the events missed.

The decision is a pure function so it can be tested with simulated timers.
"""

from __future__ import annotations

from typing import Callable, Sequence, Tuple

from .results import HiddenWorkCheck

#: extra wall time tolerated, as a fraction of the event time
DEFAULT_REL_TOL = 0.15
#: and in absolute terms (host jitter of a synchronize round trip)
DEFAULT_ABS_TOL_S = 30e-6


def hidden_work_verdict(
    event_s: float,
    wall_s: float,
    overhead_s: float,
    *,
    rel_tol: float = DEFAULT_REL_TOL,
    abs_tol_s: float = DEFAULT_ABS_TOL_S,
) -> HiddenWorkCheck:
    """Decide whether wall time not seen by the events is more than overhead.

    event_s: event-timed duration of N launches on the timed stream.
    wall_s: host time from a device synchronize before the launches to a
        device synchronize after them.
    overhead_s: wall - event for an empty region (same procedure, no launches).
    """
    if event_s < 0 or wall_s < 0 or overhead_s < 0:
        raise ValueError(
            f"hidden_work_verdict: times must be >= 0, got event_s={event_s}, wall_s={wall_s}, overhead_s={overhead_s}"
        )
    unexplained = wall_s - overhead_s - event_s
    allowed = rel_tol * event_s + abs_tol_s
    suspected = unexplained > allowed
    reason = ""
    if suspected:
        reason = (
            f"device-synchronized wall time {wall_s * 1e6:.1f} us exceeds the timed stream's "
            f"event time {event_s * 1e6:.1f} us by {unexplained * 1e6:.1f} us beyond the "
            f"{overhead_s * 1e6:.1f} us overhead (allowed {allowed * 1e6:.1f} us): work ran on "
            f"a stream the timer does not see"
        )
    return HiddenWorkCheck(
        event_s=event_s,
        wall_s=wall_s,
        overhead_s=overhead_s,
        unexplained_s=unexplained,
        rel_tol=rel_tol,
        abs_tol_s=abs_tol_s,
        suspected=suspected,
        reason=reason,
    )


def check_hidden_work(
    timed_region: Callable[[int], Tuple[float, float]],
    launches: int,
    *,
    repeats: int = 3,
    rel_tol: float = DEFAULT_REL_TOL,
    abs_tol_s: float = DEFAULT_ABS_TOL_S,
) -> HiddenWorkCheck:
    """Run the check with a timer: ``timed_region(n)`` runs n launches and
    returns (event_s, wall_s) measured as described in the module docstring;
    ``timed_region(0)`` measures the empty region. The smallest overhead and
    the median of the (event, wall) repeats are used, so one host hiccup
    neither hides nor invents hidden work.
    """
    if launches < 1 or repeats < 1:
        raise ValueError(f"check_hidden_work: launches and repeats must be >= 1, got {launches}, {repeats}")
    overheads = []
    for _ in range(repeats):
        e, w = timed_region(0)
        overheads.append(max(w - e, 0.0))
    runs: Sequence[Tuple[float, float]] = sorted(
        (timed_region(launches) for _ in range(repeats)), key=lambda ew: ew[1] - ew[0]
    )
    event_s, wall_s = runs[len(runs) // 2]
    return hidden_work_verdict(event_s, wall_s, min(overheads), rel_tol=rel_tol, abs_tol_s=abs_tol_s)


def graph_consistency_verdict(
    graph_call_s: float,
    eager_event_call_s: float,
    eager_host_call_s: float,
    *,
    min_ratio: float = 0.5,
    launch_bound_margin: float = 0.7,
) -> tuple[bool, str]:
    """Work launched on a stream that is not part of the capture runs once,
    eagerly, during capture and is missing from every replay: the graph then
    looks much faster than the same calls launched eagerly.

    A graph is legitimately faster than eager launches only when the eager
    calls are launch bound (the GPU waits for the host). We call the eager
    run launch bound when the host's enqueue time per call reaches
    ``launch_bound_margin`` of the eager event time per call. Otherwise the
    graph's time per call must be at least ``min_ratio`` of the eager one.
    Returns (suspected, reason).
    """
    if min(graph_call_s, eager_event_call_s, eager_host_call_s) < 0:
        raise ValueError("graph_consistency_verdict: times must be >= 0")
    launch_bound = eager_host_call_s >= launch_bound_margin * eager_event_call_s
    if launch_bound or graph_call_s >= min_ratio * eager_event_call_s:
        return False, ""
    return True, (
        f"the CUDA graph replays in {graph_call_s * 1e6:.2f} us per call but the same calls "
        f"launched eagerly take {eager_event_call_s * 1e6:.2f} us on the GPU while the host "
        f"enqueues them in {eager_host_call_s * 1e6:.2f} us: work is missing from the graph "
        f"(launched on a stream outside the capture)"
    )

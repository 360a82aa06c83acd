"""EvalResult: the evaluator's verdict on one candidate, as plain data.

A result is JSON-serialisable (:meth:`EvalResult.to_dict` /
:meth:`EvalResult.from_dict`) and renders itself as feedback for the next
prompt (:meth:`EvalResult.render_feedback`, through the one renderer in
:mod:`kernelsmith.feedback`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from .feedback import render_feedback

# 2: speedup CI, timing verdict, suspicious flags, paired timing details
# 3: per-phase times, the load the timing saw, timing reliability
# 4: the kernel census (policy, coverage, own and foreign work), "harness"
# 5: speed_of_light (achieved bandwidth and FLOP rate against the device's peaks)
# 6: the category is the verdict's one word, set where the error happened (a
#    kernel build failure at the first call is "compile"); no reader parses
#    the error text. Older records are normalised on loading (from_dict)
SCHEMA_VERSION = 6

#: Records before schema 6 could carry a kernel build failure that surfaced
#: at the first call as category "runtime"; rewards then re-classified it by
#: these texts of the result's backend (a record without its backend: any
#: backend's). Used only to normalise such records once, when loaded.
_LEGACY_BUILD_ERROR_MARKERS: dict[str, tuple[str, ...]] = {
    "triton": ("CompilationError",),
    "cuda": ("CompilationError",),
    "opencl": ("CL_BUILD_PROGRAM_FAILURE", "clBuildProgram failed"),
}

#: error categories, from the earliest stage that failed
CATEGORIES = (
    "ok",  # compiled, correct, not hacked
    "edit",  # the proposal could not be turned into a program (set by the loop, not the evaluator)
    "compile",  # syntax error, no ModelNew, wrong signature, kernel compile error
    "runtime",  # exception while running the candidate
    "timeout",  # wall-clock or CPU-time limit hit; worker killed
    "crash",  # the worker died (segfault, os._exit, illegal memory access)
    "oom",  # out of memory (host or device)
    "incorrect",  # ran, but outputs differ from the reference
    "hacked",  # reward hack detected (statically or at run time)
    "harness",  # the task's reference or the machine failed: not the candidate's fault, not charged
)


@dataclass
class EvalResult:
    compiled: bool = False
    correct: bool = False
    hacked: bool = False
    hack_reasons: list[Any] = field(default_factory=list)
    category: str = "runtime"
    # trimmed log: candidate frames of the traceback and the error message
    error: str = ""
    # static-check warnings (e.g. precision-lowering casts)
    warnings: list[Any] = field(default_factory=list)
    # median ms of one forward call (candidate, reference); None when not timed
    runtime_ms: Optional[float] = None
    ref_runtime_ms: Optional[float] = None
    # reference / candidate: median of the per-pair ratios of the paired,
    # alternating comparison (kernelsmith.timing.compare), with its CI
    speedup: Optional[float] = None
    speedup_ci_low: Optional[float] = None
    speedup_ci_high: Optional[float] = None
    # faster | slower | indistinguishable (CI contains 1) | rejected (hidden work); "" = not timed
    timing_verdict: str = ""
    # the time is not trusted as fast (below the hardware floor, reference
    # hidden work): the reasons say why
    suspicious: bool = False
    suspicious_reasons: list[Any] = field(default_factory=list)
    # max_abs_err, max_rel_err, atol, rtol, trials, input_sets, first_mismatch{...}
    correctness: dict[str, Any] = field(default_factory=dict)
    # how the comparison was measured (evaluator/timing.py): per-side stats in
    # ms ("candidate"/"reference": median, ci_low, ci_high, mean, std, cv, min,
    # max, n, n_outliers), speedup_ci, verdict, stop_reason, n_pairs, timer,
    # launches_per_sample, input_sets, cuda_graph, graph_fallback_reasons,
    # l2_flush, hidden_work, roofline, gpu_state (clocks, temperature), options
    timing: dict[str, Any] = field(default_factory=dict)
    # device name, driver, torch and triton versions, ...
    hardware: dict[str, Any] = field(default_factory=dict)
    # "bwrap" or "process" (+ why bwrap was not used, in isolation_note)
    isolation: str = ""
    isolation_note: str = ""
    # backend kernels seen launching during forward, torch ops that ran there
    kernels_launched: list[Any] = field(default_factory=list)
    torch_ops: list[Any] = field(default_factory=list)
    task_id: str = ""
    backend: str = ""
    wall_s: float = 0.0
    # tail of what the candidate printed (stdout+stderr of the worker)
    log_tail: str = ""
    # seconds per phase: queue (waiting for a worker), startup (the worker's
    # own start when none was ready), load (task and candidate), compile
    # (first candidate call: JIT compile and launch), correctness (the rest of
    # the trials), census (the integrity v2 checks' own time: profiler, provenance,
    # snapshot, refill checks), timing_wait (waiting for the device's timing slot), timing
    phases: dict[str, Any] = field(default_factory=dict)
    # False when the timing saw contention or a drifting reference after
    # every re-timing: the speedup is then not to be trusted as fast
    timing_reliable: bool = True
    unreliable_reasons: list[Any] = field(default_factory=list)
    # what the timing saw per attempt: cores busy with other work, foreign GPU
    # processes, the reference against its running baseline, threads used
    load: dict[str, Any] = field(default_factory=dict)
    # the kernel census (evaluator/census.py): policy, coverage (share of
    # forward's time in the program's own kernels), time_basis, own_us and
    # foreign_us per kernel or op, housekeeping_us, host_reads,
    # other_streams, degenerate (trivial outputs the tolerance accepts),
    # per_call (kernels per timed call)
    census: dict[str, Any] = field(default_factory=dict)
    # device memory (evaluator/memory.py): the task's footprint and
    # memory_margin, the admission (need_bytes, alone, waited_s,
    # device_free_bytes), the worker's peak_bytes (CUDA), and for a memory
    # fault what the worker saw (fault: candidate | harness, where,
    # candidate_bytes, held_bytes, tried_bytes), who it was attributed to and
    # why (attributed, reason), retried_alone and first_attempt
    memory: dict[str, Any] = field(default_factory=dict)
    # the speed of light of the candidate's timing (kernelsmith.timing.
    # speed_of_light.SpeedOfLight as a dict): achieved bytes/s and FLOP/s,
    # their fractions of the device's peaks (with the peaks' source), the
    # arithmetic intensity against the ridge point, the bound that applies
    # and its fraction; counted False with the reason where the work or the
    # peaks are unknown. Empty when not timed
    speed_of_light: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    @property
    def coverage(self) -> Optional[float]:
        return self.census.get("coverage")

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(f"category '{self.category}' is not one of {', '.join(CATEGORIES)}")

    @property
    def ok(self) -> bool:
        return self.category == "ok"

    def overrule_as_hacked(self, reason: str, withdraw_speedup: bool = True) -> None:
        """A check outside the worker (the trusted referee, the parent's
        cross-checks) found the result forged: hacked, not correct, for
        ``reason``; with ``withdraw_speedup`` no speedup of it stays."""
        self.category, self.hacked, self.correct = "hacked", True, False
        if withdraw_speedup:
            self.speedup = self.speedup_ci_low = self.speedup_ci_high = None
        self.hack_reasons = [reason]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EvalResult":
        version = data.get("schema_version", SCHEMA_VERSION)
        if version > SCHEMA_VERSION:
            raise ValueError(f"EvalResult schema_version {version} is newer than this kernelsmith ({SCHEMA_VERSION})")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown EvalResult keys: {', '.join(unknown)}")
        if version < 6:
            data = _normalise_legacy_category(data)
        return cls(**data)

    def render_feedback(self, max_log_chars: int = 0) -> str:
        """Feedback for the next generation: what failed and what to change
        (:func:`kernelsmith.feedback.render_feedback`, the one renderer;
        ``max_log_chars`` > 0 trims the error log to its head and tail)."""
        return render_feedback(self, max_log_chars)


def _normalise_legacy_category(data: dict[str, Any]) -> dict[str, Any]:
    """A record written before schema 6 as the evaluator would write it now:
    a ``runtime`` result whose error carries its backend's build-failure
    text (:data:`_LEGACY_BUILD_ERROR_MARKERS`) is the compile failure the
    worker now reports (``category="compile"``, ``compiled=False``), so
    every reader of old runs takes the category as it stands. Its
    ``schema_version`` stays what was written."""
    if data.get("category", "runtime") != "runtime":
        return data
    backend = str(data.get("backend") or "")
    markers = (
        _LEGACY_BUILD_ERROR_MARKERS.get(backend, ())
        if backend
        else tuple(m for ms in _LEGACY_BUILD_ERROR_MARKERS.values() for m in ms)
    )
    error = str(data.get("error") or "")
    if not any(marker in error for marker in markers):
        return data
    return {**data, "category": "compile", "compiled": False}


#: a program's status in a run (the trajectory's ``status``, the archive's,
#: the RL environment's turns): the coarse view of a result's category
STATUSES = ("correct", "hacked", "compile-failed", "incorrect")


def status_of(result: Any) -> str:
    """The one mapping from a result (an EvalResult or any object with its
    fields) to :data:`STATUSES`, used by the evolve loop and the RL
    environment alike."""
    if getattr(result, "hacked", False):
        return "hacked"
    if getattr(result, "correct", False):
        return "correct"
    if getattr(result, "compiled", True) is False:
        return "compile-failed"
    return "incorrect"


def program_metrics(result: Any) -> dict[str, Any]:
    """A program's metrics as the archive keeps them: ``score`` (its speedup
    when correct and not suspicious, else 0), the ``suspicious`` and
    ``unreliable`` marks, and its figures. Computed here once for the
    evolve loop and the RL environment."""
    trusted = not getattr(result, "suspicious", False)
    speedup = float(getattr(result, "speedup", 0.0) or 0.0)
    # A time below the hardware floor is not trusted as fast: such a
    # program stays correct but scores nothing, and its feedback says why.
    metrics: dict[str, Any] = {"score": speedup if status_of(result) == "correct" and trusted else 0.0}
    if not trusted:
        metrics["suspicious"] = 1.0
    # measured under contention or with a drifting reference even after
    # re-timing: it keeps its score in the archive, but never becomes the
    # run's best unless the finalists' re-timing confirms it
    if getattr(result, "timing_reliable", True) is False:
        metrics["unreliable"] = 1.0
    for key in ("speedup", "runtime_ms", "ref_runtime_ms"):
        value = getattr(result, key, None)
        if isinstance(value, (int, float)):
            metrics[key] = float(value)
    # the fraction of the device's peak that the bound which applies allows
    # (sol_memory or sol_compute): the prompt's history shows it next to the
    # speedup, exports and reports read it from the metrics
    sol = getattr(result, "speed_of_light", None) or {}
    if (
        isinstance(sol, dict)
        and sol.get("bound") in ("memory", "compute")
        and isinstance(sol.get("fraction"), (int, float))
    ):
        metrics[f"sol_{sol['bound']}"] = float(sol["fraction"])
    return metrics

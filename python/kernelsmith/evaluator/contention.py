"""One timing slot per device, and contention detected rather than believed.

Every worker asks its device's :class:`DeviceGate` before it times. The
gate grants one timing at a time per device and stops (SIGSTOP) the
device's other workers while it runs, so compile and correctness work of
the next candidates can never share the cores or the GPU with a timing;
they continue (SIGCONT) when it ends, with their wall-clock limits extended
by the time they stood still.

The gate also watches what the timing saw, from the trusted side:

* host load: the cores busy during the timing window (``/proc/stat``) minus
  what the timing worker itself used; on a CPU device a timing whose
  threads cannot each have a free core is *contended*;
* foreign GPU processes (NVML) on the worker's device;
* the reference's median against the task's running baseline on this
  device (the median of earlier accepted timings): a reference that drifts
  beyond ``drift_tolerance`` means the machine changed under the timing;
* the GPU's SM clock, sampled by the gate itself (NVML) every few
  milliseconds while the slot is held: a timing during which the clock sat
  more than ``clock_drop_tolerance`` below the highest clock seen on the
  device for more than ``clock_low_share`` of the window was throttled
  (power, heat, or another tenant), and a speedup of a memory-bound kernel
  against a compute-bound reference shifts with the clock.

A contended or drifting attempt is timed again (``max_retimes``, with a
short back-off); if every attempt was bad the result is marked
``timing_reliable=False`` with the reasons, and it can never become a run's
best (the loop and the finalists' re-timing see to that).
"""

from __future__ import annotations

import os
import signal
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional
from ..timing.gpu_state import nvml


def _proc_stat() -> Optional[tuple[float, float]]:
    """(busy, total) jiffies of all cores, or None where /proc is missing."""
    try:
        with open("/proc/stat") as f:
            parts = f.readline().split()
    except OSError:
        return None
    values = [float(x) for x in parts[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0.0)  # idle + iowait
    total = sum(values[:8])  # guest time is already in user
    return total - idle, total


def host_cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _descendants(pid: int, most: int = 1024) -> list[int]:
    """The processes ``pid`` started, and theirs (each thread's
    /proc/<pid>/task/<tid>/children), at most ``most``."""
    found: list[int] = []
    todo = [pid]
    while todo and len(found) < most:
        parent = todo.pop()
        try:
            tids = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as f:
                    kids = [int(x) for x in f.read().split()]
            except (OSError, ValueError):
                continue
            found += kids
            todo += kids
    return found[:most]


def process_cpu_s(pids: Any) -> Optional[float]:
    """CPU seconds (user and system, every thread) the processes ``pids``
    and every process they started have used so far, as the kernel counts
    them (/proc/<pid>/stat, readable for any process: a live process's own
    times and those of its children it has reaped): the parent's own
    measure of a worker's use, where the worker's report is its word. A
    process the program starts (a spinner to make the host look busy) is
    the worker's use, not other work. None where a pid cannot be read."""
    total = 0.0
    tick = float(os.sysconf("SC_CLK_TCK"))
    roots = [int(p) for p in pids]
    for pid in roots + [d for r in roots for d in _descendants(r)]:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            # utime, stime, cutime, cstime
            total += sum(float(fields[i]) for i in (11, 12, 13, 14)) / tick
        except (OSError, IndexError, ValueError):
            if pid in roots:
                return None
    return total


class HostLoadWindow:
    """Busy cores of the whole host between :meth:`start` and :meth:`stop`;
    with ``pids``, also the cores those processes used (``own_cores``) and
    the rest (``other_cores``), both measured here."""

    def __init__(self) -> None:
        self._start: Optional[tuple[float, float]] = None
        self._wall = 0.0
        self._pids: list[int] = []
        self._own: Optional[float] = None

    def start(self, pids: Any = ()) -> None:
        self._pids = [int(p) for p in pids or ()]
        self._own = process_cpu_s(self._pids) if self._pids else None
        self._start = _proc_stat()
        self._wall = time.monotonic()

    def stop(self) -> dict[str, float]:
        end = _proc_stat()
        wall = time.monotonic() - self._wall
        cores = float(os.cpu_count() or 1)
        if self._start is None or end is None or end[1] <= self._start[1]:
            return {}
        busy = (end[0] - self._start[0]) / (end[1] - self._start[1]) * cores
        window = {"busy_cores": round(busy, 3), "cores": cores, "window_s": round(wall, 4)}
        own = process_cpu_s(self._pids) if self._own is not None else None
        if own is not None and self._own is not None and wall > 0:
            mine = (own - self._own) / wall
            window.update(own_cores=round(mine, 3), other_cores=round(max(0.0, busy - mine), 3))
        return window


def busy_host(other_cores: Any, cores: Any, policy: Optional["TimingPolicy"] = None, threads: int = 1) -> bool:
    """Whether ``other_cores`` of ``cores`` used by other processes leave
    less than a timing of ``threads`` threads needs: the gate's rule for a
    timing attempt, and the audit check's for a measure the parent took
    itself."""
    if not isinstance(other_cores, (int, float)) or not isinstance(cores, (int, float)):
        return False
    policy = policy or TimingPolicy()
    return cores - other_cores < (threads + policy.free_core_headroom) * policy.free_core_share


def _nvml(device: Optional[str]) -> Optional[tuple[Any, Any]]:
    """(pynvml, device handle), initialised once per process and device (the
    gate asks on every timing attempt; timing.gpu_state.nvml keeps it); None
    without pynvml or an NVIDIA GPU."""
    return nvml(str(device or 0))


def foreign_gpu_processes(device: Optional[str], own_pids: set[int]) -> Optional[list[int]]:
    """Compute processes on ``device`` (an index) that are not ours; None when
    NVML cannot say (no NVIDIA GPU, no pynvml, or pids hidden by a container)."""
    nvml = _nvml(device)
    if nvml is None:
        return None
    try:
        procs = nvml[0].nvmlDeviceGetComputeRunningProcesses(nvml[1])
    except Exception:  # noqa: BLE001 - any NVML error means "unknown"
        return None
    pids = [int(p.pid) for p in procs]
    if pids and all(p == 0 for p in pids):
        return None
    return [p for p in pids if p not in own_pids and p != os.getpid()]


class ClockWatch:
    """The SM clock of one GPU, sampled by a thread of the trusted parent
    while a timing holds the slot (the worker's own readings could be
    forged). ``stop()`` gives the samples in MHz; an empty list where NVML
    cannot say."""

    def __init__(self, device: Optional[str], period_s: float = 0.005) -> None:
        self.period_s = period_s
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        nvml = _nvml(device)
        if nvml is None:  # no NVIDIA GPU, no pynvml: nothing to watch
            return
        self._nvml, self._handle = nvml
        self._thread = threading.Thread(target=self._run, daemon=True, name="ks-clock-watch")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(int(self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_SM)))
            except Exception:  # noqa: BLE001
                return
            self._stop.wait(self.period_s)

    def stop(self) -> list[int]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        return list(self.samples)


def clock_verdict(samples: list[int], device_max: int, tolerance: float, low_share: float) -> Optional[str]:
    """A reason when the clock sat below ``(1 - tolerance) * device_max`` for
    more than ``low_share`` of the samples, else None."""
    if not samples or device_max <= 0:
        return None
    floor = (1.0 - tolerance) * device_max
    low = sum(1 for s in samples if s < floor)
    if low / len(samples) <= low_share:
        return None
    return (
        f"GPU clock throttled: SM clock below {floor:.0f} MHz for {100.0 * low / len(samples):.0f}% of the "
        f"timing (min {min(samples)} MHz, highest seen on this device {device_max} MHz)"
    )


#: how a finalist's reason starts when its paired reference moved with it
SIDE_EFFECT = "reference moved with the program"


@dataclass
class TimingPolicy:
    #: a reference median further than this from its baseline (ratio - 1) is
    #: drift, on a CPU device ...
    drift_tolerance: float = 0.25
    #: ... and on a GPU, where a reference's median stays within about 2%
    #: (0.688-0.702 ms for the 0.12 ms GEMM's FP32 reference over nine of
    #: ten fresh evaluations on the H200): the tenth ran the reference 11%
    #: and the candidate 6.5% slower and made the whole 3.9% spread (the
    #: nine others: 1.2%); 25% let it through
    gpu_drift_tolerance: float = 0.06
    #: baseline values needed before drift is judged
    baseline_min: int = 3
    #: attempts after the first when contention or drift is seen
    max_retimes: int = 2
    #: back-off before a re-timing (seconds, times the attempt number)
    retime_backoff_s: float = 0.5
    #: a CPU timing is contended when the cores free of other work were fewer
    #: than this share of the threads it needed (each thread its own core)
    #: plus ``free_core_headroom``
    free_core_share: float = 0.9
    #: cores a CPU timing needs free beyond its threads: cores of one host
    #: share caches, memory bandwidth and often a physical core (vCPUs), so a
    #: neighbour on "another" core still moves the ratio. On the 2-core
    #: development machine one busy neighbour next to a 1-thread timing once
    #: gave a candidate 0.103x [0.088, 0.119] against 0.073x [0.062, 0.084]
    #: alone, with the timing's own core free (tests_py/test_contention.py)
    free_core_headroom: float = 0.5
    #: a GPU timing is throttled when the SM clock was more than this share
    #: below the device's highest seen clock ...
    clock_drop_tolerance: float = 0.05
    #: ... for more than this share of the timing window
    clock_low_share: float = 0.2
    #: the finalists' re-timing: a reference median paired with one finalist
    #: further than this (ratio - 1) from the reference timed alone in the
    #: same worker, before any finalist was loaded, is that finalist's side
    #: effect (threads it left, spinning, caches it disturbs) on the host
    #: clock; on a GPU ``gpu_drift_tolerance`` applies. Five fused OpenCL
    #: finalists on the 2-core machine once moved the reference from its
    #: usual 9.5-10 ms to 45-51 ms and confirmed a 1.07x program at 3.8x
    side_effect_tolerance: float = 0.15


@dataclass
class TimingTicket:
    """One worker's membership of its device gate."""

    gate: "DeviceGate"
    signal_fn: Any  # callable(sig) -> None: stop/continue the worker's processes
    pids: set = field(default_factory=set)  # host pids, where known (GPU foreign-process check)
    key: str = ""  # task id: the reference baseline's key
    timed_on_cpu: bool = True
    paused_s: float = 0.0
    _paused_at: Optional[float] = None
    holding: bool = False
    attempts: list = field(default_factory=list)
    reasons: list = field(default_factory=list)
    reliable: bool = True
    # (acquired, released) on this process's monotonic clock, per slot held
    slots: list = field(default_factory=list)
    #: the finalists' re-timing: the reference's median timed alone (and
    #: judged reliable) in this worker before any finalist was loaded, per
    #: timing shape (None: the task's one shape)
    reference_alone_ms: dict = field(default_factory=dict)
    #: a timing shape whose attempts all stayed unreliable: why (the result
    #: stays unreliable whatever the later shapes show)
    shape_reasons: list = field(default_factory=list)
    _window: Optional[HostLoadWindow] = None
    _clock: Optional["ClockWatch"] = None

    # -- pause bookkeeping (under the gate's lock) -----------------------
    def _pause(self) -> None:
        if self._paused_at is None:
            self._paused_at = time.monotonic()
            try:
                self.signal_fn(signal.SIGSTOP)
            except (ProcessLookupError, OSError):
                pass

    def _resume(self) -> None:
        if self._paused_at is not None:
            try:
                self.signal_fn(signal.SIGCONT)
            except (ProcessLookupError, OSError):
                pass
            self.paused_s += time.monotonic() - self._paused_at
            self._paused_at = None

    def reset_clock(self) -> None:
        with self.gate._lock:
            self.paused_s = 0.0
            if self._paused_at is not None:
                self._paused_at = time.monotonic()

    def stood_still(self) -> float:
        """Seconds this worker was stopped or waited for the slot so far."""
        extra = time.monotonic() - self._paused_at if self._paused_at is not None else 0.0
        return self.paused_s + extra

    # -- protocol ---------------------------------------------------------
    def acquire(self) -> None:
        self.gate._acquire(self)

    def report(self, report: dict[str, Any]) -> bool:
        """One timing attempt finished; True: time again."""
        return self.gate._report(self, report)

    def release(self) -> None:
        self.gate._release(self)

    def result_fields(self) -> dict[str, Any]:
        return {
            "load": {"attempts": list(self.attempts), "slots": [list(s) for s in self.slots]} if self.attempts else {},
            "timing_reliable": self.reliable,
            "unreliable_reasons": list(self.reasons),
        }

    def stopped_s(self) -> float:
        return round(self.stood_still(), 4)


class DeviceGate:
    """The timing slot of one device, shared by every worker on it."""

    def __init__(
        self,
        device: Optional[str],
        policy: Optional[TimingPolicy] = None,
        baselines: Optional["ReferenceBaselines"] = None,
    ) -> None:
        self.device = device
        self.policy = policy or TimingPolicy()
        self.baselines = baselines or ReferenceBaselines()
        self._lock = threading.Lock()
        self._slot = threading.Lock()
        self._members: list[TimingTicket] = []
        self._holder: Optional[TimingTicket] = None
        self.max_sm_clock = 0  # the highest SM clock seen while timing on this device (MHz)

    def join(
        self, signal_fn: Any, *, key: str = "", pids: Optional[set] = None, timed_on_cpu: bool = True
    ) -> TimingTicket:
        ticket = TimingTicket(self, signal_fn, set(pids or ()), key, timed_on_cpu)
        with self._lock:
            self._members.append(ticket)
            if self._holder is not None:  # a timing runs: start stopped
                ticket._pause()
        return ticket

    def leave(self, ticket: TimingTicket) -> None:
        self._release(ticket)
        with self._lock:
            ticket._resume()
            if ticket in self._members:
                self._members.remove(ticket)

    def _acquire(self, ticket: TimingTicket) -> None:
        waited = time.monotonic()
        self._slot.acquire()
        with self._lock:
            ticket.paused_s += time.monotonic() - waited  # waiting for the slot is not the candidate's time
            self._holder = ticket
            ticket.holding = True
            ticket.slots.append((time.monotonic(), None))
            for other in self._members:
                if other is not ticket:
                    other._pause()
        self._start_window(ticket)

    def _start_window(self, ticket: TimingTicket) -> None:
        ticket._window = HostLoadWindow()
        ticket._window.start(ticket.pids)
        if not ticket.timed_on_cpu:
            ticket._clock = ClockWatch(self.device)

    def _release(self, ticket: TimingTicket) -> None:
        if ticket._clock is not None:  # a worker that died while timing: stop watching
            ticket._clock.stop()
            ticket._clock = None
        with self._lock:
            if not ticket.holding:
                return
            ticket.holding = False
            self._holder = None
            if ticket.slots:
                ticket.slots[-1] = (ticket.slots[-1][0], time.monotonic())
            for other in self._members:
                if other is not ticket:
                    other._resume()
        self._slot.release()

    def _report(self, ticket: TimingTicket, report: dict[str, Any]) -> bool:
        if report.get("release_only"):  # a worker that gives the slot back without a verdict
            held = ticket.holding
            self._release(ticket)
            # nothing was timed in it: the slot does not count towards the
            # time a reported timing may add up to (trusted/slot_cross_check.py)
            if held and ticket.slots:
                ticket.slots.pop()
            return False
        # the finalists' re-timing reports several comparisons, each its own
        # attempts: "reference" (the reference alone) and "finalist <i>"
        comparison = report.get("comparison")
        comparison = str(comparison) if comparison is not None else None
        # a task's timing shapes (TaskConfig.timing_shapes) are timed one by
        # one, each in its own slot, each against its own reference baseline
        shape = report.get("shape")
        shape = str(shape)[:200] if shape is not None else None
        key = f"{ticket.key}#{shape}" if shape is not None and ticket.key else ticket.key
        window = ticket._window.stop() if ticket._window is not None else {}
        clock = ticket._clock.stop() if ticket._clock is not None else []
        ticket._clock = None
        attempt: dict[str, Any] = {k: report.get(k) for k in ("speedup", "ref_ms", "cand_ms", "threads")}
        if comparison is not None:
            attempt["comparison"] = comparison
        if shape is not None:
            attempt["shape"] = shape
        reasons: list[str] = []
        if window:
            self._judge_host(ticket, report, window, attempt, reasons)
        if not ticket.timed_on_cpu:
            self._judge_gpu(clock, attempt, reasons)
        self._judge_reference(ticket, report.get("ref_ms"), comparison, shape, key, attempt, reasons)
        attempt["reasons"] = reasons
        ticket.attempts.append(attempt)
        return self._settle(ticket, report.get("ref_ms"), comparison, shape, key, reasons)

    def _judge_host(
        self,
        ticket: TimingTicket,
        report: dict[str, Any],
        window: dict[str, Any],
        attempt: dict[str, Any],
        reasons: list[str],
    ) -> None:
        """The host's load while the timing ran, less the worker's own."""
        own = float(report.get("cpu_s") or 0.0) / max(float(report.get("wall_s") or 0.0), 1e-9)
        others = max(0.0, window["busy_cores"] - own)
        attempt.update(
            host_busy_cores=window["busy_cores"],
            own_cores=round(own, 3),
            other_cores=round(others, 3),
            cores=window["cores"],
        )
        if "other_cores" in window:
            # the same with the worker's use as the parent measured it (its
            # report's cpu_s is its word): what the audit check trusts
            attempt["other_cores_measured"] = window["other_cores"]
        threads = int(report.get("threads") or 1)
        if ticket.timed_on_cpu and busy_host(others, window["cores"], self.policy, threads):
            reasons.append(
                f"host busy: {others:.2f} of {window['cores']:g} cores used by other work "
                f"while the timing needed {threads}"
            )

    def _judge_gpu(self, clock: list, attempt: dict[str, Any], reasons: list[str]) -> None:
        """Other processes on the GPU, and its clock while the timing ran."""
        with self._lock:  # the device's other workers hold contexts too: they are ours
            own = set().union(*(m.pids for m in self._members))
        foreign = foreign_gpu_processes(self.device, own)
        if foreign is not None:
            attempt["foreign_gpu_processes"] = len(foreign)
            if foreign:
                reasons.append(f"{len(foreign)} other process(es) on the GPU (pids {', '.join(map(str, foreign[:5]))})")
        if clock:
            with self._lock:
                self.max_sm_clock = max(self.max_sm_clock, max(clock))
                device_max = self.max_sm_clock
            attempt.update(
                sm_clock_mhz={
                    "min": min(clock),
                    "median": int(statistics.median(clock)),
                    "max": max(clock),
                    "samples": len(clock),
                    "device_max": device_max,
                }
            )
            throttled = clock_verdict(clock, device_max, self.policy.clock_drop_tolerance, self.policy.clock_low_share)
            if throttled:
                reasons.append(throttled)

    def _judge_reference(
        self,
        ticket: TimingTicket,
        ref_ms: Any,
        comparison: Optional[str],
        shape: Optional[str],
        key: Optional[str],
        attempt: dict[str, Any],
        reasons: list[str],
    ) -> None:
        """The paired reference's time against what it should be: a
        finalist's against the reference alone (same worker, same inputs,
        moments earlier), a step's against the task's running baseline."""
        alone = ticket.reference_alone_ms.get(shape) if comparison not in (None, "reference") else None
        against = alone if alone is not None else (self.baselines.get(key, self.device) if key else None)
        if against is None or not isinstance(ref_ms, (int, float)) or not ref_ms > 0:
            return
        ratio = float(ref_ms) / against
        attempt.update(
            {
                "reference_alone_ms" if alone is not None else "reference_baseline_ms": round(against, 6),
                "reference_ratio": round(ratio, 4),
            }
        )
        tol = (
            self.policy.gpu_drift_tolerance
            if not ticket.timed_on_cpu
            else self.policy.side_effect_tolerance
            if alone is not None
            else self.policy.drift_tolerance
        )
        if alone is not None and not 1 / (1 + tol) <= ratio <= 1 + tol:
            reasons.append(
                f"{SIDE_EFFECT}: {ref_ms:.4g} ms paired with {comparison}, "
                f"{alone:.4g} ms alone before any finalist was loaded ({ratio:.2f}x): a side effect "
                "of the program (threads it left, spinning, caches) or the machine changed"
            )
        elif not 1 / (1 + tol) <= ratio <= 1 + tol:
            reasons.append(
                f"reference drifted: {ref_ms:.4g} ms against a running baseline of {against:.4g} ms ({ratio:.2f}x)"
            )
            if len(reasons) == 1 and key:
                # drift alone: if the machine has moved for good, the
                # baseline follows after a few agreeing results
                self.baselines.note_drift(key, self.device, float(ref_ms), tol)

    def _settle(
        self,
        ticket: TimingTicket,
        ref_ms: Any,
        comparison: Optional[str],
        shape: Optional[str],
        key: Optional[str],
        reasons: list[str],
    ) -> bool:
        """The attempt's verdict: reliable (the slot freed, the baselines
        fed), or time again (True) while retries remain."""
        if not reasons:
            # an earlier timing shape that stayed unreliable keeps the result so
            ticket.reliable, ticket.reasons = not ticket.shape_reasons, list(ticket.shape_reasons)
            if comparison in (None, "reference") and key and isinstance(ref_ms, (int, float)) and ref_ms > 0:
                self.baselines.add(key, self.device, float(ref_ms))
            if comparison == "reference" and isinstance(ref_ms, (int, float)) and ref_ms > 0:
                ticket.reference_alone_ms[shape] = float(ref_ms)
            self._release(ticket)
            return False
        ticket.reliable, ticket.reasons = False, list(ticket.shape_reasons) + reasons
        tries = sum(1 for a in ticket.attempts if a.get("comparison") == comparison and a.get("shape") == shape)
        # a reference that moved with the program, the machine quiet: the
        # program's side effect, which the same pairing shows again (five
        # fused finalists: 2.3-2.9x in each of three attempts): no re-timing
        side_effect = all(r.startswith(SIDE_EFFECT) for r in reasons)
        if tries > self.policy.max_retimes or side_effect:
            if shape is not None:  # the next shape's timing does not make this one reliable
                ticket.shape_reasons += [f"timing shape {shape}: {r}" for r in reasons]
                ticket.reasons = list(ticket.shape_reasons)
            self._release(ticket)
            return False
        time.sleep(self.policy.retime_backoff_s * tries)
        self._start_window(ticket)
        return True


class ReferenceBaselines:
    """Running baseline of the reference's median per (task, device): the
    median of the last ``keep`` accepted timings."""

    def __init__(self, keep: int = 21, min_values: int = 3) -> None:
        self.keep = keep
        self.min_values = min_values
        self._values: dict[tuple[str, Optional[str]], list[float]] = {}
        self._drifted: dict[tuple[str, Optional[str]], list[float]] = {}
        self._lock = threading.Lock()

    def add(self, key: str, device: Optional[str], ref_ms: float) -> None:
        with self._lock:
            values = self._values.setdefault((key, device), [])
            values.append(ref_ms)
            del values[: -self.keep]
            self._drifted.pop((key, device), None)

    def note_drift(self, key: str, device: Optional[str], ref_ms: float, tolerance: float) -> bool:
        """A reference median judged drifting, with nothing else wrong. When
        the last ``min_values`` such medians in a row (no accepted timing in
        between) agree with each other within ``tolerance``, the machine has
        moved for good (another clock, a new neighbour that stays): they
        become the baseline, so later timings are judged against the machine
        as it is now and are not all marked unreliable. Returns whether the
        baseline was replaced."""
        with self._lock:
            drifted = self._drifted.setdefault((key, device), [])
            drifted.append(ref_ms)
            del drifted[: -self.min_values]
            if len(drifted) < self.min_values or max(drifted) > min(drifted) * (1 + tolerance):
                return False
            self._values[(key, device)] = list(drifted)
            self._drifted.pop((key, device), None)
            return True

    def get(self, key: str, device: Optional[str]) -> Optional[float]:
        with self._lock:
            values = self._values.get((key, device), [])
            return statistics.median(values) if len(values) >= self.min_values else None


__all__ = [
    "SIDE_EFFECT",
    "ClockWatch",
    "DeviceGate",
    "clock_verdict",
    "HostLoadWindow",
    "ReferenceBaselines",
    "TimingPolicy",
    "TimingTicket",
    "foreign_gpu_processes",
    "host_cpu_count",
]

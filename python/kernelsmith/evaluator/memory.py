"""Device memory as a scheduled resource, and memory faults attributed.

On one H100 the harness's own memory (a referee that kept its models and its
allocator's cache, four workers each holding many input-sized copies) made
26 of 50 KernelBench problems at upstream sizes fail "out of memory", each
charged to the candidate. This module is the parent's side of the fix:

* :class:`Footprint`: what a task's reference needs on the device
  (parameters, the largest input set, the largest outputs, the reference's
  peak during forward), measured once per task by the trusted referee when it
  primes the task (referee_process.prime) and kept with the referee's priming;
* :class:`MemoryAdmission`: one per device; a worker is admitted while the
  footprints of the admitted ones (each with the candidate's allowance) fit
  the device's free memory; a task that does not fit next to others, or whose
  footprint is unknown, runs alone. The free memory comes from a
  :class:`DeviceMemory` source (nvidia-smi for a GPU, /proc/meminfo for the
  host), injectable for tests; the parent never initialises CUDA;
* :func:`attribute_memory_fault`: an out-of-memory is the candidate's
  (``oom``, charged) only when its own allocations exceed the reference's
  measured peak times the task's ``memory_margin``, or when it ran out while it
  had the device to itself with its footprint free; otherwise it is the
  harness's (``harness``, never charged, the footprints in the message), and
  the evaluator retries it once alone before it reports it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

from .tracebacks import is_out_of_memory  # noqa: F401 - the one test, re-exported

GiB = 1 << 30
MiB = 1 << 20

#: the candidate's allowance never goes below this (a workspace, an
#: autotuner's scratch buffer): an OOM under it is never the candidate's alone
MIN_ALLOWANCE_BYTES = 512 * MiB

#: copies of each kind a worker holds at once (trials.py, worker_timing.py): inputs, at
#: most six, in the timing (TimingConfig.input_sets, 3 by default, for the
#: program and the reference's own copy of each: checks/timed_inputs.own_copies; the
#: refill checks after it hold four: the set they refill, its old values,
#: fresh ones, the reference's clone); outputs, at most five, in
#: a trial (before, expected, after, and a snapshot's or a trivial form's
#: transient copies)
WORKER_INPUT_COPIES = 6
WORKER_OUTPUT_COPIES = 5

#: a CUDA context per worker process (0.6 GiB per zygote child on the H100):
#: a spare started while others run is not in the idle reading
CONTEXT_BYTES = 768 * MiB


@dataclass
class Footprint:
    """A task's reference on its device, in bytes, measured by the referee."""

    #: parameters and buffers of the reference model
    params_bytes: int = 0
    #: the largest input set (tensors only)
    inputs_bytes: int = 0
    #: the largest set of outputs
    outputs_bytes: int = 0
    #: the reference forward's peak above what was allocated before the call
    #: (its outputs included); on the host: the outputs' size
    peak_bytes: int = 0
    #: "allocator" (torch.cuda.max_memory_allocated) or "sizes" (tensor sizes)
    measured: str = "sizes"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Optional["Footprint"]:
        if not isinstance(data, dict):
            return None
        names = {f.name for f in dataclasses.fields(cls)}
        try:
            return cls(**{k: (str(v) if k == "measured" else max(0, int(v))) for k, v in data.items() if k in names})
        except (TypeError, ValueError):
            return None

    def allowance(self, margin: float) -> int:
        """What the candidate's own calls may allocate before an
        out-of-memory is its fault: ``margin`` times the reference's peak."""
        return max(MIN_ALLOWANCE_BYTES, int(margin * self.peak_bytes))

    def harness_bytes(self) -> int:
        """What the harness itself holds at most in a worker: both models'
        parameters, its input and output copies, the reference's transient
        memory during forward."""
        transient = max(0, self.peak_bytes - self.outputs_bytes)
        return (
            2 * self.params_bytes
            + WORKER_INPUT_COPIES * self.inputs_bytes
            + WORKER_OUTPUT_COPIES * self.outputs_bytes
            + transient
        )

    def worker_bytes(self, margin: float) -> int:
        """A worker's need: the harness's memory plus the candidate's allowance."""
        return self.harness_bytes() + self.allowance(margin)

    def describe(self, margin: Optional[float] = None) -> str:
        text = (
            f"reference footprint: parameters {fmt_bytes(self.params_bytes)}, inputs "
            f"{fmt_bytes(self.inputs_bytes)}, outputs {fmt_bytes(self.outputs_bytes)}, peak during forward "
            f"{fmt_bytes(self.peak_bytes)} ({self.measured})"
        )
        if margin is not None:
            text += (
                f"; a worker needs {fmt_bytes(self.worker_bytes(margin))} (the harness's "
                f"{fmt_bytes(self.harness_bytes())} + the candidate's allowance {fmt_bytes(self.allowance(margin))}"
                f" = memory_margin {margin:g} x the peak)"
            )
        return text


def fmt_bytes(n: Optional[float]) -> str:
    if n is None:
        return "unknown"
    n = float(n)
    if abs(n) >= GiB:
        return f"{n / GiB:.2f} GiB"
    if abs(n) >= MiB:
        return f"{n / MiB:.1f} MiB"
    if abs(n) >= 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{int(n)} B"


def tensor_bytes(values: Any) -> int:
    """Bytes of the tensors among ``values`` (a list, a tensor, nested lists)."""
    import torch

    if isinstance(values, torch.Tensor):
        return values.numel() * values.element_size()
    if isinstance(values, (list, tuple)):
        return sum(tensor_bytes(v) for v in values)
    return 0


def model_bytes(model: Any) -> int:
    return sum(tensor_bytes(t) for t in list(model.parameters()) + list(model.buffers()))


# -- worker side -----------------------------------------------------------------------


def _proc_bytes(path: str, key: str) -> Optional[int]:
    """A ``key:  n kB`` line of a /proc file, in bytes."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _address_space_bytes() -> Optional[int]:
    """This process's address space (VmSize), what RLIMIT_AS limits."""
    return _proc_bytes("/proc/self/status", "VmSize")


class CallMeter:
    """Worker side: the device memory around the program's calls (CUDA's
    caching allocator statistics; on the host, where the device's memory is
    the worker's address space under RLIMIT_AS, its growth since the job
    started and what an error message says was asked for). ``start``/``stop``
    bracket each call; ``facts`` describes an out-of-memory for the parent;
    ``summary`` is the worker's peak, reported with every result."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.process_peak = 0
        self._before: Optional[int] = None
        self._host_start = None if cuda else _address_space_bytes()

    def _torch(self) -> Any:
        import torch

        return torch

    def start(self) -> None:
        if not self.cuda:
            return
        cuda = self._torch().cuda
        # the peak is reset per call (the call's own demand); the process's
        # peak so far is kept here
        self.process_peak = max(self.process_peak, cuda.max_memory_allocated())
        cuda.reset_peak_memory_stats()
        self._before = cuda.memory_allocated()

    def stop(self) -> None:
        if not self.cuda:
            return
        try:
            self.process_peak = max(self.process_peak, self._torch().cuda.max_memory_allocated())
        except Exception:  # noqa: BLE001 - a context the program broke: its verdict, not this reading, counts
            pass

    def facts(self, exc: BaseException, fault: str, where: str, metered: bool = True) -> dict[str, Any]:
        """``metered``: the fault came from a call bracketed by start/stop
        (not from a timed call, whose peak the reference's calls share:
        only the failed request counts there)."""
        tried = tried_bytes(str(exc))
        facts: dict[str, Any] = {"fault": fault, "where": where[:300], "tried_bytes": tried}
        if fault == "candidate":
            facts["candidate_bytes"] = tried
        if not self.cuda:
            now = _address_space_bytes()
            if now is not None and self._host_start is not None:
                facts["held_bytes"] = max(0, now - self._host_start)
            return facts
        cuda = self._torch().cuda
        try:
            held, peak = cuda.memory_allocated(), cuda.max_memory_allocated()
            facts["held_bytes"] = held
            if fault == "candidate" and metered and self._before is not None:
                # what the call had allocated plus what it failed to get
                facts["candidate_bytes"] = max(peak - self._before, held - self._before + (tried or 0))
            facts["device_free_bytes"], facts["device_total_bytes"] = cuda.mem_get_info()
        except Exception:  # noqa: BLE001 - a broken context says no more
            pass
        return facts

    def summary(self) -> dict[str, Any]:
        if not self.cuda:
            return {}
        self.stop()
        return {"peak_bytes": self.process_peak}


# -- free memory sources (parent side: never a CUDA context) -----------------------


class DeviceMemory:
    """Where the admission reads a device's free memory. ``free_bytes()``
    returns None when it cannot tell (no limit is applied then)."""

    def free_bytes(self) -> Optional[int]:
        raise NotImplementedError


class StandInMemory(DeviceMemory):
    """A device of ``total`` bytes (tests; a share of a card by hand), less
    what ``held`` says is taken by others."""

    def __init__(self, total: int, held: Callable[[], int] = lambda: 0) -> None:
        self.total = int(total)
        self.held = held

    def free_bytes(self) -> Optional[int]:
        return max(0, self.total - int(self.held()))


class NvidiaSmiMemory(DeviceMemory):
    """A GPU's free memory from ``nvidia-smi`` (no CUDA context here)."""

    def __init__(self, device: str, timeout_s: float = 10.0) -> None:
        self.device = str(device)
        self.timeout_s = timeout_s

    def free_bytes(self) -> Optional[int]:
        exe = shutil.which("nvidia-smi")
        if exe is None or self.device.startswith("MIG-"):
            return None  # a MIG instance's memory is not queried this way
        try:
            text = subprocess.run(
                [exe, "--query-gpu=memory.free", "--format=csv,noheader,nounits", "-i", self.device],
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                check=True,
            ).stdout
            return int(float(text.strip().splitlines()[0])) * MiB
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            return None


class HostMemory(DeviceMemory):
    """The host's available memory (a CPU device's memory is the host's)."""

    def free_bytes(self) -> Optional[int]:
        return _proc_bytes("/proc/meminfo", "MemAvailable")


def default_memory_source(device: Optional[str]) -> DeviceMemory:
    """nvidia-smi for a GPU the evaluator pins workers to, the host's memory
    for CPU workers."""
    return HostMemory() if device is None else NvidiaSmiMemory(device)


# -- admission -------------------------------------------------------------------------


@dataclass
class Grant:
    """One admission: what it reserved, whether it had the device alone."""

    need: Optional[int]
    alone: bool
    waited_s: float = 0.0
    free_bytes: Optional[int] = None  # the device's free memory the admission counted on

    def to_dict(self) -> dict[str, Any]:
        return {
            "need_bytes": self.need,
            "alone": self.alone,
            "waited_s": round(self.waited_s, 4),
            "device_free_bytes": self.free_bytes,
        }


class MemoryAdmission:
    """Admits workers on one device while their needs fit its free memory.

    The free memory is read when none of this evaluator's workers is admitted
    (the device's baseline: the referee, the spares' contexts and anything
    foreign are in it) and ``reserve_bytes`` is kept back for contexts
    started later. A job is admitted when its need fits next to the admitted
    ones; a job whose need is unknown or larger than the device, or that asks
    for it (a retry), runs alone: it waits until the admitted ones leave, and
    nothing else is admitted while it waits or runs. ``per_job_bytes`` is
    added to every need (a device context per worker). ``log`` records
    every grant (need, alone) for tests and the benchmark."""

    def __init__(self, source: Optional[DeviceMemory], reserve_bytes: int = GiB, per_job_bytes: int = 0) -> None:
        self.source = source
        self.reserve_bytes = int(reserve_bytes)
        self.per_job_bytes = int(per_job_bytes)
        self._cond = threading.Condition()
        self._in_use = 0
        self._admitted = 0
        self._alone = False
        self._alone_waiting = 0
        self._capacity: Optional[int] = None
        self._free: Optional[int] = None
        self.log: list[Grant] = []
        #: the most jobs admitted at once so far
        self.max_concurrent = 0

    def _read_capacity(self) -> None:
        free = self.source.free_bytes() if self.source is not None else None
        self._free = free
        self._capacity = None if free is None else max(0, free - self.reserve_bytes)

    def _fits(self, need: int) -> bool:
        return self._capacity is None or self._in_use + need <= self._capacity

    @contextlib.contextmanager
    def admit(self, need: Optional[int], alone: bool = False) -> Iterator[Grant]:
        started = time.monotonic()
        need = None if need is None else need + self.per_job_bytes
        with self._cond:
            if self._admitted == 0:
                self._read_capacity()
            if self._capacity is None and not alone and need is not None:
                grant = Grant(need, False)  # no reading: nothing to schedule by
            else:
                if not alone and (need is None or (self._capacity is not None and need > self._capacity)):
                    alone = True  # unknown, or more than the device has: by itself
                if alone:
                    self._alone_waiting += 1
                    try:
                        self._cond.wait_for(lambda: self._admitted == 0)
                    finally:
                        self._alone_waiting -= 1
                    self._read_capacity()  # the device without our workers: the best reading there is
                    self._alone = True
                else:
                    self._cond.wait_for(lambda: not self._alone and not self._alone_waiting and self._fits(need))
                grant = Grant(need, alone)
            grant.free_bytes = self._free
            grant.waited_s = time.monotonic() - started
            self._admitted += 1
            self._in_use += 0 if grant.alone else int(grant.need or 0)
            self.max_concurrent = max(self.max_concurrent, self._admitted)
            self.log.append(grant)
        try:
            yield grant
        finally:
            with self._cond:
                self._admitted -= 1
                self._in_use -= 0 if grant.alone else int(grant.need or 0)
                if grant.alone:
                    self._alone = False
                self._cond.notify_all()


# -- attribution -------------------------------------------------------------------------

_TRIED = re.compile(r"tried to allocate\s+([0-9.]+)\s*(bytes|b|kib|mib|gib|tib|kb|mb|gb|tb)?", re.IGNORECASE)
_UNITS = {
    "": 1,
    "b": 1,
    "bytes": 1,
    "kib": 1 << 10,
    "kb": 1 << 10,
    "mib": MiB,
    "mb": MiB,
    "gib": GiB,
    "gb": GiB,
    "tib": 1 << 40,
    "tb": 1 << 40,
}


def tried_bytes(message: str) -> Optional[int]:
    """The size an out-of-memory error says was asked for (PyTorch's CUDA
    "Tried to allocate 6.00 GiB", its CPU allocator's "you tried to allocate
    1099511627776 bytes")."""
    match = _TRIED.search(message or "")
    if not match:
        return None
    return int(float(match.group(1)) * _UNITS[(match.group(2) or "").lower()])


@dataclass
class Attribution:
    """The parent's decision on a memory fault."""

    #: "oom" (the candidate's, charged), "harness" (not charged) or "" (no memory fault)
    category: str
    #: run it again alone before reporting
    retry_alone: bool = False
    reason: str = ""


def attribute_memory_fault(
    facts: Any, footprint: Optional[Footprint], margin: float, grant: Optional[Grant]
) -> Attribution:
    """Who ran the device out of memory, from what the worker saw at the
    fault (``facts``: result.memory: ``fault`` "candidate" or "harness",
    ``candidate_bytes`` the failing call's own demand, ``held_bytes`` what the
    worker process had allocated, ``where``), the task's footprint and the
    admission the run had (``grant``):

    * in the candidate's call, asking for more than ``margin`` x the
      reference's peak: the candidate's;
    * in the candidate's call, with the device to itself and the worker's
      whole need free when it started: the candidate's, whatever it says it
      asked for;
    * in the harness's code (inputs, the reference, a comparison) while the
      worker held more than the harness's own memory plus the allowance: the
      candidate's (it kept memory that the harness then lacked);
    * otherwise the harness's: on a shared device retried alone, alone
      reported as ``harness`` (the task does not fit the device).
    """
    if not isinstance(facts, dict) or facts.get("fault") not in ("candidate", "harness"):
        return Attribution("")
    alone = grant is not None and grant.alone
    room = (
        alone
        and grant.free_bytes is not None
        and grant.need is not None  # type: ignore[union-attr]
        and grant.free_bytes >= grant.need
    )  # type: ignore[union-attr]
    free_text = f"; the device had {fmt_bytes(grant.free_bytes)} free when it started" if alone else ""  # type: ignore[union-attr]
    allowance = footprint.allowance(margin) if footprint is not None else None
    fp_text = (footprint.describe(margin) if footprint is not None else "reference footprint: not measured") + free_text
    where = str(facts.get("where", ""))[:200]
    if facts["fault"] == "candidate":
        return _candidate_fault(facts, footprint, margin, grant, allowance, bool(room), fp_text)
    return _harness_fault(facts, footprint, allowance, alone, fp_text, where)


def _candidate_fault(
    facts: dict,
    footprint: Optional[Footprint],
    margin: float,
    grant: Optional[Grant],
    allowance: Optional[int],
    room: bool,
    fp_text: str,
) -> Attribution:
    """attribute_memory_fault for a fault in the candidate's own call."""
    alone = grant is not None and grant.alone
    demand = _int(facts.get("candidate_bytes"))
    if allowance is not None and demand is not None and demand > allowance:
        return Attribution(
            "oom",
            reason=(
                f"the program's own allocations in one call reached {fmt_bytes(demand)}, more than its allowance of "
                f"{fmt_bytes(allowance)} (memory_margin {margin:g} x the reference's peak of "
                f"{fmt_bytes(footprint.peak_bytes)}); use less device memory"
            ),
        )  # type: ignore[union-attr]
    if room:
        return Attribution(
            "oom",
            reason=(
                "the program ran out of device memory while it had the device to itself with the task's needs "
                f"free ({fp_text}): its own allocations exhausted it; use less device memory"
            ),
        )
    setting = (
        "on a shared device"
        if not alone
        else "alone on a device too small for the task"
        if grant.free_bytes is not None
        else "alone on a device whose free memory is unknown"
    )  # type: ignore[union-attr]
    return Attribution(
        "harness",
        retry_alone=not alone,
        reason=(
            f"the program ran out of device memory asking for {fmt_bytes(demand)}, within its allowance, "
            f"{setting} ({fp_text})"
        ),
    )


def _harness_fault(
    facts: dict, footprint: Optional[Footprint], allowance: Optional[int], alone: bool, fp_text: str, where: str
) -> Attribution:
    """attribute_memory_fault for a fault in the harness's code."""
    held = _int(facts.get("held_bytes"))
    if footprint is not None and held is not None and held > footprint.harness_bytes() + allowance:  # type: ignore[operator]
        return Attribution(
            "oom",
            reason=(
                f"the harness ran out of device memory ({where}) while the worker held {fmt_bytes(held)}, more than "
                f"the harness's own {fmt_bytes(footprint.harness_bytes())} plus the program's allowance of "
                f"{fmt_bytes(allowance)}: the program kept the memory"
            ),
        )
    if alone:
        return Attribution(
            "harness",
            reason=(
                f"the harness ran out of device memory ({where}) with the device to itself: the task does not fit "
                f"this device ({fp_text})"
            ),
        )
    return Attribution(
        "harness",
        retry_alone=True,
        reason=(f"the harness ran out of device memory ({where}) on a shared device ({fp_text})"),
    )


def _int(value: Any) -> Optional[int]:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def apply_attribution(result: Any, decision: Attribution, grant: Grant, retried: bool) -> None:
    """Rewrite ``result`` (an EvalResult) as ``decision`` says and record the
    admission and the decision in ``result.memory``."""
    memory = dict(result.memory) if isinstance(result.memory, dict) else {}
    memory["admission"] = grant.to_dict()
    if retried:
        memory["retried_alone"] = True
    if decision.category:
        memory["attributed"] = decision.category
        memory["reason"] = decision.reason
        # feedback heads an oom with OUT OF MEMORY; a harness fault says whose it is
        head = (
            ""
            if decision.category == "oom"
            else "Out of device memory, not the program's fault (nothing was charged): "
        )
        retry = " It was run again alone on the device and ran out again." if retried else ""
        result.error = f"{head}{decision.reason}.{retry}\n{result.error}".strip()
        result.category = decision.category
        result.correct = False
        if decision.category == "harness":
            result.hacked = False
    result.memory = memory


def run_admitted(
    admission: MemoryAdmission,
    footprint: Callable[[], Optional[Footprint]],
    known: bool,
    margin: float,
    run: Callable[[], Any],
) -> Any:
    """One evaluation under the device's memory admission, the one place
    every way of evaluating goes through (Evaluator._evaluate: pool, fresh,
    serve, the RL environment, Ray's node): the task's footprint (measured
    alone by the referee when not ``known`` yet), ``run()`` admitted by it,
    a memory fault attributed, a harness fault run once more alone. Returns
    ``run()``'s EvalResult with ``result.memory`` filled in."""
    if known:
        fp = footprint()
    else:
        with admission.admit(None):  # the reference's needs are unknown until measured: by itself
            fp = footprint()
    need = fp.worker_bytes(margin) if fp is not None else None
    with admission.admit(need) as grant:
        result = run()
    decision = attribute_memory_fault(getattr(result, "memory", None), fp, margin, grant)
    first = None
    if decision.retry_alone:
        first = decision.reason
        with admission.admit(need, alone=True) as grant:
            result = run()
        decision = attribute_memory_fault(getattr(result, "memory", None), fp, margin, grant)
    apply_attribution(result, decision, grant, retried=first is not None)
    if first is not None:
        result.memory["first_attempt"] = first
    if fp is not None:
        result.memory["footprint"] = fp.to_dict()
        result.memory["memory_margin"] = margin
    return result


def summary_line(memory: Any) -> str:
    """``result.memory`` in one line (``kernelsmith eval``): the footprint,
    the worker's need and admission, the worker's peak, a retry."""
    if not isinstance(memory, dict) or not memory:
        return ""
    parts = []
    fp = Footprint.from_dict(memory.get("footprint"))
    if fp is not None:
        parts.append(
            f"reference params {fmt_bytes(fp.params_bytes)}, inputs {fmt_bytes(fp.inputs_bytes)}, outputs "
            f"{fmt_bytes(fp.outputs_bytes)}, peak {fmt_bytes(fp.peak_bytes)}"
        )
    grant = memory.get("admission") if isinstance(memory.get("admission"), dict) else {}
    if grant:
        parts.append(
            f"worker need {fmt_bytes(grant.get('need_bytes'))} "
            f"({'alone' if grant.get('alone') else 'shared'}, device free {fmt_bytes(grant.get('device_free_bytes'))})"
        )
    if memory.get("peak_bytes") is not None:
        parts.append(f"worker peak {fmt_bytes(memory['peak_bytes'])}")
    if memory.get("retried_alone"):
        parts.append("run again alone after a harness memory fault")
    return "; ".join(parts)


# -- per-process device memory (for benchmarks) -------------------------------------------


def compute_apps(text: Optional[str] = None) -> dict[int, int]:
    """Device memory per process (pid -> bytes) from
    ``nvidia-smi --query-compute-apps=pid,used_memory`` (``text`` replaces
    the command's output in tests); {} without nvidia-smi."""
    if text is None:
        exe = shutil.which("nvidia-smi")
        if exe is None:
            return {}
        try:
            text = subprocess.run(
                [exe, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return {}
    used: dict[int, int] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit():
            try:
                used[int(parts[0])] = used.get(int(parts[0]), 0) + int(float(parts[1])) * MiB
            except ValueError:
                continue
    return used


def _cmdline(pid: int) -> Optional[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def process_role(pid: int) -> str:
    """What a kernelsmith process is, from its command line: referee, zygote,
    zygote child (a pool worker: forked, so it shares the zygote's command
    line, told apart by its parent), worker (fresh mode), cache_builder,
    other; gone once it has exited."""
    cmd = _cmdline(pid)
    if cmd is None:
        return "gone"
    for role in ("referee", "zygote", "worker", "cache_builder"):
        if f"kernelsmith.evaluator.{role}" in cmd:
            if role == "zygote" and "kernelsmith.evaluator.zygote" in (_cmdline(_parent(pid)) or ""):
                return "zygote child"
            return role
    return "other"


class ProcessMemorySampler:
    """Samples every process's device memory (``compute_apps``) every
    ``period_s`` in a thread and keeps each pid's peak: the per-process peak
    memory of an evaluation, for the benchmark. ``peaks()``: pid -> (role,
    peak bytes)."""

    def __init__(self, period_s: float = 0.2, read: Callable[[], dict[int, int]] = compute_apps) -> None:
        self.period_s = period_s
        self.read = read
        self._peaks: dict[int, tuple[str, int]] = {}
        #: the largest sum over all processes in one reading
        self.peak_total = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def sample(self) -> None:
        reading = self.read()
        self.peak_total = max(self.peak_total, sum(reading.values()))
        for pid, used in reading.items():
            role, peak = self._peaks.get(pid, (process_role(pid), 0))
            self._peaks[pid] = (role, max(peak, used))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.period_s)

    def __enter__(self) -> "ProcessMemorySampler":
        self._thread = threading.Thread(target=self._run, daemon=True, name="ks-memory-sampler")
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    def peaks(self) -> dict[int, tuple[str, int]]:
        return dict(self._peaks)


__all__ = [
    "Attribution",
    "CallMeter",
    "DeviceMemory",
    "Footprint",
    "Grant",
    "HostMemory",
    "MemoryAdmission",
    "NvidiaSmiMemory",
    "ProcessMemorySampler",
    "StandInMemory",
    "apply_attribution",
    "attribute_memory_fault",
    "compute_apps",
    "default_memory_source",
    "fmt_bytes",
    "run_admitted",
    "is_out_of_memory",
    "process_role",
    "summary_line",
    "tried_bytes",
]

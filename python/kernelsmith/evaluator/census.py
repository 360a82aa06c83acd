"""Kernel census: which work did one ``forward`` call, attributed.

The torch-op guard (guards.py) sees the aten ops that pass through Python's
dispatch mode; a candidate can step around it (leave the mode, enter the
backend's internal section, call a library that is not torch). The census is
a second, independent witness, taken during the correctness trials:

* **The profiler** (``torch.profiler``; CPU ops everywhere, plus CUDA kernels
  and copies with their streams through CUPTI on NVIDIA) records every aten
  op at the dispatcher's RecordFunction level, which no Python mode can
  skip, and every device kernel. Each launch of the candidate's own kernels
  runs inside a ``ks::kernel::<name>`` range (``backends.base.census_launch``);
  whatever happens inside it is the kernel's (the Triton interpreter's
  copies, the driver's launch), anything outside is housekeeping (the
  allocation, view and copy ops every task allows) or **foreign**: a
  compute op, a kernel launched by a vendor library or by a JIT
  (torch.compile, TorchScript), a region of compiled code.
* **Output provenance.** Every output must live in memory the candidate's
  kernels were given (or a copy an allowed op made of it); on host memory
  (CPU, PoCL) its bytes must still be those the last kernel left, so an
  output written by NumPy, by Python or by a library after a decoy launch
  is caught whatever the call path.
* **Host reads.** A device-to-host copy of data in ``forward`` (on a GPU) is
  the work done on the host.

``strict`` (the default policy) rejects foreign work and outputs not
written by the candidate's kernels; ``partial`` allows foreign work and
reports the **coverage**: the share of the call's time spent in the
candidate's own kernels (device time on a GPU, host time on a CPU), which
must reach the task's ``min_coverage``.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

from ..backends.base import _Census, _spans, crc_of
from .guards import normalize_op
from .policy import Policy

KERNEL_RANGE = "ks::kernel::"
#: profiler ranges of compiled code run in forward (torch.compile/inductor,
#: AOT autograd, TorchScript): their own time is foreign work
JIT_MARKERS = (
    "Torch-Compiled Region",
    "CompiledFxGraph",
    "CompiledFunction",
    "TorchDynamo",
    "## Call CompiledFxGraph",
    "inductor",
    "TorchScript",
)
#: CUDA runtime/driver calls: the launching side, judged by their kernels
_RUNTIME_PREFIXES = ("cuda", "cu", "nccl", "Runtime")
#: a scalar read (``.item()``) is allowed; bulk copies to the host are not
_SCALAR_READ_OPS = frozenset({"_local_scalar_dense", "item"})

POLICIES = ("strict", "partial")

#: PyTorch's own kernels of the housekeeping ops, by a part of their name,
#: with the aten ops that launch them: on the H200 the profiler linked no
#: kernel of a candidate's forward to its op (``torch.zeros_like``'s
#: ``FillFunctor`` kernel was "launched outside any torch op"), so an
#: unlinked kernel of one of these kinds is housekeeping when as many of the
#: ops ran on the host in that call (and the ops are allowed)
_HOUSEKEEPING_KERNELS = (
    ("FillFunctor", ("fill_", "zero_")),
    ("copy_kernel", ("copy_", "_to_copy", "_copy_from", "clone", "contiguous")),
)


@dataclass
class CallCensus:
    """The attributed work of one call. Times in microseconds."""

    own: dict[str, float] = field(default_factory=dict)
    housekeeping: dict[str, float] = field(default_factory=dict)
    foreign: dict[str, float] = field(default_factory=dict)
    host_reads: list[str] = field(default_factory=list)
    other_streams: list[str] = field(default_factory=list)
    #: ranges named like the harness's kernel range that the harness did not open
    forged_ranges: list[str] = field(default_factory=list)
    device_level: bool = False  # times are device kernel times (a GPU), not host ranges
    #: host microseconds from the first to the last event the profiler
    #: recorded in the call, on the profiler's clock (the CPU's timer check)
    span: float = 0.0

    def coverage(self) -> Optional[float]:
        own, foreign = sum(self.own.values()), sum(self.foreign.values())
        if own + foreign <= 0:
            return None
        return own / (own + foreign)

    def merge(self, other: "CallCensus") -> None:
        for mine, theirs in (
            (self.own, other.own),
            (self.housekeeping, other.housekeeping),
            (self.foreign, other.foreign),
        ):
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0.0) + v
        for mine_l, theirs_l in (
            (self.host_reads, other.host_reads),
            (self.other_streams, other.other_streams),
            (self.forged_ranges, other.forged_ranges),
        ):
            mine_l.extend(x for x in theirs_l if x not in mine_l)
        self.device_level = self.device_level or other.device_level

    def summary(self) -> dict[str, Any]:
        cov = self.coverage()
        return {
            "coverage": None if cov is None else round(cov, 4),
            "time_basis": "device" if self.device_level else "host",
            "own_us": {k: round(v, 1) for k, v in sorted(self.own.items(), key=lambda kv: -kv[1])},
            "foreign_us": {k: round(v, 1) for k, v in sorted(self.foreign.items(), key=lambda kv: -kv[1])},
            "housekeeping_us": round(sum(self.housekeeping.values()), 1),
            "host_reads": list(self.host_reads),
            "other_streams": list(self.other_streams),
        }


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Kineto prints two lines to stderr per profiler start and stop
    (``USDT: ... profiler_start``), whatever its log level: they would fill
    the worker log that the feedback quotes. Only the start and the stop are
    silenced, never the candidate's own output."""
    import os
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _duration(e: Any) -> float:
    return float(e.time_range.end - e.time_range.start)


def _is_device(e: Any) -> bool:
    return str(getattr(e, "device_type", "")).endswith(("CUDA", "PrivateUse1", "XPU"))


class Census:
    """Profiles calls of the candidate and attributes their work. One per
    evaluation; ``watch()`` around each checked call."""

    def __init__(
        self, allowed_ops: set[str], *, cuda: bool, host_memory: bool, enabled: bool = True, policy: Any = None
    ) -> None:
        #: False only to measure what the census costs (KS_BENCH_NO_CENSUS=1
        #: in the throughput benchmark): nothing is profiled or judged then
        self.enabled = enabled
        #: seconds spent in the census's own machinery (profiler start and
        #: stop, attribution, provenance), reported as the "census" phase
        self.overhead_s = 0.0
        # every value the attribution judges by, frozen (evaluator/policy.py):
        # the worker passes the copy it took before the program was loaded;
        # the module globals below are read only when none is given
        if policy is None:
            policy = Policy(
                allowed_ops=frozenset(allowed_ops),
                housekeeping_kernels=tuple(_HOUSEKEEPING_KERNELS),
                kernel_range=KERNEL_RANGE,
                jit_markers=tuple(JIT_MARKERS),
                runtime_prefixes=tuple(_RUNTIME_PREFIXES),
                scalar_read_ops=frozenset(_SCALAR_READ_OPS),
            )
        self.policy = policy
        #: kept for readers; the attribution reads self.policy (a frozen dataclass)
        self.allowed = policy.allowed_ops
        #: this call's kernel-range token (see watch)
        self._token = ""
        self.cuda = cuda
        self.host_memory = host_memory
        self.total = CallCensus(device_level=cuda)
        #: the record of the latest watched call (the timer cross-check reads it)
        self.last: Optional[CallCensus] = None
        #: the program's own time (ms: device kernels on a GPU, host ranges on
        #: a CPU) in each watched call that ran any of its kernels, in order:
        #: the CPU's timer cross-check takes the least
        self.own_ms: list[float] = []
        #: the same calls' host span (CallCensus.span), in ms
        self.span_ms: list[float] = []
        #: CUPTI stream ids the reference's kernels ran on: the timed stream
        self.timed_streams: set[Any] = set()
        # storage spans (start, bytes) -> crc (or None) of memory the
        # candidate's kernels wrote, or allowed ops copied from it
        # (start, nbytes, crc, launches before it): derived spans in the order
        # they happened among the launches (``_written``)
        self._derived: list[tuple[int, int, Optional[int], int]] = []

    # -- profiling ------------------------------------------------------
    def _profiler(self) -> Any:
        if not self.cuda:
            # the CPU-only profiler starts in milliseconds (Kineto's first
            # start in a process takes seconds) and sees the same aten ops
            import torch

            return torch.autograd.profiler.profile(use_kineto=False)
        return _kineto_profiler()

    @staticmethod
    def _events(prof: Any) -> Any:
        events = getattr(prof, "function_events", None)
        return events if events is not None else prof.events()

    @contextlib.contextmanager
    def reference(self) -> Iterator[None]:
        """Profile one call of the reference to learn the timed stream(s)."""
        if not self.cuda or not self.enabled:
            yield
            return
        prof = self._profiler()
        with prof:
            yield
        self.timed_streams = {
            getattr(e, "device_resource_id", None)
            for e in self._events(prof)
            if _is_device(e) and not e.name.startswith("Mem")
        }
        self.timed_streams.discard(None)

    @contextlib.contextmanager
    def watch(self) -> Iterator[CallCensus]:
        """Census one call: everything it ran, attributed, in the yielded
        record once the block ends."""
        record = CallCensus(device_level=self.cuda)
        if not self.enabled:
            yield record
            return
        t0 = time.perf_counter()
        _Census.launches = []
        _Census.host_memory = self.host_memory
        # the harness's kernel ranges carry a token drawn for this call: a
        # range the program opens with the prefix is not one of them
        self._token = _Census.token = secrets.token_hex(8)
        prof = self._profiler()
        with _quiet():
            prof.__enter__()
        _Census.active = True
        self.overhead_s += time.perf_counter() - t0
        try:
            yield record
        finally:
            t0 = time.perf_counter()
            _Census.active = False
            with _quiet():
                prof.__exit__(None, None, None)
            self.overhead_s += time.perf_counter() - t0
        t0 = time.perf_counter()
        # launches of the program's kernels seen by the backend's launch hook
        # in this call, by kernel name: a device kernel whose launch the
        # profiler could not link to a CPU range (Triton launches through the
        # driver API, which CUPTI's runtime correlation does not cover) is the
        # program's when its name is one of these, up to as many as were
        # launched; any more of that name are foreign
        # launched; any more of that name are foreign. A launch that knows
        # how many device kernels it started under names of its own (a CUDA
        # extension's function, whose kernels are named in the source) adds
        # that many to a budget for kernels with a declared name.
        launched: dict[str, int] = {}
        for entry in _Census.launches:
            if "device_kernels" in entry:
                launched[_DECLARED] = launched.get(_DECLARED, 0) + int(entry["device_kernels"] or 0)
                continue
            key = str(entry.get("kernel", "")).rsplit(".", 1)[-1]
            launched[key] = launched.get(key, 0) + 1
        events = self._events(prof)
        self._attribute(events, record, launched)
        host = [e.time_range for e in events if not _is_device(e)]
        if host:
            record.span = float(max(r.end for r in host) - min(r.start for r in host))
        self.total.merge(record)
        self.last = record
        if record.own:
            self.own_ms.append(sum(record.own.values()) / 1000.0)
            self.span_ms.append(record.span / 1000.0)
        self.overhead_s += time.perf_counter() - t0

    def _attribute(self, events: Any, record: CallCensus, launched: Optional[dict[str, int]] = None) -> None:
        # Two id spaces (torch.autograd.profiler._parse_kineto_results):
        # frontend events (aten ops, record_function ranges) carry their
        # external correlation id as ``id`` and linked id 0; runtime/driver
        # calls (cudaLaunchKernel, cuLaunchKernelEx) carry CUPTI's
        # correlation id as ``id`` and the frontend op's as linked id; a
        # device kernel carries CUPTI's id as ``id`` and the frontend op's as
        # linked id. Kept apart, since the two spaces overlap numerically.
        by_id: dict[Any, Any] = {}
        runtime_by_id: dict[Any, Any] = {}
        for e in events:
            if _is_device(e):
                continue
            if (getattr(e, "linked_correlation_id", 0) or 0) > 0:
                runtime_by_id.setdefault(e.id, e)
            else:
                by_id.setdefault(e.id, e)
        budget = dict(launched or {})
        # host ops of the housekeeping kernel kinds (any depth, inside the
        # program's ranges too: Triton's autotuner clears the L2 with zero_)
        for e in events:
            if not _is_device(e) and e.name.startswith("aten::"):
                op = normalize_op(e.name[len("aten::") :])
                for kind, ops in self.policy.housekeeping_kernels:
                    if op in ops and op in self.policy.allowed_ops:
                        budget[kind] = budget.get(kind, 0) + 1
        for e in events:
            if _is_device(e):
                if getattr(e, "is_user_annotation", False) or e.name.startswith(("ks::", "gpu_user_annotation")):
                    # a profiler range mirrored on the GPU timeline (it spans
                    # the kernels it launched; they are counted themselves)
                    continue
                self._device_event(e, by_id, runtime_by_id, record, budget)
            elif e.cpu_parent is None:
                self._host_event(e, record)

    def _own_range(self, name: str) -> Optional[str]:
        """The kernel's name when ``name`` is a kernel range the harness
        opened in this call (its prefix and this call's token), else None."""
        # (no token: attribution called outside watch(), on recorded events)
        prefix = self.policy.kernel_range + (self._token + "::" if self._token else "")
        return name[len(prefix) :] if name.startswith(prefix) else None

    def _inside_kernel(self, e: Any, record: CallCensus) -> float:
        """Torch ops inside a kernel range are judged like those outside it
        (the range holds Triton's launcher, which calls the program's grid
        and hooks): allowed ones stay the kernel's, any other, and compiled
        code, is foreign. Returns their host time, which is not the kernel's."""
        foreign = 0.0
        for child in e.cpu_children:
            name = child.name
            if name.startswith("aten::"):
                if normalize_op(name[len("aten::") :]) not in self.policy.allowed_ops:
                    self._host_event(child, record)
                    foreign += _duration(child)
            elif any(m in name for m in self.policy.jit_markers):
                self._host_event(child, record)
                foreign += _duration(child)
            else:
                if (
                    name.startswith(self.policy.kernel_range)
                    and self._own_range(name) is None
                    and name[:80] not in record.forged_ranges
                ):
                    record.forged_ranges.append(name[:80])
                foreign += self._inside_kernel(child, record)
        return foreign

    def _host_event(self, e: Any, record: CallCensus) -> None:
        name = e.name
        if name.startswith(self.policy.kernel_range):
            key = self._own_range(name)
            if key is None:  # the program's own range under our name: judged as the program's code
                if name[:80] not in record.forged_ranges:
                    record.forged_ranges.append(name[:80])
                for child in e.cpu_children:
                    self._host_event(child, record)
                return
            foreign = self._inside_kernel(e, record)
            if not record.device_level:
                record.own[key] = record.own.get(key, 0.0) + max(0.0, _duration(e) - foreign)
            return
        if name.startswith("ks::") or name.startswith(self.policy.runtime_prefixes) or name.startswith("[memory]"):
            # runtime calls and markers do no work of their own, but a
            # program can name its own range like one: what ran inside it
            # is judged all the same
            for child in e.cpu_children:
                self._host_event(child, record)
            return
        if name.startswith("aten::"):
            op = normalize_op(name[len("aten::") :])
            bucket = record.housekeeping if op in self.policy.allowed_ops else record.foreign
            if not record.device_level or bucket is record.housekeeping:
                bucket[name] = bucket.get(name, 0.0) + _duration(e)
            else:  # on a GPU its kernels carry the time; the op is named even without one
                bucket.setdefault(name, 0.0)
            return
        # a range: the candidate's own annotation is transparent, compiled
        # code (a JIT's region) is foreign by itself
        if any(m in name for m in self.policy.jit_markers):
            record.foreign[name] = record.foreign.get(name, 0.0) + (0.0 if record.device_level else _duration(e))
            return
        for child in e.cpu_children:
            self._host_event(child, record)

    def _device_event(
        self, e: Any, by_id: dict, runtime_by_id: dict, record: CallCensus, budget: dict[str, int]
    ) -> None:
        name = e.name
        front = by_id.get(getattr(e, "linked_correlation_id", 0) or -1)
        if front is None:
            # the launching runtime call (same CUPTI correlation id as the
            # kernel), placed in the CPU tree by time on its thread
            launch = runtime_by_id.get(e.id)
            front = launch.cpu_parent if launch is not None else None
        chain = []
        while front is not None:
            chain.append(front.name)
            front = front.cpu_parent
        # the innermost harness kernel range around the launch owns it,
        # unless a torch op that is not allowed lies between (a grid
        # callable's or a hook's compute); a range of the program's under
        # our prefix owns nothing
        owner = None
        for n in chain:
            if n.startswith("aten::") and normalize_op(n[6:]) not in self.policy.allowed_ops:
                break
            if n.startswith(self.policy.kernel_range):
                if self._own_range(n) is not None:
                    owner = n
                    break
                if n[:80] not in record.forged_ranges:
                    record.forged_ranges.append(n[:80])
        if owner is None and not chain and not name.startswith("Mem"):
            if budget.get(name, 0) > 0:
                budget[name] -= 1  # an unlinked launch of one of the program's kernels (see watch)
                owner = name
            elif budget.get(_DECLARED, 0) > 0 and _Census.kernel_names and _declared(name):
                budget[_DECLARED] -= 1
                owner = name
        elif owner is not None:
            owner = self._own_range(owner)
        op = next((n for n in chain if n.startswith("aten::")), None)
        if name.startswith("Memcpy"):
            if (
                "DtoH" in name
                and owner is None
                and normalize_op((op or "aten::?")[6:]) not in self.policy.scalar_read_ops
            ):
                record.host_reads.append(f"{name} (from {op or 'outside any torch op'})")
            else:
                record.housekeeping[name] = record.housekeeping.get(name, 0.0) + _duration(e)
            return
        if name.startswith("Memset"):
            record.housekeeping[name] = record.housekeeping.get(name, 0.0) + _duration(e)
            return
        if owner is not None and _Census.kernel_names and not _declared(name):
            owner = None  # launched from the program's code, but not one of its kernels (a library's)
        if owner is not None:
            key = owner
            record.own[key] = record.own.get(key, 0.0) + _duration(e)
            stream = getattr(e, "device_resource_id", None)
            if self.timed_streams and stream not in self.timed_streams:
                note = f"kernel {key} ran on stream {stream}, not the timed stream"
                if note not in record.other_streams:
                    record.other_streams.append(note)
            return
        if op is not None and normalize_op(op[6:]) in self.policy.allowed_ops:
            record.housekeeping[op] = record.housekeeping.get(op, 0.0) + _duration(e)
            return
        if not chain:
            kind = next((k for k, _ops in self.policy.housekeeping_kernels if k in name and budget.get(k, 0) > 0), None)
            if kind is not None:  # an unlinked kernel of an allowed op that ran (see _HOUSEKEEPING_KERNELS)
                budget[kind] -= 1
                record.housekeeping[kind] = record.housekeeping.get(kind, 0.0) + _duration(e)
                return
        label = (
            f"kernel {name[:80]} (from {op})"
            if op
            else f"kernel {name[:80]} (launched outside any torch op: a library or a JIT)"
        )
        record.foreign[label] = record.foreign.get(label, 0.0) + _duration(e)

    # -- provenance -----------------------------------------------------
    def note_derived(self, inputs: list[Any], outputs: list[Any]) -> None:
        """An allowed op (clone, contiguous, copy_, ...) made ``outputs`` from
        ``inputs``: when an input is the kernels' work, so is the output.
        Called by the torch-op guard while a census is on."""
        if not _Census.active:
            return
        written = self._written()
        if not any(self._overlaps(s, written) for s in (_spans(t) for t in inputs) if s is not None):
            return
        for t in outputs:
            s = _spans(t)
            if s is not None:
                self._derived.append((s[0], s[1], crc_of(s[2]) if self.host_memory else None, len(_Census.launches)))

    def _written(self) -> list[tuple[int, int, Optional[int]]]:
        """Every span the program's kernels wrote (or an allowed op derived
        from their work), in the order it happened: the provenance check
        takes the last one touching an output as what the output must still
        hold. (Derived spans used to come after all launches: an output
        allocated with ``empty_like`` of a kernel's intermediate, then written
        by a later kernel, was judged by its uninitialised bytes at the
        allocation, and an honest two-kernel program on the host was
        "hacked": benchmarks/eval_throughput/l2/matmul_softmax_two_kernels.py.)"""
        spans: list[tuple[int, int, Optional[int]]] = []
        derived = iter(self._derived)
        pending = next(derived, None)
        for index, launch in enumerate(_Census.launches):
            while pending is not None and pending[3] <= index:
                spans.append(pending[:3])
                pending = next(derived, None)
            crcs = launch["crcs"] or [None] * len(launch["spans"])
            spans.extend((start, n, crc) for (start, n), crc in zip(launch["spans"], crcs))
        while pending is not None:
            spans.append(pending[:3])
            pending = next(derived, None)
        return spans

    @staticmethod
    def _overlaps(span: tuple, written: list) -> bool:
        start, n = span[0], span[1]
        return any(start < ws + wn and ws < start + n for ws, wn, _ in written)

    def provenance(self, outputs: list[Any]) -> list[str]:
        """Problems with where the outputs came from (strict policy)."""
        if not self.enabled:
            return []
        t0 = time.perf_counter()
        try:
            return self._provenance(outputs)
        finally:
            self.overhead_s += time.perf_counter() - t0

    def _provenance(self, outputs: list[Any]) -> list[str]:
        problems = []
        written = self._written()
        for i, t in enumerate(outputs):
            s = _spans(t)
            if s is None or s[1] == 0:
                continue
            start, n, view = s
            touching = [w for w in written if start < w[0] + w[1] and w[0] < start + n]
            if not touching:
                problems.append(
                    f"output #{i} was not written by any of the program's kernels (its memory was "
                    "passed to none of them): the result was computed by something else"
                )
                continue
            last = touching[-1]
            if (
                self.host_memory
                and last[2] is not None
                and (last[0], last[1]) == (start, n)
                and crc_of(view) != last[2]
            ):
                problems.append(
                    f"output #{i} changed after the program's kernel last wrote it: the result was "
                    "written by host code or a library, not by the kernel"
                )
        self._derived = []
        return problems


#: the budget key of launches counted by number, not name (see ``watch``)
_DECLARED = "\0declared"


def _declared(kernel: str) -> bool:
    """Whether a device kernel's (demangled) name is one of the kernel names
    the candidate's backend declared (``_Census.kernel_names``)."""
    import re

    # demangled ("relu_kernel(float const*, ...)", "void k<float>(...)") or,
    # where the profiler leaves it mangled, "_Z11relu_kernelPKfPfl"
    return any(
        re.search(r"(?<![\w])" + re.escape(n) + r"(?![\w])", kernel) or f"{len(n)}{n}" in kernel
        for n in _Census.kernel_names
    )


def judge(record: CallCensus, policy: str, min_coverage: float) -> list[str]:
    """Hack reasons for one call's census under a policy."""
    reasons = []
    if record.forged_ranges:
        reasons.append(
            "forward opened profiler range(s) named like the evaluator's kernel range ("
            + ", ".join(record.forged_ranges[:3])
            + ") that the harness did not open: only the harness "
            "marks a kernel's work, and what ran inside them is judged as the program's own code"
        )
    if record.host_reads:
        reasons.append(
            "forward copied data to the host ("
            + "; ".join(record.host_reads[:3])
            + "): the work must be done on the device by the program's kernels"
        )
    if record.other_streams:
        reasons.append("; ".join(record.other_streams[:3]) + ": launch every kernel on the current stream")
    foreign = {k: v for k, v in record.foreign.items()}
    if policy == "strict" and foreign:
        named = ", ".join(
            f"{k} ({v / 1000:.3f} ms)" if v else k for k, v in sorted(foreign.items(), key=lambda kv: -kv[1])[:4]
        )
        reasons.append(
            f"forward's work was done outside the program's own kernels: {named}. Under the strict "
            "policy only allocation, view and copy ops (and the task's allowed ops) may run besides them"
        )
    elif policy == "partial" and foreign:
        cov = record.coverage()
        if cov is not None and cov < min_coverage:
            reasons.append(
                f"the program's own kernels did {cov:.0%} of forward's work, below the task's minimum "
                f"coverage {min_coverage:.0%} (partial policy)"
            )
    return reasons


def _kineto_profiler() -> Any:
    """Kineto with CPU ops and CUDA kernels: what ``torch.profiler.profile``
    builds, made directly. ``torch.profiler.profile`` asks
    ``hasattr(torch, "_inductor")`` on every start, which imports inductor and
    torch._dynamo (3.6 s on the H100 machine, the larger part of a cold
    evaluation); the autograd profiler underneath does not."""
    import torch

    return torch.autograd.profiler.profile(
        use_cpu=True, use_device="cuda", use_kineto=True, record_shapes=False, with_stack=False, profile_memory=False
    )


def warm_up() -> None:
    """Start Kineto with CUPTI once (seconds the first time in a process):
    in a pool's spare child, after its CUDA context and before it gets a
    candidate, so the census costs the candidate milliseconds."""
    import torch

    with _kineto_profiler():
        torch.zeros(1, device="cuda").add_(1)
        torch.cuda.synchronize()


__all__ = ["CallCensus", "Census", "JIT_MARKERS", "KERNEL_RANGE", "POLICIES", "judge", "warm_up"]

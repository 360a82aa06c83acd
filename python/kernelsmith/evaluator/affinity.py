"""Pinning a host-clock timing to its cores.

On a CPU device (PoCL, the Triton interpreter, torch on the host) the
scheduler moves the timing's threads between cores while it runs, and on
the 2-core development machine, idle otherwise, the same nine
OpenCL programs, re-timed head to head four times in a row with nothing
else running, moved by up to 35% each (one: 0.055x to 0.075x), with the
reference's median between 0.087 and 0.145 ms. With the process on one
core the same four re-timings moved by at most 7%, the reference by 0.085
to 0.104 ms. So for the timing slot the worker pins every one of its
threads (the caller's, torch's pool, PoCL's) to as many cores as the timing
has threads, starting with the core it runs on (where the scheduler just
woke it, usually an idle one), and gives them their old masks back after.
Next to a busy neighbour (not pinned itself) the spreads were the same
with and without the pin (benchmarks/bench_cpu_pinning.py --busy 1); a
neighbour pinned to the timing's cores is host load to the gate
(contention.DeviceGate), which judges the timing as before.
"""

from __future__ import annotations

import os
from typing import Optional


def _current_cpu() -> Optional[int]:
    """The core the calling thread last ran on (/proc's "processor" field)."""
    try:
        with open("/proc/thread-self/stat") as f:
            text = f.read()
        return int(text[text.rindex(")") + 2 :].split()[36])  # field 39; fields after comm start at 3
    except (OSError, ValueError, IndexError):
        return None


def _thread_ids() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return []


def choose_cores(threads: int, allowed: list[int], current: Optional[int]) -> list[int]:
    """``threads`` cores from ``allowed``: the current one first, then the
    ones after it in order (wrapping round); all of them where the timing
    has at least as many threads as there are cores (nothing to pin)."""
    allowed = sorted(allowed)
    if threads >= len(allowed) or not allowed:
        return allowed
    start = allowed.index(current) if current in allowed else 0
    return [allowed[(start + i) % len(allowed)] for i in range(max(1, threads))]


class PinnedTiming:
    """Context manager: every thread of this process on ``threads`` cores
    for the block, the old masks restored after (threads started inside
    the block get the mask of the process's first thread). A no-op where
    the host cannot pin (no sched_setaffinity, no /proc) or where the
    timing already has every allowed core."""

    def __init__(self, threads: int, enabled: bool = True) -> None:
        self.threads = max(1, int(threads))
        self.enabled = enabled and hasattr(os, "sched_setaffinity")
        self.cores: list[int] = []
        self._saved: dict[int, set[int]] = {}

    def __enter__(self) -> "PinnedTiming":
        if not self.enabled:
            return self
        try:
            allowed = sorted(os.sched_getaffinity(0))
        except OSError:
            return self
        cores = choose_cores(self.threads, allowed, _current_cpu())
        if len(cores) >= len(allowed):
            return self
        for tid in _thread_ids():
            try:
                self._saved[tid] = os.sched_getaffinity(tid)
                os.sched_setaffinity(tid, cores)
            except OSError:  # a thread that ended meanwhile, or a sandbox that forbids it
                self._saved.pop(tid, None)
        self.cores = cores if self._saved else []
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._saved:
            return
        fallback = next(iter(self._saved.values()))
        for tid in _thread_ids():
            try:
                os.sched_setaffinity(tid, self._saved.get(tid, fallback))
            except OSError:
                pass
        self._saved.clear()

"""Sample sources for the harness.

A runner takes one sample at a time: ``take()`` queues (GPU) or performs
(CPU, external) one sample and returns a handle; ``resolve(handles)`` turns
the handles of a batch into seconds per call. Queuing a whole batch before
resolving lets the CUDA runner synchronize once per batch instead of once per
sample, and lets the comparator interleave two runners sample by sample.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Sequence

_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def unit_scale(unit: str) -> float:
    if unit not in _UNITS:
        raise ValueError(f"unit must be one of {sorted(_UNITS)}, got '{unit}'")
    return _UNITS[unit]


class Runner:
    timer = "none"
    launches_per_sample = 1
    cuda_graph: Optional[bool] = None
    graph_fallback_reason = ""
    input_sets = 1

    def take(self) -> Any:
        raise NotImplementedError

    def resolve(self, handles: Sequence[Any]) -> list[float]:
        return [float(h) for h in handles]


class ExternalRunner(Runner):
    """Samples measured by someone else: ``sample_fn()`` runs the work once
    and returns its time in ``unit`` (e.g. an OpenCL event's profiling time)."""

    timer = "external"

    def __init__(self, sample_fn: Callable[[], float], unit: str = "s") -> None:
        if not callable(sample_fn):
            raise TypeError(f"sample_fn must be callable, got {type(sample_fn).__name__}")
        self._fn = sample_fn
        self._scale = unit_scale(unit)

    def take(self) -> float:
        value = self._fn()
        try:
            seconds = float(value) * self._scale
        except (TypeError, ValueError) as exc:
            raise TypeError(f"sample_fn must return a number (a time), got {value!r}") from exc
        if not seconds > 0.0 or seconds == float("inf"):
            raise ValueError(f"sample_fn returned a time that is not finite and > 0: {value!r}")
        return seconds


def call_with(fn: Callable[..., Any], input_sets: Optional[Sequence[Sequence[Any]]], index: int) -> Any:
    if input_sets is None:
        return fn()
    return fn(*input_sets[index % len(input_sets)])


class CpuRunner(Runner):
    """Host timer: perf_counter_ns around ``launches`` calls and a final
    ``sync()`` (e.g. an OpenCL queue finish, or torch.cuda.synchronize for a
    crude device timer)."""

    timer = "perf_counter"

    def __init__(
        self,
        fn: Callable[..., Any],
        input_sets: Optional[Sequence[Sequence[Any]]] = None,
        sync: Optional[Callable[[], Any]] = None,
        launches_per_sample: int = 1,
    ) -> None:
        self._fn = fn
        self._sets = input_sets
        self._sync = sync or (lambda: None)
        self.launches_per_sample = max(1, int(launches_per_sample))
        self.input_sets = len(input_sets) if input_sets else 1
        self._next = 0

    def call_once(self) -> None:
        call_with(self._fn, self._sets, self._next)
        self._next += 1

    def take(self) -> float:
        self._sync()
        t0 = time.perf_counter_ns()
        for _ in range(self.launches_per_sample):
            self.call_once()
        self._sync()
        t1 = time.perf_counter_ns()
        # perf_counter_ns can tick coarser than a tiny call; never report 0.
        return max(t1 - t0, 1) * 1e-9 / self.launches_per_sample

    def estimate_call_s(self, warmup_s: float, min_calls: int = 3) -> float:
        """Warm up for warmup_s (at least min_calls calls) and return the mean
        time of one call over the warm-up."""
        self._sync()
        start = time.perf_counter()
        calls = 0
        while calls < min_calls or time.perf_counter() - start < warmup_s:
            self.call_once()
            calls += 1
        self._sync()
        return (time.perf_counter() - start) / calls

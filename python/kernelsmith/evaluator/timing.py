"""The one timing seam of the evaluator.

:func:`measure` is the only place that times candidates and references; the
timing-harness work (kernelsmith.timing: CUDA graphs, L2 flushing, robust
statistics) replaces its body without touching the rest of the evaluator.
"""
from __future__ import annotations

import statistics
from typing import Any, Callable


def measure(fn: Callable[[], Any], backend: Any, warmup: int = 3, repeats: int = 10) -> dict[str, float]:
    """Time ``fn`` (one forward call) with the backend's timer; ms statistics."""
    for _ in range(max(0, warmup)):
        fn()
    backend.synchronize()
    samples = [backend.time_call(fn) for _ in range(max(1, repeats))]
    return {
        "median": statistics.median(samples),
        "mean": statistics.fmean(samples),
        "min": min(samples),
        "max": max(samples),
        "std": statistics.pstdev(samples) if len(samples) > 1 else 0.0,
        "n": float(len(samples)),
    }

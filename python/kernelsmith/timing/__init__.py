"""kernelsmith.timing: stable, honest timing of GPU (and CPU) callables.

``bench(fn)`` -> :class:`Measurement`; ``compare(ref_fn, cand_fn)`` ->
:class:`Comparison` (speedup with a CI and a verdict). ``bench_samples`` and
``compare_samples`` drive the same statistics from an external timer (OpenCL
event profiling). The statistics live in C++: ``kernelsmith._core.timing``,
re-exported here as ``stats``. See docs/timing.md.
"""

from __future__ import annotations

from .._core import timing as stats
from .harness import TimingOptions, bench, bench_samples, compare, compare_samples
from .hidden_work import check_hidden_work, graph_consistency_verdict, hidden_work_verdict
from .results import VERDICTS, Comparison, HiddenWorkCheck, Measurement
from .roofline import (
    HOST_PEAKS,
    PEAKS,
    HardwarePeak,
    RooflineCheck,
    WorkEstimate,
    estimate_work,
    lookup_peak,
    roofline_check,
)
from .gpu_state import gpu_state
from .sol import SpeedOfLight, speed_of_light

__all__ = [
    "bench",
    "compare",
    "bench_samples",
    "compare_samples",
    "TimingOptions",
    "Measurement",
    "Comparison",
    "HiddenWorkCheck",
    "VERDICTS",
    "hidden_work_verdict",
    "check_hidden_work",
    "graph_consistency_verdict",
    "PEAKS",
    "HOST_PEAKS",
    "SpeedOfLight",
    "speed_of_light",
    "HardwarePeak",
    "RooflineCheck",
    "WorkEstimate",
    "estimate_work",
    "lookup_peak",
    "roofline_check",
    "gpu_state",
    "stats",
]

"""Benchmark suites: the unified protocol over a folder of KernelBench-format
tasks, metrics (correctness, fast_p, amsr, fast1, geomean), tables and plots.
See docs/benchmarks.md."""

from .collect import collect_run
from .metrics import FAST_P, TaskResult, amsr_term, best_curve_mean, compute_metrics, fast_key, metrics_by_level
from .runner import BenchReport, ReferenceCache, compare, load_results, run_suite, run_suite_async, summarize
from .suite import SuiteTask, discover

__all__ = [
    "FAST_P",
    "TaskResult",
    "amsr_term",
    "best_curve_mean",
    "compute_metrics",
    "fast_key",
    "metrics_by_level",
    "BenchReport",
    "ReferenceCache",
    "compare",
    "load_results",
    "run_suite",
    "run_suite_async",
    "summarize",
    "SuiteTask",
    "discover",
    "collect_run",
]

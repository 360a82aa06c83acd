"""Suite metrics, as KernelBench and the Kernel-Smith paper define them.

Per task the run's *best correct program* counts (the protocol keeps the best
of its evolution). Over a set of N tasks:

* ``correct_rate``: share of tasks with at least one correct program.
* ``fast_p``: share of tasks that are correct AND have best speedup > p
  (KernelBench's fast_p; ``fast_0`` equals the correctness rate).
* ``avg_speedup`` (amsr): mean over all N tasks of the best speedup, with a
  task counted as 0 when it has no correct program or its best speedup is
  below 1 (a kernel slower than PyTorch is worth nothing: one would keep
  PyTorch). Incorrect tasks stay in the denominator.
* ``fast1_first``: first-round fast rate: share of tasks whose FIRST
  generated candidate (the first proposal step, not the seed) is correct and
  faster than the reference (speedup > 1).
* ``first_correct``: share of tasks whose first generated candidate is correct.
* ``geomean_speedup``: geometric mean of the best speedup over the correct
  tasks only (None when no task is correct); raw speedups, slowdowns included.
* ``median_sol``: median over the tasks whose best program's speed of light
  was counted of its fraction of the device's peak for the bound that
  applies (memory or compute); ``sol_counted`` how many such tasks there are.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence

FAST_P = (0.0, 1.0, 1.5, 2.0)


@dataclass
class TaskResult:
    """What a suite needs from one task's run."""

    key: str
    level: Optional[int] = None
    task_id: str = ""
    run_dir: str = ""
    #: at least one correct program (the seed counts when the task ships one)
    correct: bool = False
    #: best speedup among correct programs; None when none is correct
    best_speedup: Optional[float] = None
    #: the first generated candidate: correct? its speedup (None if not correct)
    first_correct: bool = False
    first_speedup: Optional[float] = None
    steps: int = 0
    stop_reason: str = ""
    #: (step, best score so far), score 0 until the first correct program
    curve: list = field(default_factory=list)
    #: speedups of every correct candidate of the run (for distributions)
    candidate_speedups: list = field(default_factory=list)
    status_counts: dict = field(default_factory=dict)
    total_tokens: int = 0
    cost_usd: float = 0.0
    wall_time_s: float = 0.0
    hardware: str = ""
    ref_runtime_ms: Optional[float] = None
    model: str = ""
    #: operator category (KernelBench-X), None elsewhere
    category: Optional[str] = None
    #: the speed of light of the best program's evaluation (fraction, bound,
    #: device, bandwidth_fraction, compute_fraction; counted False + reason)
    best_sol: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TaskResult":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def _is_fast(correct: bool, speedup: Optional[float], p: float) -> bool:
    return bool(correct) and speedup is not None and speedup > p


def amsr_term(correct: bool, speedup: Optional[float]) -> float:
    """A task's contribution to the average speedup: 0 unless correct and >= 1."""
    if not correct or speedup is None or speedup < 1.0:
        return 0.0
    return float(speedup)


def compute_metrics(results: Sequence[TaskResult], fast_p: Iterable[float] = FAST_P) -> dict[str, Any]:
    """Metrics over ``results`` (see the module docstring). Empty input gives n=0 and None rates."""
    n = len(results)
    out: dict[str, Any] = {"n": n}
    if n == 0:
        out.update(
            correct_rate=None,
            avg_speedup=None,
            fast1_first=None,
            first_correct=None,
            geomean_speedup=None,
            median_sol=None,
            sol_counted=0,
            **{fast_key(p): None for p in fast_p},
        )
        return out
    out["correct_rate"] = sum(r.correct for r in results) / n
    for p in fast_p:
        out[fast_key(p)] = sum(_is_fast(r.correct, r.best_speedup, p) for r in results) / n
    out["avg_speedup"] = sum(amsr_term(r.correct, r.best_speedup) for r in results) / n
    out["fast1_first"] = sum(_is_fast(r.first_correct, r.first_speedup, 1.0) for r in results) / n
    out["first_correct"] = sum(bool(r.first_correct) for r in results) / n
    logs = [math.log(r.best_speedup) for r in results if r.correct and r.best_speedup and r.best_speedup > 0]
    out["geomean_speedup"] = math.exp(sum(logs) / len(logs)) if logs else None
    fractions = sorted(
        float(r.best_sol["fraction"])
        for r in results
        if r.correct and r.best_sol and isinstance(r.best_sol.get("fraction"), (int, float))
    )
    out["median_sol"] = _median(fractions)
    out["sol_counted"] = len(fractions)
    out["total_tokens"] = sum(r.total_tokens for r in results)
    out["cost_usd"] = sum(r.cost_usd for r in results)
    return out


def _median(values: Sequence[float]) -> Optional[float]:
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def metrics_by_category(results: Sequence[TaskResult]) -> dict[str, dict[str, Any]]:
    """{"Activation": {...}, ..., "overall": {...}} for tasks with a category
    (KernelBench-X); {} when none has one."""
    categories = sorted({r.category for r in results if r.category})
    if not categories:
        return {}
    table = {c: compute_metrics([r for r in results if r.category == c]) for c in categories}
    table["overall"] = compute_metrics(results)
    return table


def fast_key(p: float) -> str:
    """fast_0, fast_1, fast_1.5, fast_2."""
    return f"fast_{p:g}"


def metrics_by_level(results: Sequence[TaskResult]) -> dict[str, dict[str, Any]]:
    """{"level1": {...}, ..., "overall": {...}}; tasks without a level only enter "overall"."""
    levels = sorted({r.level for r in results if r.level is not None})
    table = {f"level{lvl}": compute_metrics([r for r in results if r.level == lvl]) for lvl in levels}
    table["overall"] = compute_metrics(results)
    return table


def best_curve_mean(results: Sequence[TaskResult], steps: Optional[int] = None) -> list[float]:
    """Average over tasks of the amsr term of the best program so far, at each
    step 0..steps (a task's curve is held at its last value after it stops).
    Its last point equals ``avg_speedup``."""
    if not results:
        return []
    horizon = steps if steps is not None else max((int(c[-1][0]) for c in (r.curve for r in results) if c), default=0)
    total = [0.0] * (horizon + 1)
    for r in results:
        dense = dense_curve(r.curve, horizon)
        for i, value in enumerate(dense):
            total[i] += amsr_term(value > 0, value)
    return [t / len(results) for t in total]


def dense_curve(curve: Sequence[Sequence[float]], horizon: int) -> list[float]:
    """(step, best) points -> best at every step 0..horizon (forward-filled, 0 before the first point)."""
    values = [0.0] * (horizon + 1)
    points = sorted((int(s), float(v)) for s, v in curve)
    j, current = 0, 0.0
    for step in range(horizon + 1):
        while j < len(points) and points[j][0] <= step:
            current = max(current, points[j][1])
            j += 1
        values[step] = current
    return values

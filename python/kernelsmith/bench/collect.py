"""Reading a run directory (kernelsmith.evolve's format) into suite results."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, Optional

from ..hardware import HardwareInfo
from ..trajectory import EvalStore, StepRecord, read_step_records
from .metrics import TaskResult


def hardware_name(hardware: dict[str, Any] | None) -> str:
    """A short device name from an EvalResult's hardware block."""
    return HardwareInfo.of(hardware).label("unknown")


def load_steps(run_dir: str | Path) -> list[StepRecord]:
    """The run's records in applied order, seeds first."""
    records = read_step_records(run_dir)
    return sorted(records, key=lambda r: (r.step or 0, r.kind != "seed"))


def _speedup(record: StepRecord) -> Optional[float]:
    value = record.metric("speedup", record.metric("score"))
    return float(value) if isinstance(value, (int, float)) else None


#: what a suite keeps of the best program's speed of light
SOL_KEYS = (
    "counted",
    "reason",
    "device",
    "bound",
    "fraction",
    "bandwidth_fraction",
    "compute_fraction",
    "arithmetic_intensity",
    "reference_fraction",
)


def _sol_summary(evaluation: Any) -> dict[str, Any]:
    sol = getattr(evaluation, "speed_of_light", None) or {}
    return {k: sol[k] for k in SOL_KEYS if k in sol} if isinstance(sol, dict) else {}


def collect_run(run_dir: str | Path, key: str = "", level: Optional[int] = None) -> TaskResult:
    """Summarise one run directory (finished or not)."""
    run_dir = Path(run_dir)
    steps = load_steps(run_dir)
    evaluations = EvalStore.load(run_dir)
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    config = {}
    if (run_dir / "config.yaml").exists():
        import yaml

        config = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    result = TaskResult(key=key or run_dir.name, level=level, run_dir=str(run_dir))
    result.task_id = str((config.get("task") or {}).get("id") or summary.get("task_id") or "")
    result.model = str((config.get("config") or {}).get("model") or "")

    best: Optional[float] = None
    best_sol: dict[str, Any] = {}
    curve: list[list[float]] = []
    refs: list[float] = []
    counts: dict[str, int] = {}
    tokens = 0
    first: Optional[StepRecord] = None
    for record in steps:
        status = record.status or "skipped"
        counts[status] = counts.get(status, 0) + 1
        evaluation = evaluations.of(record)
        if evaluation is not None and evaluation.ref_runtime_ms is not None:
            refs.append(float(evaluation.ref_runtime_ms))
        if evaluation is not None and evaluation.hardware and not result.hardware:
            result.hardware = hardware_name(evaluation.hardware)
        tokens += int((record.usage or {}).get("total_tokens") or 0)
        if status == "correct":
            speedup = _speedup(record)
            if speedup is not None:
                result.candidate_speedups.append(speedup)
                # the loop's rule: a timing judged unreliable (contention,
                # drift) or below the hardware floor never becomes a best
                if not record.metric("unreliable") and not record.metric("suspicious"):
                    if best is None or speedup > best:
                        best_sol = _sol_summary(evaluation)
                    best = speedup if best is None else max(best, speedup)
        if record.kind == "step" and (first is None or (record.iteration or 0) < (first.iteration or 0)):
            first = record
        curve.append([int(record.step if record.step is not None else len(curve)), best or 0.0])
    result.curve = curve
    result.correct = bool(result.candidate_speedups)
    # a finished run's best is the loop's (summary.json): the finalists'
    # confirmed figure where one was reliable, the same field as
    # best_program.py and `kernelsmith evolve`'s summary
    if summary.get("best_program_id") is not None and isinstance(summary.get("best_speedup"), (int, float)):
        best = float(summary["best_speedup"])
        result.correct = True
    result.best_speedup = best
    result.best_sol = best_sol
    if first is not None and first.status == "correct":
        result.first_correct = True
        result.first_speedup = _speedup(first)
    result.steps = len(steps)
    result.status_counts = counts
    result.ref_runtime_ms = statistics.median(refs) if refs else None
    usage = summary.get("usage") or {}
    result.total_tokens = int(usage.get("total_tokens") or tokens)
    result.cost_usd = float(usage.get("cost_usd") or 0.0)
    result.wall_time_s = float(summary.get("wall_time_s") or 0.0)
    result.stop_reason = str(summary.get("stop_reason") or ("running" if steps else "not started"))
    return result

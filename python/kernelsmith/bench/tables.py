"""Metric and per-task tables as Markdown and CSV."""

from __future__ import annotations

import csv
import io
from typing import Any, Optional, Sequence

from .metrics import FAST_P, TaskResult, fast_key

METRIC_COLUMNS = [
    ("n", "tasks"),
    ("correct_rate", "correct"),
    *[(fast_key(p), fast_key(p)) for p in FAST_P],
    ("avg_speedup", "avg speedup (amsr)"),
    ("fast1_first", "fast1 (first round)"),
    ("geomean_speedup", "geomean speedup (correct)"),
    ("median_sol", "median speed of light (best)"),
    ("sol_counted", "speed of light counted"),
]
RATE_KEYS = {"correct_rate", "fast1_first", "first_correct", "median_sol", *(fast_key(p) for p in FAST_P)}


def _fmt(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key in RATE_KEYS:
        return f"{100 * value:.1f}%"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _csv(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def metrics_rows(
    by_level: dict[str, dict[str, Any]], label: Optional[str] = None, key: str = "level"
) -> tuple[list[str], list[list[Any]], list[list[str]]]:
    """(header, raw rows for CSV, formatted rows for Markdown); ``key`` names
    the first column ("level", or "category" for KernelBench-X)."""
    header = (["config"] if label is not None else []) + [key] + [title for _, title in METRIC_COLUMNS]
    raw, pretty = [], []
    for level, metrics in by_level.items():
        prefix = [label] if label is not None else []
        raw.append(prefix + [level] + [metrics.get(k) for k, _ in METRIC_COLUMNS])
        pretty.append(prefix + [level] + [_fmt(k, metrics.get(k)) for k, _ in METRIC_COLUMNS])
    return header, raw, pretty


def metrics_markdown(by_level: dict[str, dict[str, Any]], key: str = "level") -> str:
    header, _, pretty = metrics_rows(by_level, key=key)
    return _markdown(header, pretty)


def metrics_csv(by_level: dict[str, dict[str, Any]], key: str = "level") -> str:
    header, raw, _ = metrics_rows(by_level, key=key)
    return _csv(header, raw)


def comparison_tables(configs: dict[str, dict[str, dict[str, Any]]]) -> tuple[str, str]:
    """(markdown, csv) of several configurations' per-level metrics."""
    header: list[str] = []
    raw_all, pretty_all = [], []
    for label, by_level in configs.items():
        header, raw, pretty = metrics_rows(by_level, label=label)
        raw_all += raw
        pretty_all += pretty
    return _markdown(header, pretty_all), _csv(header, raw_all)


TASK_COLUMNS = [
    "task",
    "level",
    "correct",
    "best speedup",
    "first candidate",
    "steps",
    "stop",
    "reference ms",
    "hardware",
    "tokens",
    "cost USD",
    "category",
    "speed of light",
    "bound",
]


def sol_text(sol: dict[str, Any]) -> str:
    """'41.2% memory', '3.1% compute', 'not counted: why' or '-'."""
    if not sol:
        return "-"
    fraction = sol.get("fraction")
    if isinstance(fraction, (int, float)):
        return f"{100 * fraction:.1f}% {sol.get('bound', '')}".strip()
    bw = sol.get("bandwidth_fraction")
    if isinstance(bw, (int, float)):
        return f"{100 * bw:.1f}% of bandwidth (bound not counted)"
    return "not counted" + (f": {sol['reason']}" if sol.get("reason") else "")


def _task_row(r: TaskResult) -> list[Any]:
    first = "correct" if r.first_correct else "not correct"
    if r.first_correct and r.first_speedup is not None:
        first += f" ({r.first_speedup:.3f}x)"
    return [
        r.key,
        r.level if r.level is not None else "",
        r.correct,
        r.best_speedup,
        first,
        r.steps,
        r.stop_reason,
        r.ref_runtime_ms,
        r.hardware,
        r.total_tokens,
        round(r.cost_usd, 6),
        r.category or "",
        (r.best_sol or {}).get("fraction"),
        (r.best_sol or {}).get("bound", ""),
    ]


def tasks_markdown(results: Sequence[TaskResult]) -> str:
    rows = []
    for r in results:
        row = _task_row(r)
        row[2] = "yes" if r.correct else "no"
        row[3] = f"{r.best_speedup:.3f}x" if r.best_speedup is not None else "-"
        row[7] = f"{r.ref_runtime_ms:.4g}" if r.ref_runtime_ms is not None else "-"
        row[12] = sol_text(r.best_sol)
        rows.append([str(c) for c in row])
    return _markdown(TASK_COLUMNS, rows)


def tasks_csv(results: Sequence[TaskResult]) -> str:
    return _csv(TASK_COLUMNS, [_task_row(r) for r in results])

"""What the verdict-table benchmarks (gpu_verdicts.py, bench_eval_throughput.py)
print for one EvalResult: whether its category is an expected one, and the
one-line reason."""

from __future__ import annotations

from typing import Any


def matches(category: str, expected: str) -> bool:
    """`expected` is a category or several joined by '|'."""
    return category in expected.split("|")


def reason(result: Any) -> str:
    """The first hack reason, else the line of the error that names the cause:
    crashes, timeouts and mismatches lead with it, tracebacks end with it."""
    if result.hack_reasons:
        return result.hack_reasons[0]
    lines = result.error.strip().splitlines()
    if not lines:
        return "suspicious: " + "; ".join(result.suspicious_reasons) if result.suspicious else ""
    return lines[0] if result.category in ("crash", "timeout", "incorrect") else lines[-1]

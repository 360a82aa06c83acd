"""Render evaluation results and metrics as text for the model.

Works on plain dicts (``EvalResult.to_dict()``) and tolerates missing keys,
``None`` values and keys it does not know, so an evaluator that grows new
fields never breaks prompt building.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

__all__ = ["clip", "format_metrics", "render_feedback", "trim_log"]

# Metric keys shown first and how to print them; anything else scalar follows.
_METRIC_ORDER = ("score", "speedup", "runtime_ms", "ref_runtime_ms")


def _fmt_number(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.4g}"
    return str(value)


def format_metrics(metrics: Mapping[str, Any] | None) -> str:
    """One line like ``score=1.52, speedup=1.52x, runtime_ms=0.41``."""
    if not metrics:
        return "no metrics"
    parts: list[str] = []
    keys = [k for k in _METRIC_ORDER if k in metrics] + sorted(
        k for k in metrics if k not in _METRIC_ORDER
    )
    for key in keys:
        value = metrics[key]
        if value is None or isinstance(value, (dict, list, tuple)):
            continue
        text = _fmt_number(value)
        if key == "speedup" and isinstance(value, (int, float)) and not isinstance(value, bool):
            text += "x"
        parts.append(f"{key}={text}")
    return ", ".join(parts) if parts else "no metrics"


def _head_end(text: str, limit: int) -> int:
    """Where to end a head of at most ``limit`` characters: after a whole
    line when one ends in the second half of the budget, else at a space,
    so no word (no token) is cut in two; a hard cut only inside one huge word."""
    if len(text) <= limit:
        return len(text)
    window = text[: limit + 1]
    line = window.rfind("\n")
    if line >= limit // 2:
        return line
    space = max(window.rfind(" "), window.rfind("\t"))
    return space if space > 0 else limit


def _tail_start(text: str, limit: int) -> int:
    """Where to start a tail of at most ``limit`` characters (see _head_end)."""
    if len(text) <= limit:
        return 0
    start = len(text) - limit - 1
    window = text[start:]
    line = window.find("\n")
    if 0 <= line <= (limit + 1) // 2:
        return start + line + 1
    spaces = [i for i in (window.find(" "), window.find("\t")) if i >= 0]
    return start + min(spaces) + 1 if spaces and min(spaces) < limit else start + 1


def clip(text: str, max_chars: int, keep: str = "head") -> str:
    """``text`` cut to about ``max_chars`` on a line or word boundary, with
    "..." where it was cut; ``keep`` "head" or "tail" (for error logs)."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    budget = max(1, max_chars - 4)
    if keep == "tail":
        return "... " + text[_tail_start(text, budget):].lstrip()
    return text[: _head_end(text, budget)].rstrip() + " ..."


def trim_log(text: str, max_chars: int) -> str:
    """Keep the head and the tail of a long log (errors sit at either end),
    cut on line or word boundaries."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    head_end = _head_end(text, max_chars * 2 // 5)
    tail_start = _tail_start(text, max_chars - max_chars * 2 // 5)
    dropped = tail_start - head_end
    return f"{text[:head_end].rstrip()}\n... [{dropped} characters omitted] ...\n{text[tail_start:].lstrip()}"


def _yes_no(value: Any) -> str:
    if value is None:
        return "unknown"
    return "yes" if value else "no"


def render_feedback(feedback: Mapping[str, Any] | None, max_log_chars: int = 6000) -> str:
    """Text for the model from an evaluation result dict (or an edit failure).

    Known keys: compiled, correct, hacked, hack_reasons, error_category,
    error_log, correctness{max_abs_err, max_rel_err, first_mismatch, ...},
    runtime_ms, ref_runtime_ms, speedup, timing{...}, edit_error, message.
    Other scalar keys are listed at the end.
    """
    if not feedback:
        return "Not evaluated yet."
    fb = dict(feedback)
    lines: list[str] = []
    edit_error = fb.pop("edit_error", None)
    if edit_error:
        lines.append("The response could not be applied as an edit:")
        lines.append(str(edit_error))
    if "compiled" in fb:
        lines.append(f"- compiled: {_yes_no(fb.pop('compiled'))}")
    if "correct" in fb:
        lines.append(f"- correct: {_yes_no(fb.pop('correct'))}")
    category = fb.pop("error_category", None)
    if category:
        lines.append(f"- error category: {category}")
    hacked = fb.pop("hacked", None)
    reasons = fb.pop("hack_reasons", None) or []
    if hacked or reasons:
        lines.append("- rejected as a shortcut (reward hack):")
        for reason in reasons if isinstance(reasons, (list, tuple)) else [reasons]:
            lines.append(f"  - {reason}")
    correctness = fb.pop("correctness", None)
    if isinstance(correctness, Mapping) and correctness:
        details = dict(correctness)
        mismatch = details.pop("first_mismatch", None)
        summary = ", ".join(
            f"{k}={_fmt_number(v)}" for k, v in details.items() if not isinstance(v, (dict, list))
        )
        if summary:
            lines.append(f"- correctness: {summary}")
        if mismatch:
            if isinstance(mismatch, Mapping):
                mismatch = ", ".join(f"{k}={_fmt_number(v)}" for k, v in mismatch.items())
            lines.append(f"- first mismatch: {mismatch}")
    runtime = fb.pop("runtime_ms", None)
    ref = fb.pop("ref_runtime_ms", None)
    speedup = fb.pop("speedup", None)
    if runtime is not None or ref is not None or speedup is not None:
        parts = []
        if runtime is not None:
            parts.append(f"runtime {_fmt_number(runtime)} ms")
        if ref is not None:
            parts.append(f"reference {_fmt_number(ref)} ms")
        if speedup is not None:
            parts.append(f"speedup {_fmt_number(speedup)}x")
        lines.append("- timing: " + ", ".join(parts))
    timing = fb.pop("timing", None)
    if isinstance(timing, Mapping) and timing:
        stats = ", ".join(
            f"{k}={_fmt_number(v)}" for k, v in timing.items() if not isinstance(v, (dict, list))
        )
        if stats:
            lines.append(f"- timing details: {stats}")
    message = fb.pop("message", None)
    if message:
        lines.append(f"- note: {message}")
    log = fb.pop("error_log", None)
    # Bulky or internal fields that would only add noise to the prompt.
    for noise in ("source", "hardware", "schema_version", "task", "worker", "stdout", "stderr"):
        fb.pop(noise, None)
    extras = [
        f"{k}={_fmt_number(v)}"
        for k, v in sorted(fb.items())
        if v is not None and not isinstance(v, (dict, list, tuple)) and str(v) != ""
    ]
    if extras:
        lines.append("- other: " + ", ".join(extras))
    if log:
        lines.append("- error log:")
        lines.append("```text")
        lines.append(trim_log(str(log).rstrip(), max_log_chars))
        lines.append("```")
    return "\n".join(lines) if lines else "No evaluation details."

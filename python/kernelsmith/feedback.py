"""The feedback a program carries to the next prompt, and its one renderer.

:class:`Feedback` is the typed seam between whoever judges a program (the
evaluator's :class:`~kernelsmith.result.EvalResult`, or the evolve loop when
an answer could not be applied as an edit) and whoever shows the judgement
(the prompt builder, the RL environment's feedback turn, ``kernelsmith eval``).
Its field names are :class:`EvalResult`'s, plus ``edit_error`` and ``note``,
so an ``EvalResult.to_dict()`` is a valid feedback dict; keys it does not know
are ignored, so an evaluator that grows new fields never breaks a prompt.

:func:`render_feedback` is the only renderer: ``EvalResult.render_feedback``
and the prompts call it, and it trims the error log to ``max_log_chars``.
This module imports nothing from the package, so any layer may use it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

__all__ = [
    "RENDERED_CENSUS_KEYS",
    "RENDERED_TIMING_KEYS",
    "Feedback",
    "clip",
    "format_metrics",
    "render_feedback",
    "speed_of_light_line",
    "trim_log",
]

# Metric keys shown first and how to print them; anything else scalar follows.
# sol_memory / sol_compute: the fraction of the device's peak for the bound
# that applies (result.program_metrics), printed as a percentage
_METRIC_ORDER = ("score", "speedup", "sol_memory", "sol_compute", "runtime_ms", "ref_runtime_ms")
_PERCENT_METRICS = ("sol_memory", "sol_compute")
#: the keys of Feedback.timing and Feedback.census that render_feedback reads
#: (a program's compact feedback keeps only these: program_record.py)
RENDERED_TIMING_KEYS = ("confidence", "shapes")
RENDERED_CENSUS_KEYS = ("coverage", "foreign_us", "time_basis")


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
    keys = [k for k in _METRIC_ORDER if k in metrics] + sorted(k for k in metrics if k not in _METRIC_ORDER)
    for key in keys:
        value = metrics[key]
        if value is None or isinstance(value, (dict, list, tuple)):
            continue
        text = _fmt_number(value)
        if key == "speedup" and isinstance(value, (int, float)) and not isinstance(value, bool):
            text += "x"
        elif key in _PERCENT_METRICS and isinstance(value, (int, float)) and not isinstance(value, bool):
            text = _percent(float(value))
        parts.append(f"{key}={text}")
    return ", ".join(parts) if parts else "no metrics"


def _percent(fraction: float) -> str:
    """41.2%, 0.31%, 0.0042%: three significant digits below 1%."""
    value = 100.0 * fraction
    return f"{value:.1f}%" if abs(value) >= 1 or value == 0 else f"{value:.2g}%"


def _rate(value: Any, unit: str) -> str:
    """1.38 TB/s, 30.7 TFLOP/s, 512 MB/s (decimal prefixes, as datasheets)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "?"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def speed_of_light_line(sol: Mapping[str, Any] | None) -> str:
    """One line on how far a timing is from the device's limit, from a
    ``SpeedOfLight`` dict (``EvalResult.speed_of_light``); "" when there is
    none. Says "cannot be counted" with the reason instead of guessing."""
    if not sol or not isinstance(sol, Mapping):
        return ""
    device = sol.get("device") or "this device"
    if not sol.get("counted"):
        return f"Speed of light: {sol.get('reason') or 'cannot be counted'}."
    bound = sol.get("bound")
    bw = f"{_rate(sol.get('achieved_bytes_per_s'), 'B/s')} of {_rate(sol.get('peak_bytes_per_s'), 'B/s')}"
    if bound in ("memory", "compute") and isinstance(sol.get("fraction"), (int, float)):
        ai = sol.get("arithmetic_intensity")
        ridge = sol.get("ridge_point")
        where = (
            f"{ai:.3g} FLOP/byte {'>=' if bound == 'compute' else '<'} ridge point {ridge:.3g}"
            if isinstance(ai, (int, float)) and isinstance(ridge, (int, float))
            else ""
        )
        if bound == "compute":
            rates = (
                f"{_rate(sol.get('achieved_flops_per_s'), 'FLOP/s')} of "
                f"{_rate(sol.get('peak_flops_per_s'), 'FLOP/s')} {sol.get('dtype', '')}"
            )
            what = f"{device}'s {sol.get('dtype', '')} compute peak"
        else:
            rates = bw
            what = f"{device}'s memory bandwidth"
        text = f"Speed of light: {_percent(float(sol['fraction']))} of {what} ({bound}-bound: {rates}"
        text += f"; {where})" if where else ")"
        ref = sol.get("reference_fraction")
        if isinstance(ref, (int, float)):
            text += f"; the reference reaches {_percent(float(ref))}"
        return text + "."
    frac = sol.get("bandwidth_fraction")
    text = "Speed of light: "
    if isinstance(frac, (int, float)):
        text += f"{_percent(float(frac))} of {device}'s memory bandwidth ({bw}); "
    return text + f"{sol.get('reason') or 'the bound is not stated'}."


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
        return "... " + text[_tail_start(text, budget) :].lstrip()
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


_VERDICTS = {
    "ok": "CORRECT",
    "compile": "COMPILE ERROR",
    "runtime": "RUNTIME ERROR",
    "timeout": "TIMEOUT",
    "crash": "CRASH",
    "oom": "OUT OF MEMORY",
    "incorrect": "INCORRECT OUTPUT",
    "hacked": "REJECTED (reward hack)",
    "edit": "EDIT ERROR",
    "harness": "NOT EVALUATED (the task's reference failed)",
}


@dataclass
class Feedback:
    """What the next prompt is told about a program. Every field is optional:
    ``None`` / empty means "not known" and is not shown."""

    # EvalResult's category ("ok", "compile", ..., "edit"); "" when not judged
    category: str = ""
    compiled: Optional[bool] = None
    correct: Optional[bool] = None
    hacked: bool = False
    hack_reasons: list = field(default_factory=list)
    # the error log (trimmed to max_log_chars when rendered)
    error: str = ""
    # why the model's answer could not be turned into a program
    edit_error: str = ""
    # a remark for the model (e.g. "the PyTorch reference; no kernel yet")
    note: str = ""
    warnings: list = field(default_factory=list)
    correctness: dict = field(default_factory=dict)
    runtime_ms: Optional[float] = None
    ref_runtime_ms: Optional[float] = None
    speedup: Optional[float] = None
    speedup_ci_low: Optional[float] = None
    speedup_ci_high: Optional[float] = None
    timing_verdict: str = ""
    # the comparison's details; the renderer reads only its "confidence"
    timing: dict = field(default_factory=dict)
    suspicious_reasons: list = field(default_factory=list)
    timing_reliable: bool = True
    unreliable_reasons: list = field(default_factory=list)
    # the kernel census; the renderer reads coverage, foreign_us, time_basis
    census: dict = field(default_factory=dict)
    # EvalResult.speed_of_light: one line (speed_of_light_line)
    speed_of_light: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Only the fields that say something (the record stays small)."""
        defaults = Feedback()
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(defaults, f.name)
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "Feedback":
        """From a feedback dict or an ``EvalResult.to_dict()``; unknown keys
        are ignored and ``None`` means the field's default."""
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in (data or {}).items() if k in names and v is not None}
        for key in ("compiled", "correct"):  # None (unknown) is a value here
            if key in (data or {}):
                kwargs[key] = data[key]  # type: ignore[index]
        return cls(**kwargs)

    @classmethod
    def of(cls, value: Any) -> "Feedback":
        """A Feedback from a Feedback, anything with ``to_dict()`` (EvalResult),
        a mapping, or None."""
        if isinstance(value, Feedback):
            return value
        if value is None:
            return cls()
        if hasattr(value, "to_dict"):
            value = value.to_dict()
        return cls.from_dict(value)

    def is_empty(self) -> bool:
        return not self.to_dict()


def _yes_no(value: Any) -> str:
    if value is None:
        return "unknown"
    return "yes" if value else "no"


def render_feedback(feedback: Any, max_log_chars: int = 6000) -> str:
    """Text for the model (or a person) from a :class:`Feedback`, an
    ``EvalResult`` or a feedback dict: the verdict, what failed and what to
    change, the error log cut to ``max_log_chars`` (head and tail kept; 0 =
    whole), correctness and timing."""
    if feedback is None:
        return "Not evaluated yet."
    fb = Feedback.of(feedback)
    if fb.is_empty():
        return "No evaluation details."
    lines: list[str] = []
    if fb.category:
        lines.append(f"Verdict: {_VERDICTS.get(fb.category, fb.category.upper())}")
    else:
        if fb.compiled is not None or fb.correct is not None:
            lines.append(f"- compiled: {_yes_no(fb.compiled)}")
            lines.append(f"- correct: {_yes_no(fb.correct)}")
    if fb.edit_error:
        lines.append("The response could not be applied as an edit:")
        lines.append(str(fb.edit_error).rstrip())
    if fb.note:
        lines.append(f"Note: {fb.note}")
    if fb.hacked or fb.hack_reasons:
        lines.append("The program was rejected as a shortcut (reward hack)" + (" because:" if fb.hack_reasons else "."))
        reasons = fb.hack_reasons if isinstance(fb.hack_reasons, (list, tuple)) else [fb.hack_reasons]
        lines += [f"- {r}" for r in reasons]
        lines.append(
            "Compute the result with your own kernels inside forward; do not fall back to PyTorch or game the measurement."
        )
    if fb.error:
        lines.append("Error:" if fb.category != "incorrect" else "Mismatch:")
        lines.append(trim_log(str(fb.error).rstrip(), max_log_chars))
    c = fb.correctness
    if c and fb.category in ("incorrect", "ok", ""):
        if c.get("max_abs_err") is not None:
            text = (
                f"max abs error {_fmt_number(c['max_abs_err'])}, max rel error {_fmt_number(c.get('max_rel_err', 0.0))}"
            )
            if c.get("atol") is not None or c.get("rtol") is not None:
                text += f" (atol {c.get('atol')}, rtol {c.get('rtol')})"
            if c.get("trials") is not None:
                text += f" over {c.get('trials')} trials"
            lines.append(text)
        fm = c.get("first_mismatch")
        if isinstance(fm, Mapping) and fm:
            where = []
            if fm.get("input_set") is not None:
                where.append(f"input set '{fm.get('input_set')}'")
            for key in ("trial", "output", "index"):
                if fm.get(key) is not None:
                    where.append(f"{key} {fm.get(key)}")
            lines.append(f"first mismatch: {', '.join(where)}: got {fm.get('got')}, expected {fm.get('expected')}")
        elif fm:
            lines.append(f"first mismatch: {fm}")
    if fb.warnings:
        lines.append("Warnings:")
        lines += [f"- {w}" for w in fb.warnings]
    if fb.runtime_ms is not None or fb.ref_runtime_ms is not None or fb.speedup is not None:
        parts = []
        if fb.runtime_ms is not None:
            parts.append(f"Runtime: {fb.runtime_ms:.4g} ms")
        inner = []
        if fb.ref_runtime_ms is not None:
            inner.append(f"reference {fb.ref_runtime_ms:.4g} ms")
        if fb.speedup is not None:
            speed = f"speedup {fb.speedup:.3g}x"
            if fb.speedup_ci_low is not None and fb.speedup_ci_high is not None:
                conf = fb.timing.get("confidence", 0.95) if isinstance(fb.timing, Mapping) else 0.95
                speed += f", {conf:.0%} CI {fb.speedup_ci_low:.3g}-{fb.speedup_ci_high:.3g}"
            inner.append(speed)
        text = parts[0] if parts else "Timing:"
        if inner:
            text += f" ({', '.join(inner)})" if parts else " " + ", ".join(inner)
        if fb.timing_verdict in ("faster", "slower"):
            text += f": {fb.timing_verdict} than the reference"
        elif fb.timing_verdict == "indistinguishable":
            text += ": indistinguishable from the reference"
        lines.append(text)
        shapes = fb.timing.get("shapes") if isinstance(fb.timing, Mapping) else None
        if isinstance(shapes, list) and len(shapes) > 1:
            # a task timed on several shapes: the figure above is their weighted geometric mean
            each = []
            for row in shapes:
                if not isinstance(row, Mapping) or not isinstance(row.get("speedup"), (int, float)):
                    continue
                ci = row.get("speedup_ci") or [None, None]
                bounds = (
                    f" [{ci[0]:.3g}-{ci[1]:.3g}]"
                    if all(isinstance(c, (int, float)) for c in ci[:2]) and len(ci) >= 2
                    else ""
                )
                each.append(f"{row.get('shape')} {row['speedup']:.3g}x{bounds}")
            lines.append("Per timing shape (the speedup above is their weighted geometric mean): " + "; ".join(each))
        sol_line = speed_of_light_line(fb.speed_of_light) if fb.category in ("ok", "") else ""
        if sol_line:
            lines.append(sol_line)
    census = fb.census or {}
    if fb.category == "ok" and census.get("foreign_us"):
        foreign = ", ".join(f"{k} {v / 1000:.3g} ms" for k, v in list(census["foreign_us"].items())[:4])
        cov = census.get("coverage")
        lines.append(
            f"Coverage: your kernels did {cov:.0%} of forward's work ({census.get('time_basis', 'host')} time); "
            f"the rest ran outside them: {foreign}"
            if cov is not None
            else f"Foreign work in forward: {foreign}"
        )
    if not fb.timing_reliable and fb.unreliable_reasons:
        lines.append("The timing is unreliable (measured under load; not counted as the best):")
        lines += [f"- {r}" for r in fb.unreliable_reasons]
    if fb.suspicious_reasons:
        lines.append("The timing is suspicious (not counted as fast):")
        lines += [f"- {r}" for r in fb.suspicious_reasons]
    return "\n".join(lines) if lines else "No evaluation details."

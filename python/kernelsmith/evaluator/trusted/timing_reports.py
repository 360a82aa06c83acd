"""A correct result's timing figures against what the worker's timing
reported to the parent when it ended.

The timing sends its figures to the parent (the ``timing-done`` message)
before any more of the program runs. Figures changed afterwards (the
outcome object rewritten by the program's code in the calls after the
timing, or the result line rewritten on its way) or a speedup no timing
ever reported (a result line the program wrote itself) were not measured
(fixtures/pygpubench: stack_sig_scan, event_array, heap_sig_scan,
fd_overwrite; hacks_v3/channel_direct_forge.py).
"""

from __future__ import annotations

from typing import Any, Optional

from ...result import EvalResult
from ..timing import TimingOutcome, combine_shapes
from .base import TrustedCheck, TrustedContext, overrule

#: a timing report's fields and the result's fields they must equal
_REPORTED = (
    ("speedup", "speedup"),
    ("ref_ms", "ref_runtime_ms"),
    ("cand_ms", "runtime_ms"),
    ("ci_low", "speedup_ci_low"),
    ("ci_high", "speedup_ci_high"),
)


class TimingReports(TrustedCheck):
    name = "timing reports"

    def reasons(self, result: EvalResult, ctx: TrustedContext) -> list[str]:
        store = ctx.evidence or {}
        unasked = _timing_not_asked(result, store.get("timing_asked", True), ctx.task)
        if unasked:
            return unasked
        return timing_report_reasons(result, list(store.get("timing_reports") or []), ctx.task)


def _timing_not_asked(result: EvalResult, asked: Any, task: Any) -> list[str]:
    """A speedup from a job the parent sent with timing off, or for a task
    whose configuration turns timing off: no timing of the harness ran, so
    whatever reported one was the program (a report forged from the
    worker's own process, hacks_v3/channel_forge_report.py, is told apart
    from the harness's only here)."""
    if result.category != "ok" or result.speedup is None:
        return []
    config: Any = getattr(task, "config", None)
    enabled = bool(getattr(getattr(config, "timing", None), "enabled", True))
    if asked is not False and enabled:
        return []
    why = "the job was sent with timing off" if asked is False else "the task's configuration turns timing off"
    return [
        f"the result has a speedup ({result.speedup!r}) but no timing was asked for ({why}): the verdict was not "
        "the program's to write"
    ]


def check_timing_reports(result: EvalResult, reports: list[Any], task: Any = None) -> None:
    """This check alone (tests, tools): overrule ``result`` when its figures
    are not those of ``reports`` (the timing's, in the order they came)."""
    overrule(result, timing_report_reasons(result, reports, task))


def timing_report_reasons(result: EvalResult, reports: list[Any], task: Any = None) -> list[str]:
    """Why ``result``'s figures are not the ones measured; only a correct
    result with a speedup is looked at."""
    if result.category != "ok" or result.speedup is None:
        return []
    timed = [r for r in reports if isinstance(r, dict) and not r.get("release_only")]
    last, why = _reported_figures(timed, task) if timed else (None, "no timing reported any figures to the parent")
    if last is not None:
        differ = [
            f"{field} {getattr(result, field)!r} against {last.get(key)!r}"
            for key, field in _REPORTED
            if key in last and getattr(result, field) != last.get(key)
        ]
        if not differ:
            return []
        why = "they differ from what the timing reported when it ended: " + "; ".join(differ)
    return [
        f"the result's timing figures are not the ones measured ({why}): the verdict was not the program's to write"
    ]


def _reported_figures(timed: list[dict[str, Any]], task: Any) -> tuple[Optional[dict[str, Any]], str]:
    """What the result's figures must be: the last report, or, for a task
    timed on several shapes (TaskConfig.timing_shapes), the parent's own
    combination (timing.combine_shapes, the task's weights) of each shape's
    last report; with the reason when a shape reported nothing."""
    config: Any = getattr(task, "config", None)
    names = config.timed_shapes if config is not None else []
    if len(names) < 2:
        return timed[-1], ""
    lasts = {r.get("shape"): r for r in timed if r.get("comparison") is None}
    missing = [n for n in names if n not in lasts]
    if missing:
        return None, f"no timing reported figures for the timing shape(s) {', '.join(missing)}"
    try:
        outcomes = [
            TimingOutcome(
                runtime_ms=float(lasts[n]["cand_ms"]),
                ref_runtime_ms=float(lasts[n]["ref_ms"]),
                speedup=float(lasts[n]["speedup"]),
                speedup_ci_low=float(lasts[n]["ci_low"]),
                speedup_ci_high=float(lasts[n]["ci_high"]),
                verdict="",
            )
            for n in names
        ]
        c = combine_shapes(outcomes, names, config.shape_weights)
    except (KeyError, TypeError, ValueError) as exc:
        return None, f"the timing shapes' reports do not combine ({exc})"
    return {
        "speedup": c.speedup,
        "ref_ms": c.ref_runtime_ms,
        "cand_ms": c.runtime_ms,
        "ci_low": c.speedup_ci_low,
        "ci_high": c.speedup_ci_high,
    }, ""

"""The parent's trusted checks on a worker's result, one unit per file,
composed in one list.

Each check (:class:`~.base.TrustedCheck`) returns the reasons it finds a
worker's result not to be the program's own; :func:`trusted_checks` runs
them in ``TRUSTED_CHECKS`` order after every result (pool and fresh mode),
overrules the result with the first check's reasons, and withdraws the
figures of a hacked result whichever check (the worker's or these) said
so. Adding a check is one new file here and one line in
``TRUSTED_CHECKS`` (docs/architecture.md, "How to add a parent-side
check").
"""

from __future__ import annotations

import time
from typing import Any, Optional

from ...result import EvalResult
from .base import TrustedCheck, TrustedContext, overrule, withdraw_figures
from .audit_check import AuditCheck, audit_finalists
from .referee_check import RefereeRecheck
from .slot_cross_check import SlotCrossCheck
from .timing_reports import TimingReports

TRUSTED_CHECKS: list[TrustedCheck] = [
    RefereeRecheck(),  # the referee's re-check of the trials' outputs
    TimingReports(),  # the result's figures against what the timing reported when it ended
    SlotCrossCheck(),  # the timing against the time it held the device's timing slot
    AuditCheck(),  # the reported speedup against the program's call under the parent's own clock
]


def run_trusted_checks(result: EvalResult, ctx: TrustedContext) -> None:
    """Every check of ``TRUSTED_CHECKS`` in order, until one finds a reason:
    the result is overruled as hacked with that check's reasons and no
    later check runs. Then no figure of a hacked result stays. Each
    check's time goes to ``result.phases`` as ``check_<name>`` (a record)."""
    for check in TRUSTED_CHECKS:
        started = time.monotonic()
        found = check.reasons(result, ctx)
        result.phases["check_" + check.name.replace(" ", "_")] = round(time.monotonic() - started, 4)
        if found:
            overrule(result, found)
            break
    withdraw_figures(result)


def trusted_checks(
    result: EvalResult,
    evidence: Optional[dict[str, Any]],
    seeds: list[int],
    task: Any,
    workdir: str,
    referee: Any,
    slots: Optional[list[Any]] = None,
) -> None:
    """Parent side, after a worker's result (pool or fresh mode; ``evidence``:
    what converse() took from the worker, evidence.take_evidence's store and
    the timing's reports; ``slots``: the device's timing slot as the worker
    held it, where it had one): :func:`run_trusted_checks`."""
    run_trusted_checks(
        result, TrustedContext(task=task, seeds=seeds, workdir=workdir, referee=referee, evidence=evidence, slots=slots)
    )


def finalist_checks(
    result: EvalResult, evidence: Optional[dict[str, Any]], seeds: list[int], task: Any, workdir: str, referee: Any
) -> None:
    """Parent side, after a finalists' re-timing (worker_timing.run_finalists):
    each timed finalist's row against its own audit rounds
    (audit_check.audit_finalists). The step's checks do not apply: the job
    hands over no trial outputs and its result has no speedup of its own;
    the gate's verdicts on each comparison are read by the caller
    (finalists.apply_verdicts)."""
    audit_finalists(result, TrustedContext(task=task, seeds=seeds, workdir=workdir, referee=referee, evidence=evidence))


__all__ = [
    "TRUSTED_CHECKS",
    "finalist_checks",
    "TrustedCheck",
    "TrustedContext",
    "run_trusted_checks",
    "trusted_checks",
]

"""What a parent-side (trusted) check is.

The worker's checks (evaluator/checks/) run in the process the candidate
runs in; a program that corrupts that process can silence them or forge
their verdict. The checks here run in the parent, after the worker's
result has come back, on what the parent itself holds: the evidence the
worker handed over before any more of the program ran (copied out of its
reach), the timing's reports, the time the parent saw it hold the device's
timing slot, and the trusted referee's answers.

A check is one unit (a :class:`TrustedCheck`): its ``name`` and
:meth:`TrustedCheck.reasons`, the reasons it finds the result not to be
the program's own (an empty list when nothing is wrong). It may note what
it saw on the result (``census`` entries, a warning, the timing marked
unreliable), never the verdict: the composer
(:func:`kernelsmith.evaluator.trusted.trusted_checks`) overrules the result
with the first check's reasons (:func:`overrule`), and a later check does
not run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from ...result import EvalResult


@dataclass
class TrustedContext:
    """What the parent holds about one candidate's evaluation."""

    #: the candidate's task (kernelsmith.task.Task)
    task: Any
    #: the seeds the parent issued to the worker (the worker names them by index)
    seeds: list[int]
    #: the parent's folder holding its copies of the handed-over files (evidence.take_evidence)
    workdir: str
    #: the device pool's trusted referee (kernelsmith.evaluator.referee.Referee)
    referee: Any
    #: what the conversation took from the worker (protocol.converse): evidence.take_evidence's
    #: store (``trials``, ``repeated``) and the timing's reports (``timing_reports``); None: nothing
    evidence: Optional[dict[str, Any]] = None
    #: (start, end) of each time the worker held the device's timing slot; None where it had no slot
    slots: Optional[list[Any]] = None


class TrustedCheck:
    """One of the parent's checks on a worker's result."""

    #: a short name (docs, tests)
    name: ClassVar[str] = ""

    def reasons(self, result: EvalResult, ctx: TrustedContext) -> list[str]:
        """Why ``result`` is not the program's own; empty when nothing is
        wrong (or when the result is not one this check looks at: only a
        correct result is checked)."""
        raise NotImplementedError


def overrule(result: EvalResult, reasons: list[str]) -> None:
    """The hacked verdict for ``reasons`` (nothing when there are none):
    not correct, and no speedup of it stays."""
    if not reasons:
        return
    result.overrule_as_hacked(reasons[0])
    result.hack_reasons = list(reasons)


def withdraw_figures(result: EvalResult) -> None:
    """No figure of a hacked result is used, whichever check (the worker's
    or the parent's) said so."""
    if result.category == "hacked":
        result.speedup = result.speedup_ci_low = result.speedup_ci_high = None

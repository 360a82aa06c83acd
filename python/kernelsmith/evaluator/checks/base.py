"""What a hack check is, and the verdicts the worker ends an evaluation with.

A check is one unit (a :class:`Check`): the moments of the worker's
protocol it looks at (``points``) and the reasons it finds there
(:meth:`Check.reasons`, an empty list when nothing is wrong). The worker
composes the registered checks (``checks.CHECKS``) at each moment with
:func:`kernelsmith.evaluator.checks.enforce`; a check never builds a
verdict itself, it returns why.
"""
from __future__ import annotations

from typing import Any

# -- the moments of the protocol a check can look at, in the order they come --
#: the program is about to be loaded: a check takes what it compares with later (nothing of the program ran yet)
BEFORE_LOAD = "before load"
#: the integrity checkpoints: after loading the program, after the trials, after the timing
CHECKPOINT = "checkpoint"
#: one call of the program raised (its reasons, if any, are the verdict instead of the error)
CALL_RAISED = "call raised"
#: one call of the program returned: its inputs, before anything else reads them
CALL_INPUTS = "call inputs"
#: one call returned: what it ran (kernels, torch ops, the census)
CALL = "call"
#: one call returned, nothing found so far: its outputs (flattened)
CALL_OUTPUT = "call output"
#: a trial's call returned (before and after the reference): its inputs against the pristine copies
TRIAL_INPUTS = "trial inputs"
#: a trial's outputs (before and after the reference), before they are compared
TRIAL_OUTPUT = "trial output"
#: a trial's outputs do not match the reference's
TRIAL_MISMATCH = "trial mismatch"
#: a trial is over and passed
TRIAL_DONE = "trial done"
#: every trial passed
AFTER_TRIALS = "after trials"
#: the trials' evidence goes to the trusted referee (after the checkpoint that follows the trials)
HAND_OVER = "hand over"
#: one timing shape was timed
SHAPE_TIMED = "shape timed"
#: every shape was timed: the timed calls' output
TIMED_OUTPUT = "timed output"
#: after the timing: the program called again, checked, against what the timing says
AFTER_TIMING = "after timing"
#: the timing's outcome, in the result
TIMING_RESULT = "timing result"


class Verdict(Exception):
    """Ends the evaluation early with a result."""

    def __init__(self, **fields: Any) -> None:
        super().__init__(fields.get("error", ""))
        self.fields = fields


def hacked(reasons: list[str], **fields: Any) -> Verdict:
    """The verdict on a program that tried to cheat: ``reasons`` say how;
    ``fields`` what else the result must say (``correct=False``, the
    speedup withdrawn: ``speedup=None``)."""
    return Verdict(category="hacked", hacked=True, compiled=True, **fields, hack_reasons=list(reasons))


#: the fields a hacked verdict sets when it rejects a timed program: no speedup of it is used
NO_SPEEDUP = {"correct": False, "speedup": None}


class Check:
    """One check. Subclasses name the ``points`` they look at and return
    the reasons they find; ``verdict`` is what the hacked result also says
    (see :func:`hacked`). ``joins``: its reasons are added to those an
    earlier check found at the same point (one verdict names them all);
    otherwise an earlier finding ends the point before this check runs."""

    name: str = ""
    points: tuple[str, ...] = ()
    verdict: dict[str, Any] = {}
    joins: bool = False

    def reasons(self, at: str, ctx: "Context") -> list[str]:
        raise NotImplementedError

    def fields(self, at: str) -> dict[str, Any]:
        """What a hacked verdict on this check's reasons at ``at`` also says."""
        return self.verdict


class Context:
    """What the checks read: the worker's evaluation of one candidate (the
    task, the backend, the models, the comparison module ``cmp``, the
    census, the integrity snapshot, ``out``: the result being built) and,
    set by :func:`checks.enforce` at each point, that point's facts (the
    call's arguments, its outputs, the trial's label, ...)."""

    def __init__(self, **state: Any) -> None:
        self.__dict__.update(state)

    def update(self, **facts: Any) -> "Context":
        self.__dict__.update(facts)
        return self

    def __getattr__(self, name: str) -> Any:
        # a fact a point did not set: None, not an AttributeError inside a check
        if name.startswith("__"):
            raise AttributeError(name)
        return None


__all__ = ["Check", "Context", "Verdict", "hacked", "NO_SPEEDUP", "BEFORE_LOAD", "CHECKPOINT", "CALL_RAISED", "CALL_INPUTS", "CALL",
           "CALL_OUTPUT", "TRIAL_INPUTS", "TRIAL_OUTPUT", "TRIAL_MISMATCH", "TRIAL_DONE", "AFTER_TRIALS",
           "HAND_OVER", "SHAPE_TIMED", "TIMED_OUTPUT", "AFTER_TIMING", "TIMING_RESULT"]

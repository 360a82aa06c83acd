"""What a hack check is, and the verdicts the worker ends an evaluation with.

A check is one unit (a :class:`Check`): the moments of the worker's
protocol it looks at (``points``) and the reasons it finds there
(:meth:`Check.reasons`, an empty list when nothing is wrong). The worker
composes the registered checks (``checks.CHECKS``) at each moment with
:func:`kernelsmith.evaluator.checks.enforce`; a check never builds a
verdict itself, it returns why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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

#: The facts each point provides: :func:`checks.enforce` and
#: :func:`checks.findings` are called at a point with exactly these, set on
#: the context while its checks run and dropped after; reading any other
#: name that is not set raises (:meth:`Context.__getattr__`).
FACTS: dict[str, frozenset[str]] = {
    BEFORE_LOAD: frozenset(),
    CHECKPOINT: frozenset(),
    # the op guard of the call (what ran, and its frozen copy of the policy)
    CALL_RAISED: frozenset({"guard"}),
    # the harness's layout of the arguments taken before the call, the arguments after it, which call
    CALL_INPUTS: frozenset({"given", "args", "where"}),
    # the op guard, the census's record of the call, the backend's launch record
    CALL: frozenset({"guard", "seen", "launches"}),
    # the call's outputs (flattened), the launch record
    CALL_OUTPUT: frozenset({"flat", "launches"}),
    # the arguments after the call, the pristine copies they were cloned from, the trial's label
    TRIAL_INPUTS: frozenset({"args", "pristine", "label"}),
    # the program's outputs and the reference's, the pristine inputs, the trial's label
    TRIAL_OUTPUT: frozenset({"got", "expected", "pristine", "label"}),
    TRIAL_MISMATCH: frozenset({"got", "expected", "set_name", "label"}),
    # ...and the trial's index among all and the index of its inputs' seed
    TRIAL_DONE: frozenset({"got", "expected", "set_name", "step", "input_seed_index"}),
    # the last trial's input generator and its inputs, held for the refill checks
    AFTER_TRIALS: frozenset({"gen", "held"}),
    HAND_OVER: frozenset(),
    # a timing shape's input sets (the program's, the reference's), their layouts before, what
    # was printed, its name, whether there are several, each timed call's kernels
    SHAPE_TIMED: frozenset({"input_sets", "ref_sets", "given", "prints", "shape", "several", "per_call"}),
    # the last timed call's output and arguments
    TIMED_OUTPUT: frozenset({"last"}),
    # the first shape's generator and one input set, the first shape's timing outcome
    AFTER_TIMING: frozenset({"gen", "held", "first_outcome"}),
    # the timing's outcome, every shape combined
    TIMING_RESULT: frozenset({"outcome"}),
}

#: The evaluation's own state on the context, set by the worker (not a
#: point's facts: it stays for the whole evaluation): the job and its
#: channel, the result being built (``out``), the task and its config, the
#: backend, the reference and the models, the comparison module (``cmp``),
#: tolerances, the frozen policy, the census, the trials' bookkeeping, and
#: the helpers the checks call (``make_inputs``, ``clone``,
#: ``run_checked``, ``fail_from``). What a check stores for itself is its
#: own :attr:`Check.keeps`.
STATE: frozenset[str] = frozenset(
    {
        # worker._context, for every evaluation
        "job",
        "chan",
        "out",
        "backend",
        "task",
        "cfg",
        "ref",
        "cmp",
        "device",
        "dtype",
        "atol",
        "rtol",
        "trials",
        "cand_path",
        "workdir",
        "checks_on",
        "frozen",
        "policy",
        "meter",
        "phases",
        "harness",
        "fail_from",
        "make_inputs",
        "clone",
        "calls",
        "spent",
        "run_checked",
        # the program loaded and built (worker._load_candidate, _build_models, _start_census)
        "init_seed_index",
        "model",
        "model_new",
        "kernels",
        "torch_ops",
        "census",
        # the trials' bookkeeping (trials.run_trials)
        "trial_sets",
        "stats",
        "history",
        "referee_trials",
        "kept_forms",
        "last_of_set",
    }
)


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
    #: what the check stores on the context for its later points (e.g. at
    #: ``BEFORE_LOAD`` what it compares with at each ``CHECKPOINT``); it
    #: reads only these, its points' :data:`FACTS` and the :data:`STATE`
    keeps: tuple[str, ...] = ()

    def reasons(self, at: str, ctx: "Context") -> list[str]:
        raise NotImplementedError

    def fields(self, at: str) -> dict[str, Any]:
        """What a hacked verdict on this check's reasons at ``at`` also says."""
        return self.verdict


class Context:
    """What the checks read: the worker's evaluation of one candidate
    (:data:`STATE`: the task, the backend, the models, the comparison
    module ``cmp``, the census, ``out``: the result being built), what the
    checks keep (:attr:`Check.keeps`) and, set by :func:`checks.enforce` at
    each point, that point's facts (:data:`FACTS`: the call's arguments,
    its outputs, the trial's label, ...).

    Reading a name that is not set raises an AttributeError naming it and
    the point that is running, so a check that misspells a fact, or reads
    one its point does not provide, fails instead of never firing."""

    def __init__(self, **state: Any) -> None:
        self.__dict__.update(state)
        self.__dict__["_points"] = []  # the points running, innermost last (a check's call nests CALL's)

    if TYPE_CHECKING:  # a check stores its keeps as attributes (ctx.snapshot = ...): for mypy

        def __setattr__(self, name: str, value: Any) -> None: ...

    def update(self, **facts: Any) -> "Context":
        self.__dict__.update(facts)
        return self

    @property
    def point(self) -> str:
        """The point whose checks are running (the innermost), "" between points."""
        points: list[str] = self.__dict__["_points"]
        return points[-1] if points else ""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_points":
            raise AttributeError(name)
        at = self.point
        if not at:
            raise AttributeError(f"the checks' context has no {name!r} (no point is running, and it is not set)")
        facts = FACTS.get(at, frozenset())
        raise AttributeError(
            f"{name!r} is not a fact of point {at!r} (its facts: {', '.join(sorted(facts)) or 'none'})"
            " nor set on the checks' context"
        )


__all__ = [
    "Check",
    "Context",
    "Verdict",
    "hacked",
    "NO_SPEEDUP",
    "FACTS",
    "STATE",
    "BEFORE_LOAD",
    "CHECKPOINT",
    "CALL_RAISED",
    "CALL_INPUTS",
    "CALL",
    "CALL_OUTPUT",
    "TRIAL_INPUTS",
    "TRIAL_OUTPUT",
    "TRIAL_MISMATCH",
    "TRIAL_DONE",
    "AFTER_TRIALS",
    "HAND_OVER",
    "SHAPE_TIMED",
    "TIMED_OUTPUT",
    "AFTER_TIMING",
    "TIMING_RESULT",
]

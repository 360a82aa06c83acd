"""The worker's hack checks, one unit per file, composed in one list.

Each check (:class:`~.base.Check`) names the moments of the protocol it
looks at and returns the reasons it finds there; the worker calls
:func:`enforce` (or :func:`findings`) at each moment and turns reasons into
the one hacked verdict (:func:`~.base.hacked`). ``CHECKS`` is the order in
which checks at the same moment run, which is the order their reasons are
reported in. Adding a check is one new file here and one line in
``CHECKS`` (docs/architecture.md, "How to add a check").
"""

from __future__ import annotations

from typing import Any

from .base import FACTS, Check, Context, Verdict, hacked
from .census_work import CensusWork
from .inputs_unchanged import InputsUnchanged
from .input_layout import InputLayout
from .kernel_launched import KernelLaunched
from .policy_values import PolicyValues
from .provenance import Provenance
from .referee_evidence import RefereeEvidence
from .refill import Refill
from .replay import Replay
from .snapshot import IntegritySnapshot
from .threads import Threads
from .timed_inputs import TimedInputs
from .timed_kernels import TimedKernels
from .timed_output import TimedOutput
from .timer import TimerAgreement
from .timing_rejected import TimingRejected
from .torch_ops import TorchOps
from .torch_settings import TorchSettings
from .trivial_output import TrivialOutput

CHECKS: list[Check] = [
    IntegritySnapshot(),
    PolicyValues(),
    Threads(),
    InputLayout(),
    KernelLaunched(),
    TorchOps(),
    CensusWork(),
    Provenance(),
    InputsUnchanged(),
    TrivialOutput(),
    Replay(),
    RefereeEvidence(),
    Refill(),
    TimedInputs(),
    TimedKernels(),
    TimedOutput(),
    TimerAgreement(),
    TimingRejected(),
    TorchSettings(),
]


def findings(at: str, ctx: Context, **facts: Any) -> tuple[list[str], dict[str, Any]]:
    """The reasons the checks at ``at`` find (``facts``: that moment's,
    exactly those :data:`~.base.FACTS` declares for it, set on ``ctx`` while
    they run), and the fields of the verdict they make: the first check
    that finds something decides them; a later one adds its reasons only if
    it ``joins``, otherwise the moment ends there."""
    clash = [k for k in facts if k in vars(ctx)]
    if clash:
        raise TypeError(f"facts {clash} would replace the context's own")
    if at not in FACTS:
        raise ValueError(f"{at!r} is not a point of the protocol (checks.base.FACTS)")
    if set(facts) != FACTS[at]:
        raise TypeError(f"point {at!r} provides the facts {sorted(FACTS[at])}, not {sorted(facts)}")
    ctx.update(**facts)
    points = vars(ctx)["_points"]
    points.append(at)
    reasons: list[str] = []
    fields: dict[str, Any] = {}
    try:
        for check in CHECKS:
            if at not in check.points:
                continue
            if reasons and not check.joins:
                break
            found = check.reasons(at, ctx)
            if found:
                if not reasons:
                    fields = check.fields(at)
                reasons = reasons + list(found)
    finally:
        points.pop()
        for k in facts:  # a moment's facts (outputs, inputs) are not kept past it
            vars(ctx).pop(k, None)
    return reasons, fields


def enforce(at: str, ctx: Context, **facts: Any) -> None:
    """:func:`findings`, raised as the hacked verdict when there are any."""
    reasons, fields = findings(at, ctx, **facts)
    if reasons:
        raise hacked(reasons, **fields)


__all__ = ["CHECKS", "Check", "Context", "Verdict", "enforce", "findings", "hacked"]

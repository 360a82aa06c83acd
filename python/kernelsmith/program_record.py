"""ProgramRecord: a program as the evolve loop and the RL environment hand it
to the engine and record it in a trajectory.

The one place that turns an evaluation into what a program keeps of it: its
status and metrics (:func:`~kernelsmith.result.status_of`,
:func:`~kernelsmith.result.program_metrics`, computed once here), a compact
:class:`~kernelsmith.feedback.Feedback` (what the next prompt shows: the
renderer's fields, the timing and census cut to the keys it reads) and the
key of the whole :class:`~kernelsmith.result.EvalResult`, which a run
directory stores once, in ``evaluations.jsonl``
(:class:`kernelsmith.trajectory.EvalStore` reads it back).

The engine's binding takes a plain dict (``Program.from_dict``: source,
parent_id, island, iteration, metrics, status, feedback, id): :meth:`to_child`
writes it, with the key inside the feedback dict as ``eval_key`` (the
feedback is JSON the engine keeps and never reads; :class:`Feedback` ignores
the key), and :meth:`from_child` reads it back, from this shape or the first
one (the whole EvalResult as the feedback).

This module imports only the bottom layer (feedback, result), so any layer
may use it.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from .feedback import RENDERED_CENSUS_KEYS, RENDERED_TIMING_KEYS, Feedback
from .result import program_metrics, status_of

__all__ = ["EVAL_KEY", "ProgramRecord", "compact_feedback", "source_key"]

#: the name of the evaluation's key inside a program's feedback dict
EVAL_KEY = "eval_key"


def source_key(source: str) -> str:
    """The sha256 of a program's source: the key of its evaluation."""
    return hashlib.sha256(source.encode()).hexdigest()


def compact_feedback(value: Any) -> Feedback:
    """What a program keeps of its evaluation for the prompts: the
    :class:`Feedback` of ``value`` (an EvalResult, a feedback dict, a
    Feedback or None) with its timing and census cut to the keys the
    renderer reads, so a prompt renders exactly as from the whole result."""
    feedback = Feedback.of(value)
    timing = feedback.timing if isinstance(feedback.timing, Mapping) else {}
    census = feedback.census if isinstance(feedback.census, Mapping) else {}
    return dataclasses.replace(
        feedback,
        timing={k: timing[k] for k in RENDERED_TIMING_KEYS if k in timing},
        census={k: census[k] for k in RENDERED_CENSUS_KEYS if k in census},
    )


@dataclass
class ProgramRecord:
    """A program told to the engine (a seed, a step's child, an episode's
    turn). ``id`` is None until the engine's id is known; ``eval_key`` is
    None when the program was not evaluated (a failed edit, the reference)."""

    source: str
    parent_id: int = -1  # -1: no parent (a seed)
    island: int = -1  # -1: the request's island (tell) or every island (add_seed)
    iteration: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    status: str = "pending"
    feedback: Feedback = field(default_factory=Feedback)
    eval_key: Optional[str] = None
    id: Optional[int] = None

    @classmethod
    def evaluated(
        cls, source: str, result: Any, *, parent_id: int, island: int, iteration: int, eval_key: Optional[str]
    ) -> "ProgramRecord":
        """A program the evaluator judged: its status, metrics and compact
        feedback from ``result``, and the key of the whole result."""
        return cls(
            source=source,
            parent_id=parent_id,
            island=island,
            iteration=iteration,
            metrics=program_metrics(result),
            status=status_of(result),
            feedback=compact_feedback(result),
            eval_key=eval_key,
        )

    @classmethod
    def unevaluated(
        cls,
        source: str,
        status: str,
        feedback: Feedback,
        *,
        parent_id: int,
        island: int,
        iteration: int,
        metrics: Optional[dict[str, Any]] = None,
    ) -> "ProgramRecord":
        """A program told without an evaluation (a failed edit, the
        reference as start): score 0 unless ``metrics`` say otherwise."""
        return cls(
            source=source,
            parent_id=parent_id,
            island=island,
            iteration=iteration,
            metrics=dict(metrics) if metrics is not None else {"score": 0.0},
            status=status,
            feedback=feedback,
        )

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    def feedback_dict(self) -> dict[str, Any]:
        """The feedback as the engine keeps it: the compact fields, then the key."""
        data = self.feedback.to_dict()
        if self.eval_key is not None:
            data[EVAL_KEY] = self.eval_key
        return data

    def to_child(self) -> dict[str, Any]:
        """The engine's Program fields (and the trajectory's ``child``), in
        the order the loop has always written them; ``id`` when known."""
        data: dict[str, Any] = {
            "source": self.source,
            "parent_id": self.parent_id,
            "island": self.island,
            "iteration": self.iteration,
            "metrics": dict(self.metrics),
            "status": self.status,
            "feedback": self.feedback_dict(),
        }
        if self.id is not None:
            data["id"] = self.id
        return data

    @classmethod
    def from_child(cls, data: Mapping[str, Any]) -> "ProgramRecord":
        """From :meth:`to_child`, an engine Program's dict, or a child of the
        first trajectory shape (the whole EvalResult as its feedback, cut
        here to the compact view); unknown keys are ignored."""
        feedback = data.get("feedback") or {}
        key = feedback.get(EVAL_KEY) if isinstance(feedback, Mapping) else None
        pid = data.get("id")
        return cls(
            source=str(data.get("source") or ""),
            parent_id=int(data.get("parent_id", -1)),
            island=int(data.get("island", -1)),
            iteration=int(data.get("iteration", 0)),
            metrics=dict(data.get("metrics") or {}),
            status=str(data.get("status") or "pending"),
            feedback=compact_feedback(feedback),
            eval_key=str(key) if key is not None else None,
            id=int(pid) if pid is not None else None,
        )

    @classmethod
    def of(cls, value: Any) -> "ProgramRecord":
        """A ProgramRecord from a ProgramRecord or a child dict."""
        return value if isinstance(value, ProgramRecord) else cls.from_child(value)

"""The evaluation service: static checks, sandboxed workers, the correctness
protocol and reward-hack guards. See docs/evaluator.md."""

from __future__ import annotations

from typing import Any, Optional

from ..result import EvalResult
from .sandbox import Limits, bwrap_status, scrub_env
from .service import Evaluator
from .ray_executor import RayEvaluator


def make_evaluator(executor: str = "local", workers: Optional[int] = None, ray_address: Optional[str] = None) -> Any:
    """The evaluator an evolve or bench run uses: the local worker pool
    (``workers`` None: one worker per local GPU, one on a CPU-only host) or
    Ray (one task per candidate; ``workers`` caps the candidates in flight)."""
    if executor == "ray":
        return RayEvaluator(address=ray_address, max_in_flight=workers)
    if executor != "local":
        raise ValueError(f"executor must be 'local' or 'ray', got '{executor}'")
    return Evaluator(workers=workers)


__all__ = ["EvalResult", "Evaluator", "Limits", "bwrap_status", "make_evaluator", "scrub_env"]

"""The evaluation service: static checks, sandboxed workers, the correctness
protocol and reward-hack guards. See docs/evaluator.md."""
from __future__ import annotations

from ..result import EvalResult
from .sandbox import Limits, bwrap_status, scrub_env
from .service import Evaluator

__all__ = ["EvalResult", "Evaluator", "Limits", "bwrap_status", "scrub_env"]

"""ProgramRecord, the program the loop and the RL environment hand the
engine: its dict round-trips, its compact feedback renders as the whole
result does, a child of the first trajectory shape reads back, and the one
speedup-over-the-parent rule serves the reward and the exports alike."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kernelsmith.engine import Program
from kernelsmith.feedback import Feedback, render_feedback
from kernelsmith.program_record import EVAL_KEY, ProgramRecord, compact_feedback, source_key
from kernelsmith.result import EvalResult, program_metrics, status_of
from kernelsmith.rewards.core import speedup_over_parent, speedup_ratio
from standin_evaluator import RichEvaluator

SEED = (Path(__file__).parent / "fixtures_evolve" / "scale" / "seed.py").read_text()
VARIANTS = [
    SEED,
    SEED.replace("BLOCK = 64", "BLOCK = 256"),
    SEED.replace("WARPS = 1", "WARPS = 8"),
    SEED.replace("BLOCK = 64", "BLOCK = 32"),
    SEED.replace("BLOCK = 64", "BLOCK = 512").replace("WARPS = 1", "WARPS = 2"),
    SEED.replace("BLOCK = 64  # tune: [32, 64, 128, 256, 512]\n", ""),
]


def _results() -> list[EvalResult]:
    evaluator = RichEvaluator()
    return [asyncio.run(evaluator.evaluate_async(None, source)) for source in VARIANTS]


def test_evaluated_program_keeps_status_metrics_compact_feedback_and_key():
    for source, result in zip(VARIANTS, _results()):
        key = source_key(source)
        program = ProgramRecord.evaluated(source, result, parent_id=3, island=1, iteration=4, eval_key=key)
        assert program.status == status_of(result) and program.metrics == program_metrics(result)
        for chars in (6000, 300, 0):  # the prompt sees exactly what the whole result renders
            assert render_feedback(program.feedback, chars) == render_feedback(result, chars)
        child = program.to_child()
        assert list(child) == ["source", "parent_id", "island", "iteration", "metrics", "status", "feedback"]
        assert child["feedback"][EVAL_KEY] == key and "hardware" not in child["feedback"]
        assert set(child["feedback"].get("timing", {})) <= {"confidence", "shapes"}
        assert ProgramRecord.from_child(child) == program
        # the engine's binding takes the dict as it is
        assert Program.from_dict({**child, "id": -1}).feedback == child["feedback"]
        # a child of the first shape (the whole result as its feedback) reads as the compact view
        old = ProgramRecord.from_child({**child, "feedback": result.to_dict(), "id": 7})
        assert old.feedback == compact_feedback(result) and old.eval_key is None and old.id == 7


def test_unevaluated_program():
    program = ProgramRecord.unevaluated(
        "src",
        "edit-failed",
        Feedback(category="edit", edit_error="no code", compiled=False),
        parent_id=2,
        island=0,
        iteration=1,
    )
    assert program.metrics == {"score": 0.0} and program.eval_key is None
    assert program.to_child()["feedback"] == {"category": "edit", "compiled": False, "edit_error": "no code"}


@pytest.mark.parametrize(
    "child_rt, child_sp, parent_rt, parent_sp, expected",
    [
        (0.5, 3.0, 1.0, 2.0, 2.0),  # runtimes when both were measured
        (None, 3.0, None, 2.0, 1.5),  # else the ratio of the speedups over the reference
        (0.5, 3.0, 0.0, 2.0, 1.5),  # a runtime that is not positive counts as unknown
        (None, None, 1.0, 2.0, None),
    ],
)
def test_one_speedup_over_the_parent(child_rt, child_sp, parent_rt, parent_sp, expected):
    assert speedup_ratio(child_rt, child_sp, parent_rt, parent_sp) == (pytest.approx(expected) if expected else None)
    result = EvalResult(compiled=True, correct=True, category="ok", runtime_ms=child_rt, speedup=child_sp)
    assert speedup_over_parent(result, parent_rt, parent_sp) == speedup_ratio(child_rt, child_sp, parent_rt, parent_sp)

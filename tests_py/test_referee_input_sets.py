"""The referee re-checks one trial of every input set the worker names;
a task with more input sets than the old fixed bound of 16 (KernelBench-X's
gelu harness has 17-18 calls, each an input set ``kbx_case_<i>``) had every
program, honest ones included, rejected as forging the referee's hand-over
(seen on the H100, benchmarks/results/h100_kernelbenchx_2026-11-26.md).
The bound is now the task's own input sets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernelsmith.evaluator import Evaluator
from kernelsmith.task import Task

DEG = Path(__file__).resolve().parent / "fixtures" / "degenerate"

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="CPU test: the interpreter")

EXTRA = 20


def _task(tmp_path: Path) -> Task:
    source = (DEG / "tasks" / "shifted_relu.py").read_text().replace("torch.rand(", "torch.randn(")
    source += "".join(f"\n\ndef get_inputs_{k}():\n    return [torch.randn({k + 1}, 64) * 3]\n" for k in range(EXTRA))
    path = tmp_path / "many_sets.py"
    path.write_text(source)
    task = Task.load(path, backend="triton", trials=1)
    task.config.extra_inputs = [f"get_inputs_{k}" for k in range(EXTRA)]
    return task


def test_an_honest_program_on_a_task_with_more_than_16_input_sets_is_accepted(tmp_path):
    task = _task(tmp_path)
    with Evaluator(backend="triton", workers=1, timeout_s=300, timing=False) as ev:
        honest = ev.evaluate(task, (DEG / "triton" / "shifted_relu.py").read_text())
        zeros = ev.evaluate(task, (DEG / "triton" / "zeros.py").read_text())
    assert honest.category == "ok" and honest.correct and not honest.hacked, (honest.error, honest.hack_reasons)
    assert honest.census.get("referee_trials") == EXTRA + 1  # every input set re-checked by the referee
    assert not zeros.correct  # still judged: a wrong program is not let through by the larger bound

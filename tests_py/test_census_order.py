"""The provenance check takes the last thing that wrote an output's memory
as what the output must still hold, in the order things happened. An output
allocated with ``empty_like`` of a kernel's intermediate (an allowed op
derived from the kernels' work) and then written by a later kernel was judged
by its uninitialised bytes at the allocation, because derived spans were
listed after every launch: honest two- and three-kernel programs on the host
were "hacked" ("output #0 changed after the program's kernel last wrote it").
Real programs of the throughput benchmark, on the CPU (Triton interpreter,
small shapes); a program returning a cached result stays rejected."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernelsmith.evaluator import Evaluator
from kernelsmith.task import Task

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
    reason="CPU evaluator tests run the Triton interpreter (set TRITON_INTERPRET=1)",
)

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "eval_throughput"
CASES = {  # program -> (task, expected category)
    "matmul_softmax_two_kernels": ("matmul_softmax", "ok"),
    "matmul_softmax_three_pass": ("matmul_softmax", "ok"),
    "linear_gelu_unfused": ("linear_gelu", "ok"),
    "matmul_softmax_cached": ("matmul_softmax", "hacked"),
}


def test_multi_kernel_programs_are_judged_by_what_wrote_last(monkeypatch):
    monkeypatch.setenv("KS_BENCH_SMALL", "1")  # the tasks' small shapes, for the interpreter
    items = [
        (Task.load(BENCH / "tasks" / task), (BENCH / "l2" / f"{name}.py").read_text())
        for name, (task, _) in CASES.items()
    ]
    with Evaluator(backend="triton", workers=2, timeout_s=150, timing=False) as ev:
        out = ev.evaluate_many(items)
    for (name, (_, expected)), r in zip(CASES.items(), out):
        assert r.category == expected, (name, r.category, r.hack_reasons, r.error[:400])
        if expected == "ok":
            assert r.census["referee"] == "agreed", (name, r.census)

"""Audit rounds on every timed shape (worker_audit.audit_timing,
protocol.answer_audit, trusted/audit_check.judge_shapes).

A task timed on several shapes (TaskConfig.timing_shapes) combines every
shape's report into its speedup, so every shape's report must be bounded by
rounds under the parent's clock. Until session 20 only the first shape was
audited: ``fixtures/hacks_shapes/report_patch_second_shape.py`` leaves the
first shape's report as measured and divides the program's time on every
later shape by 20 (with the result the parent's own combination of those
reports), which no check saw. Here: the parent's side of the messages (the
plan sized by the named shape's report, rounds only on the task's shapes,
the bound per shape), the judgement per shape, and a real pool on a relu
timed on two shapes: the honest seed passes the rounds on both shapes, the
forger is `hacked` on the second."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from kernelsmith.evaluator import Evaluator
from kernelsmith.evaluator import audit as A
from kernelsmith.evaluator.protocol import AUDIT_PLAN, AUDIT_REQUEST, CALLS, NONCE, answer_audit
from kernelsmith.evaluator.trusted.audit_check import judge_shapes
from kernelsmith.task import Task

HERE = Path(__file__).parent
RELU = HERE.parent / "examples" / "triton" / "relu"
FORGER = HERE / "fixtures" / "hacks_shapes" / "report_patch_second_shape.py"
SHAPES = ["get_inputs", "get_inputs_odd"]

needs_interpreter = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
    reason="CPU evaluator tests run the Triton interpreter (set TRITON_INTERPRET=1)",
)


def _reports() -> list[dict]:
    # the first shape's program at 0.5 ms, the second's at 0.01 ms
    return [
        {"shape": "get_inputs", "cand_ms": 0.5, "ref_ms": 1.0},
        {"shape": "get_inputs_odd", "cand_ms": 0.01, "ref_ms": 0.02},
    ]


def test_each_shapes_plan_is_sized_by_its_own_report_and_rounds_stay_on_the_tasks_shapes():
    evidence = {"timing_reports": _reports(), "audit_shapes": SHAPES, "audit_comparisons": [None]}
    first = answer_audit({"type": AUDIT_PLAN, "call_bytes": 1024, "shape": "get_inputs"}, evidence)
    second = answer_audit({"type": AUDIT_PLAN, "call_bytes": 1024, "shape": "get_inputs_odd"}, evidence)
    assert first[CALLS] == A.calls_per_round(0.5e-3, 1024, True)
    assert second[CALLS] == A.calls_per_round(0.01e-3, 1024, True) > first[CALLS]
    # a plan that names no shape is the first shape's (a worker before session 20)
    assert answer_audit({"type": AUDIT_PLAN, "call_bytes": 1024}, {**evidence})[CALLS] == first[CALLS]
    for name in SHAPES:
        answer_audit({"type": AUDIT_REQUEST, "set": name, "calls": 1}, evidence)
    assert [(a["set"], a["planned"]) for a in evidence["audits"]] == [
        ("get_inputs", first[CALLS]),
        ("get_inputs_odd", second[CALLS]),
    ]
    assert "audits_refused" not in evidence
    # a round on a set the task does not time is refused: a program choosing
    # the inputs it is audited on
    assert NONCE in answer_audit({"type": AUDIT_REQUEST, "set": "get_inputs_mine", "calls": 1}, evidence)
    assert len(evidence["audits"]) == 2 and evidence["audits_refused"]
    # the bound is per shape: one shape's rounds do not use up another's
    evidence = {"timing_reports": _reports(), "audit_shapes": SHAPES, "audit_comparisons": [None]}
    for _ in range(4 * A.ROUNDS):
        answer_audit({"type": AUDIT_REQUEST, "set": "get_inputs", "calls": 1}, evidence)
    answer_audit({"type": AUDIT_REQUEST, "set": "get_inputs_odd", "calls": 1}, evidence)
    assert "audits_refused" not in evidence and len(evidence["audits"]) == 4 * A.ROUNDS + 1
    answer_audit({"type": AUDIT_REQUEST, "set": "get_inputs", "calls": 1}, evidence)
    assert evidence["audits_refused"]


def test_a_shape_without_rounds_makes_the_timing_hacked_and_the_record_keeps_each_shape():
    def reported(name, several):
        assert several
        return {"get_inputs": (0.5, 1.0), "get_inputs_odd": (0.01, 0.02)}[name]

    # rounds that did not complete on the first shape: it is unaudited; the
    # second has none at all: its report was bounded by nothing
    audits = [{"set": "get_inputs", "error": "RuntimeError: boom", "calls": 1} for _ in range(A.ROUNDS)]
    judged = judge_shapes(audits, False, None, SHAPES, reported, False)
    assert judged.hacked and judged.hacked[0].startswith(
        "timing shape get_inputs_odd: the timing reported a speedup but no audit round ran"
    ), judged.hacked
    assert judged.unreliable == ["timing shape get_inputs: the audit rounds did not complete (RuntimeError: boom)"], (
        judged.unreliable
    )
    assert set(judged.record["shapes"]) == {"get_inputs"} and judged.record["unaudited"]
    # one shape: its rounds are judged as before, with no shape named
    judged = judge_shapes(audits, False, None, ["get_inputs"], lambda n, s: (0.5, 1.0), False)
    assert not judged.hacked and judged.unreliable == ["the audit rounds did not complete (RuntimeError: boom)"]
    assert "shapes" not in judged.record


@pytest.fixture(scope="module")
def two_shapes(tmp_path_factory):
    """The seed and the second-shape forger on relu timed on two shapes."""
    root = tmp_path_factory.mktemp("shapes") / "relu"
    shutil.copytree(RELU, root)
    (root / "task.yaml").write_text((RELU / "task.yaml").read_text() + f"timing_shapes: [{', '.join(SHAPES)}]\n")
    task = Task.load(root)
    assert task.config.timed_shapes == SHAPES
    items = [(task, (RELU / "seed.py").read_text()), (task, FORGER.read_text())]
    with Evaluator(backend="triton", workers=2, timeout_s=150, timing=True) as ev:
        seed, forger = ev.evaluate_many(items)
    return seed, forger


def _show(r) -> str:
    return f"{r.category}: {r.error[:600]} {r.hack_reasons} {(r.census or {}).get('audit')}\n{r.log_tail[-1200:]}"


@needs_interpreter
def test_the_honest_seed_passes_the_rounds_on_every_shape(two_shapes):
    seed, _ = two_shapes
    assert seed.category == "ok" and seed.speedup is not None, _show(seed)
    shapes = seed.census["audit"]["shapes"]
    assert set(shapes) == set(SHAPES), shapes
    for name, record in shapes.items():
        assert record["rounds"] == A.ROUNDS and record["excess"] < 2, (name, record)
    assert seed.census["audit"]["excess"] == shapes["get_inputs"]["excess"]


@needs_interpreter
def test_a_report_forged_on_a_later_shape_is_caught_by_that_shapes_rounds(two_shapes):
    from test_integrity_v3_audit import busy_figures

    _, forger = two_shapes
    reason = (
        r"^timing shape get_inputs_odd: the timing reported [\d.e-]+ ms per call of the program and [\d.e-]+ ms of "
        r"the reference; the parent's own clock saw the program's (?:call|\d+ calls) take at least"
    )
    shapes = ((forger.census or {}).get("audit") or {}).get("shapes") or {}
    if busy_figures(forger, reason, shapes.get("get_inputs_odd") or {}):
        return
    assert forger.category == "hacked" and forger.speedup is None, _show(forger)
    assert len(forger.hack_reasons) == 1, forger.hack_reasons
    assert re.search(reason, forger.hack_reasons[0]), forger.hack_reasons

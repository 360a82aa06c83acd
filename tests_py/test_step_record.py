"""StepRecord, the typed trajectory record: the loop writes it, every reader
reads it back through ``from_dict``. The runs here are real ``evolve`` runs
(offline mutator, replayed answers, a run started from the reference) with
the cost-model evaluator standing in for the GPU; the checks are on the
bytes of their ``trajectory.jsonl`` (each step's whole result stored once,
in ``evaluations.jsonl``, the records keeping its key), on records of the
older shape (test_record_v1.py: whole run folders of the first shape), and
on export and report reading the run the loop wrote."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernelsmith.bench.collect import collect_run
from kernelsmith.edit import EditResult
from kernelsmith.evolve import evolve_sync, load_evolve_config, read_trajectory
from kernelsmith.export import SFTConfig, export_sft, load_run, read_jsonl
from kernelsmith.report.html import build_report
from kernelsmith.result import EvalResult
from kernelsmith.program_record import EVAL_KEY, ProgramRecord
from kernelsmith.trajectory import STEP_SCHEMA_VERSION, EvalStore, StepRecord, read_step_records
from standin_evaluator import CostModelEvaluator

TASK = Path(__file__).parent / "fixtures_evolve" / "scale"
SEED = (TASK / "seed.py").read_text()

# The keys the loop writes per kind of step, in order (the on-disk contract
# export, reports and older tools rely on; StepRecord must not change them).
REQUEST_KEYS = [
    "schema_version",
    "kind",
    "request_id",
    "iteration",
    "island",
    "mode",
    "parent_id",
    "parent_metrics",
    "inspiration_ids",
    "prompt",
    "prompt_meta",
]
EXPECTED_KEYS = {
    "seed": [
        "schema_version",
        "kind",
        "step",
        "name",
        "child_id",
        "copy_ids",
        "child_source",
        "status",
        "metrics",
        "eval_key",
        "child",
        "time",
    ],
    "reference": [
        "schema_version",
        "kind",
        "step",
        "name",
        "child_id",
        "copy_ids",
        "child_source",
        "status",
        "metrics",
        "eval_key",
        "time",
    ],
    "edit-failed": REQUEST_KEYS
    + [
        "raw_response",
        "reasoning",
        "model",
        "usage",
        "latency_s",
        "edit",
        "child_id",
        "status",
        "metrics",
        "step",
        "time",
        "child",
    ],
    "llm-error": REQUEST_KEYS
    + [
        "raw_response",
        "model",
        "proposal_error",
        "llm_error",
        "latency_s",
        "status",
        "child_id",
        "step",
        "time",
        "child",
    ],
    "duplicate": REQUEST_KEYS
    + [
        "raw_response",
        "reasoning",
        "model",
        "usage",
        "latency_s",
        "edit",
        "child_source",
        "duplicate",
        "child_id",
        "status",
        "step",
        "time",
        "child",
    ],
    "correct": REQUEST_KEYS
    + [
        "raw_response",
        "reasoning",
        "model",
        "usage",
        "latency_s",
        "edit",
        "child_source",
        "eval_key",
        "child_id",
        "status",
        "metrics",
        "step",
        "time",
        "child",
    ],
}


def _config(**kw):
    base = dict(iterations=6, seed=7, model="mutate", proposal_concurrency=2, checkpoint_every=3)
    base.update(kw)
    return load_evolve_config(None, **base)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Three real runs: offline mutation, replayed answers that hit every
    kind of step (edit failure, LLM failure, duplicate, evaluated), and a
    run started from the reference (no seed program)."""
    root = tmp_path_factory.mktemp("step_record")
    out = {"mutate": root / "mutate", "replay": root / "replay", "reference": root / "reference"}
    evolve_sync(TASK, _config(), out["mutate"], evaluator=CostModelEvaluator())

    faster = SEED.replace("BLOCK = 64", "BLOCK = 256")
    answers = [
        {"iteration": 1, "raw_response": "no code in this answer"},
        {
            "iteration": 2,
            "raw_response": None,
            "proposal_error": "HTTP 500",
            "llm_error": {"kind": "server", "message": "HTTP 500"},
        },
        {"iteration": 3, "raw_response": "```python\n" + SEED + "```\n"},
        {"iteration": 4, "raw_response": "```python\n" + faster + "```\n"},
    ]
    recorded = root / "answers.jsonl"
    recorded.write_text("".join(json.dumps(a) + "\n" for a in answers))
    evolve_sync(
        TASK,
        _config(model=f"replay:{recorded}", iterations=4, proposal_concurrency=1, edit_mode="full"),
        out["replay"],
        evaluator=CostModelEvaluator(),
    )

    no_seed = root / "no_seed_task"
    no_seed.mkdir()
    for name in ("reference.py", "task.yaml"):
        shutil.copy(TASK / name, no_seed / name)
    evolve_sync(no_seed, _config(iterations=3), out["reference"], evaluator=CostModelEvaluator())
    return out


def _lines(run: Path) -> list[str]:
    return (run / "trajectory.jsonl").read_text().splitlines()


def test_round_trip_is_byte_identical(runs):
    """Every record the loop wrote reads back and writes out as the same line."""
    checked = 0
    for run in runs.values():
        for line in _lines(run):
            record = StepRecord.from_dict(json.loads(line))
            assert json.dumps(record.to_dict()) == line
            checked += 1
    assert checked >= 6 + 1 + 4 + 1 + 3 + 1


def test_fields_are_typed(runs):
    records = read_step_records(runs["mutate"])
    evaluations = EvalStore.load(runs["mutate"])
    seed, steps = records[0], records[1:]
    assert seed.kind == "seed" and seed.is_seed and not seed.is_reference
    assert isinstance(evaluations.of(seed), EvalResult) and evaluations.of(seed).correct
    assert seed.program_ids == seed.copy_ids and seed.child_id == seed.copy_ids[0]
    assert [r.kind for r in steps] == ["step"] * 6
    evaluated = [r for r in steps if r.eval_key is not None]
    assert evaluated, "the mutator's children are evaluated"
    for record in evaluated:
        assert isinstance(record.edit, EditResult) and record.edit.ok
        assert evaluations.of(record).speedup == pytest.approx(record.metric("speedup"))
        assert isinstance(record.child, ProgramRecord) and record.child.eval_key == record.eval_key
        assert record.source == record.child_source == record.child.source
        assert record.status == record.child.status == "correct"
    assert [r.step for r in records] == list(range(len(records)))
    assert all(r.schema_version == STEP_SCHEMA_VERSION for r in records)


def test_each_kind_of_step_keeps_its_keys(runs):
    """The replayed run hits each path through the loop; each writes exactly
    the keys it wrote before StepRecord existed."""
    by_status = {}
    for line in _lines(runs["replay"]) + _lines(runs["reference"])[:1]:
        data = json.loads(line)
        key = (
            "seed"
            if data["kind"] == "seed" and data["name"] != "reference"
            else "reference"
            if data["kind"] == "seed"
            else data["status"]
        )
        by_status.setdefault(key, list(data))
    assert by_status == EXPECTED_KEYS

    records = {r.status: r for r in read_step_records(runs["replay"])}
    failed = records["llm-error"]
    assert failed.llm_failed and failed.proposal_error == "HTTP 500" and failed.llm_error["kind"] == "server"
    assert failed.edit is None and failed.eval_key is None and failed.child is None
    assert records["edit-failed"].edit.ok is False and records["edit-failed"].eval_key is None
    assert records["edit-failed"].child.feedback.category == "edit" and records["edit-failed"].child.eval_key is None
    assert records["duplicate"].duplicate and records["duplicate"].child_id is None
    reference = read_step_records(runs["reference"])[0]
    assert reference.is_reference and reference.eval_key is None and reference.child is None


def test_older_record_shapes_load():
    """Records as the first loop wrote them: no schema_version, seeds without
    copy_ids or child, an LLM failure without llm_error, an EvalResult of
    schema 1 with the old per-backend hardware dict."""
    old_eval = {
        "compiled": True,
        "correct": True,
        "category": "ok",
        "speedup": 1.25,
        "runtime_ms": 0.8,
        "ref_runtime_ms": 1.0,
        "hardware": {"device": "NVIDIA H100 80GB HBM3", "torch": "2.3.0"},
        "schema_version": 1,
    }
    seed = StepRecord.from_dict(
        {
            "kind": "seed",
            "step": 0,
            "name": "seed",
            "child_id": 0,
            "child_source": SEED,
            "status": "correct",
            "metrics": {"score": 1.25},
            "eval": old_eval,
            "time": 1.0,
        }
    )
    assert seed.copy_ids is None and seed.program_ids == [0] and seed.child is None
    # the first shape's inline result is kept, and found as a keyed one is
    assert seed.inline_eval.speedup == 1.25 and seed.inline_eval.schema_version == 1 and seed.eval_key is None
    assert EvalStore().of(seed) is seed.inline_eval
    assert seed.source == SEED
    failed = StepRecord.from_dict(
        {
            "kind": "step",
            "request_id": 0,
            "iteration": 1,
            "island": 0,
            "mode": "explore",
            "parent_id": 0,
            "parent_metrics": {},
            "inspiration_ids": [],
            "prompt": [],
            "prompt_meta": {},
            "raw_response": None,
            "model": "m",
            "proposal_error": "timeout",
            "latency_s": 3.0,
            "child_id": None,
            "status": "edit-failed",
            "step": 1,
            "time": 2.0,
            "child": None,
        }
    )
    assert failed.llm_failed and failed.llm_error is None and failed.usage is None
    # a record with nothing but what the replay proposer needs
    minimal = StepRecord.from_dict({"iteration": 3, "raw_response": "text"})
    assert minimal.kind == "step" and minimal.step is None and minimal.parent_metrics == {}


def test_each_result_is_stored_once(runs):
    """The whole EvalResult is in evaluations.jsonl, once per evaluation:
    records keep its key, the child (the engine's program) a compact
    feedback and the key; nothing else holds the result."""
    for run in runs.values():
        rows = (
            [json.loads(line) for line in (run / "evaluations.jsonl").read_text().splitlines()]
            if (run / "evaluations.jsonl").exists()
            else []
        )
        keys = [r.get("key") or r["sha256"] for r in rows]
        assert len(keys) == len(set(keys))
        for line in _lines(run):
            data = json.loads(line)
            assert "eval" not in data
            child = data.get("child") or {}
            assert child.get("feedback", {}).get(EVAL_KEY) == (data.get("eval_key") if child else None)
            if data.get("eval_key") is not None:
                assert data["eval_key"] in keys
                assert set(child["feedback"].get("timing", {})) <= {"confidence", "shapes"}
                assert "hardware" not in child["feedback"] and "phases" not in child["feedback"]
        referenced = [json.loads(line).get("eval_key") for line in _lines(run)]
        assert set(keys) == {k for k in referenced if k is not None}


def test_unknown_keys_are_ignored_and_newer_versions_refused(runs):
    data = json.loads(_lines(runs["mutate"])[1])
    record = StepRecord.from_dict({**data, "grader_notes": {"x": 1}, "reward_v2": 0.5})
    assert record.to_dict() == data
    with pytest.raises(ValueError, match="newer"):
        StepRecord.from_dict({**data, "schema_version": STEP_SCHEMA_VERSION + 1})
    with pytest.raises(ValueError, match="kind"):
        StepRecord.from_dict({**data, "kind": "checkpoint"})


def test_old_run_directory_still_exports_and_reports(runs, tmp_path):
    """A run whose trajectory has the older shape (no schema_version, no
    copy_ids, seeds without child) is read by export, bench and report."""
    old = tmp_path / "old"
    shutil.copytree(runs["mutate"], old)
    lines = []
    for line in _lines(old):
        data = json.loads(line)
        data.pop("schema_version")
        if data["kind"] == "seed":
            data.pop("copy_ids")
            data.pop("child")
        lines.append(json.dumps(data))
    (old / "trajectory.jsonl").write_text("\n".join(lines) + "\n")

    run = load_run(old)
    assert [s.record.request_id for s in run.steps] == [s.record.request_id for s in load_run(runs["mutate"]).steps]
    assert run.seeds and run.seeds[0].is_seed and run.seeds[0].source == SEED
    assert collect_run(old).status_counts == collect_run(runs["mutate"]).status_counts
    assert "kernelsmith run" in build_report(old)


def test_export_and_report_read_the_loops_run(runs, tmp_path):
    raw = read_trajectory(runs["mutate"])
    run = load_run(runs["mutate"])
    steps = [r for r in raw if r["kind"] == "step"]
    assert len(run.steps) == len(steps)
    for step, data in zip(run.steps, steps):
        assert isinstance(step.record, StepRecord)
        assert (step.step, step.status, step.response) == (data["step"], data["status"], data["raw_response"])
    best = max(s.child_speedup or 0.0 for s in run.steps)
    assert best == pytest.approx(max(d.get("metrics", {}).get("speedup", 0.0) for d in steps))

    summary = export_sft([runs["mutate"]], tmp_path / "sft", config=SFTConfig(min_speedup=0.0))
    samples = read_jsonl(tmp_path / "sft" / "kernelsmith_sft.jsonl")
    assert len(samples) == summary.kept > 0 and summary.steps_seen == len(steps)
    responses = {d["raw_response"] for d in steps}
    assert all(s["messages"][-1]["content"] in responses for s in samples)

    result = collect_run(runs["replay"])
    assert result.status_counts == {"correct": 2, "edit-failed": 1, "llm-error": 1, "duplicate": 1}
    assert result.best_speedup == pytest.approx(
        max(d["metrics"]["speedup"] for d in read_trajectory(runs["replay"]) if d.get("status") == "correct")
    )
    page = build_report(runs["replay"])
    for status in ("llm-error", "edit-failed", "duplicate", "correct"):
        assert f"data-status='{status}'" in page
    assert "HTTP 500" in page  # the LLM failure's error, from StepRecord.proposal_error

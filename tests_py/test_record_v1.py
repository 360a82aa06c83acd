"""Run folders of the trajectory's first shape (schema 1: each step's whole
EvalResult inline in its record and again in its child's feedback) still
load, resume and export as they did. The fixture (fixtures_record_v1/,
make.py says how) was written, with its expected exports, by the code of the
commit before the step's result was stored once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernelsmith.bench.collect import collect_run
from kernelsmith.evolve import evolve_sync
from kernelsmith.export import RLConfig, SFTConfig, export_rl, export_sft
from kernelsmith.program_record import ProgramRecord
from kernelsmith.report.html import build_report
from kernelsmith.trajectory import STEP_SCHEMA_VERSION, EvalStore, read_step_records
from standin_evaluator import RichEvaluator

FIXTURE = Path(__file__).parent / "fixtures_record_v1"
EXPECTED = FIXTURE / "expected"


@pytest.fixture
def runs(tmp_path) -> Path:
    for name in ("killed", "env"):
        shutil.copytree(FIXTURE / name, tmp_path / name)
    return tmp_path


def _export(run_dirs: list[Path], out: Path, root: Path, name: str) -> dict[str, str]:
    """What make.py wrote: SFT (every correct step) and RL rows, paths as
    <RUNS> (the exports' own as make.py's, under expected/NAME)."""
    export_sft(run_dirs, out / "sft", fmt="messages", config=SFTConfig(min_speedup=0.0))
    export_rl(run_dirs, out / "rl", fmt="jsonl", config=RLConfig())
    return {
        str(p.relative_to(out)): p.read_text().replace(str(out), f"<RUNS>/expected/{name}").replace(str(root), "<RUNS>")
        for p in sorted(out.rglob("*"))
        if p.is_file()
    }


def _expected(name: str) -> dict[str, str]:
    folder = EXPECTED / name
    return {
        str(p.relative_to(folder)): p.read_text()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "run.json"
    }


def test_old_records_load_with_their_results(runs):
    records = read_step_records(runs / "killed")
    assert {r.schema_version for r in records} == {1} and STEP_SCHEMA_VERSION == 2
    evaluations = EvalStore.load(runs / "killed")
    for record in records:
        assert record.eval_key is None and record.inline_eval is not None
        assert evaluations.of(record) is record.inline_eval
        assert isinstance(record.child, ProgramRecord) and record.child.status == record.status
        # the child's whole-result feedback is read as the compact view
        assert record.child.feedback.correct is True and set(record.child.feedback.timing) <= {"confidence", "shapes"}
    env = read_step_records(runs / "env")
    statuses = [r.status for r in env]
    assert "edit-failed" in statuses and "hacked" in statuses
    assert all((r.inline_eval is not None) == (r.status in ("correct", "hacked")) for r in env if r.kind == "step")


def test_old_runs_export_as_they_did(runs, tmp_path):
    got = _export([runs / "killed", runs / "env"], tmp_path / "out", runs, "as_is")
    assert got == _expected("as_is")


def test_old_run_resumes_to_the_same_end(runs, tmp_path):
    summary = evolve_sync(None, resume=runs / "killed", evaluator=RichEvaluator())
    expected = json.loads((EXPECTED / "resumed" / "run.json").read_text())
    records = read_step_records(runs / "killed")
    ids = sorted(r.child_id for r in records if r.child_id is not None)
    assert {
        "best_speedup": summary.best_speedup,
        "best_program_id": summary.best_program_id,
        "steps": summary.steps,
        "status_counts": summary.status_counts,
        "child_ids": ids,
    } == expected
    # the trajectory now mixes both shapes; each record's result is found
    old = [r for r in records if r.schema_version == 1]
    new = [r for r in records if r.schema_version == STEP_SCHEMA_VERSION]
    assert old and new
    evaluations = EvalStore.load(runs / "killed")
    for record in new:
        assert record.inline_eval is None and record.eval_key in evaluations
        assert record.child is not None and record.child.eval_key == record.eval_key
    # the prompts of the steps after the resume (in the SFT rows) are those the old code wrote
    assert _export([runs / "killed"], tmp_path / "out", runs, "resumed") == _expected("resumed")


def test_old_runs_report_and_collect(runs):
    for name in ("killed", "env"):
        html = build_report(runs / name)
        assert "standin" in html  # the hardware, read from the inline results
        assert collect_run(runs / name).hardware != "unknown"

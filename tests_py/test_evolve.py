"""The evolution loop: run directory, determinism, resume, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelsmith.engine import Engine
from kernelsmith.evolve import EvolveConfig, evolve_sync, load_evolve_config, read_trajectory
from kernelsmith.evolve.loop import latest_checkpoint
from kernelsmith.evolve.rundir import RunDir, iter_trajectory
from kernelsmith.config import ConfigError
from standin_evaluator import CostModelEvaluator

FIXTURES = Path(__file__).parent / "fixtures_evolve"
TASK = FIXTURES / "scale"


def _config(**kw) -> EvolveConfig:
    base = dict(iterations=24, seed=7, model="mutate", proposal_concurrency=3, checkpoint_every=4)
    base.update(kw)
    return load_evolve_config(None, **base)


def _archive(run: Path) -> list[tuple]:
    engine = Engine.load(latest_checkpoint(RunDir(run)) / "engine")
    return sorted(
        (p.id, p.island, p.status, round(p.metrics.get("score", 0.0), 9), p.source) for p in engine.programs()
    )


def test_run_directory_contents(tmp_path):
    evaluator = CostModelEvaluator()
    summary = evolve_sync(TASK, _config(iterations=10), tmp_path / "run", evaluator=evaluator)
    run = tmp_path / "run"
    assert summary.stop_reason == "iterations"
    assert (run / "config.yaml").exists() and (run / "task" / "reference.py").exists()
    steps = read_trajectory(run)
    assert steps[0]["kind"] == "seed" and steps[0]["status"] == "correct"
    body = [s for s in steps if s["kind"] == "step"]
    assert len(body) == 10
    for record in body:
        for key in (
            "iteration",
            "island",
            "parent_id",
            "inspiration_ids",
            "prompt",
            "raw_response",
            "model",
            "usage",
            "latency_s",
            "edit",
            "child_source",
            "status",
            "request_id",
        ):
            assert key in record, key
        assert record["prompt"][0]["role"] == "system" and "Model" in record["prompt"][1]["content"]
    best = max((s for s in steps if s.get("status") == "correct"), key=lambda s: s["metrics"]["score"])
    assert summary.best_speedup == pytest.approx(best["metrics"]["score"])
    # best_program.py: the best program under a header with the run's one best number
    from kernelsmith.evolve.best import strip_header

    written = (run / "best_program.py").read_text()
    assert strip_header(written) == best["child_source"] and written != best["child_source"]
    assert written.startswith(
        f"# kernelsmith best program: step {best['step']} (program #{best['child_id']})\n"
        f"# speedup vs PyTorch: {summary.best_speedup:.3f}x"
    )
    assert "per-step figure, not confirmed" in written.splitlines()[2]
    saved = json.loads((run / "summary.json").read_text())
    assert saved["steps"] == summary.steps == len(steps)
    # the seed is step 0: the summary's proposal steps are the --iterations asked for
    assert saved["proposal_steps"] == summary.proposal_steps == 10 == len(steps) - 1
    assert saved["best"]["speedup"] == summary.best_speedup and saved["best"]["step"] == best["step"]
    assert saved["best"]["confirmed"] is False and saved["best"]["program_id"] == summary.best_program_id
    # Duplicates are never evaluated: every evaluated source is distinct.
    assert len(evaluator.calls) == len(set(evaluator.calls))


class JitteryEvaluator(CostModelEvaluator):
    """Same verdicts, but each evaluation takes a random time, so results
    arrive in a different order on every run."""

    def __init__(self, rng_seed):
        super().__init__()
        import random

        self.rng = random.Random(rng_seed)

    async def evaluate_async(self, task, source, trials=None):
        import asyncio

        await asyncio.sleep(self.rng.uniform(0.0, 0.01))
        return await super().evaluate_async(task, source, trials)


def test_same_seed_same_archive_whatever_the_timing(tmp_path):
    cfg = _config(proposal_concurrency=4, eval_concurrency=4)
    a = evolve_sync(TASK, cfg, tmp_path / "a", evaluator=JitteryEvaluator(1))
    b = evolve_sync(TASK, cfg, tmp_path / "b", evaluator=JitteryEvaluator(2))
    assert _archive(tmp_path / "a") == _archive(tmp_path / "b")
    assert a.best_speedup == b.best_speedup
    evolve_sync(TASK, _config(seed=8), tmp_path / "c", evaluator=CostModelEvaluator())
    assert _archive(tmp_path / "c") != _archive(tmp_path / "a")  # the seed matters


class Crash(Exception):
    pass


def test_killed_run_resumes_to_the_same_archive(tmp_path):
    full = CostModelEvaluator()
    evolve_sync(TASK, _config(), tmp_path / "full", evaluator=full)

    def crash_at(step):
        def progress(snapshot):
            if snapshot["steps"] == step:
                raise Crash()

        return progress

    killed = CostModelEvaluator()
    with pytest.raises(Crash):
        evolve_sync(TASK, _config(), tmp_path / "killed", evaluator=killed, progress=crash_at(11))
    # The crash came after step 11 was recorded but before the next checkpoint (12).
    assert latest_checkpoint(RunDir(tmp_path / "killed")).name == "step-000008"
    resumed = CostModelEvaluator()
    summary = evolve_sync(None, resume=tmp_path / "killed", evaluator=resumed)
    assert summary.stop_reason == "iterations"
    assert _archive(tmp_path / "killed") == _archive(tmp_path / "full")
    steps = [s for s in read_trajectory(tmp_path / "killed") if s["kind"] == "step"]
    ids = [s["request_id"] for s in steps]
    assert len(ids) == len(set(ids)) == 24  # every step recorded exactly once
    # Steps recorded before the crash (apply index 0..10, the seed being 0)
    # were replayed, not evaluated again.
    before = {s["child_source"] for s in steps if s["step"] <= 10 and s.get("child_source")}
    assert len([s for s in steps if s["step"] <= 10]) == 10
    assert not before & set(resumed.calls)


def test_truncated_last_record_is_dropped_on_resume(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"a": 1}\n{"b": 2}\n{"c": ')
    assert list(iter_trajectory(path, repair=True)) == [{"a": 1}, {"b": 2}]
    assert path.read_text() == '{"a": 1}\n{"b": 2}\n'


def test_existing_run_directory_is_not_overwritten(tmp_path):
    evolve_sync(TASK, _config(iterations=2), tmp_path / "run", evaluator=CostModelEvaluator())
    with pytest.raises(FileExistsError, match="--resume"):
        evolve_sync(TASK, _config(iterations=2), tmp_path / "run", evaluator=CostModelEvaluator())


def test_config_errors_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match="iteratons"):
        load_evolve_config(None, iteratons=3)
    bad = tmp_path / "c.yaml"
    bad.write_text("prompt:\n  max_histroy: 3\n")
    with pytest.raises(ConfigError, match="max_histroy"):
        load_evolve_config(bad)
    with pytest.raises(ConfigError, match="model must be"):
        EvolveConfig(model="gpt4")


def test_evolve_sync_works_inside_a_running_event_loop(tmp_path):
    import asyncio

    async def notebook_cell():
        return evolve_sync(TASK, _config(iterations=3), tmp_path / "nb", evaluator=CostModelEvaluator())

    summary = asyncio.run(notebook_cell())
    assert summary.steps == 4 and summary.stop_reason == "iterations"


def test_suspiciously_fast_candidates_score_nothing(tmp_path):
    class RooflineBreaker(CostModelEvaluator):
        """Says every non-seed candidate ran below the hardware floor."""

        async def evaluate_async(self, task, source, trials=None):
            result = await super().evaluate_async(task, source, trials)
            if "BLOCK = 64" not in source:
                result.suspicious = True
                result.suspicious_reasons = ["faster than the memory-bandwidth floor"]
            return result

    summary = evolve_sync(TASK, _config(iterations=6), tmp_path / "r", evaluator=RooflineBreaker())
    records = [s for s in read_trajectory(tmp_path / "r") if s.get("status") == "correct"]
    flagged = [s for s in records if "BLOCK = 64" not in s["child_source"]]
    assert flagged and all(s["metrics"]["score"] == 0.0 and s["metrics"]["suspicious"] == 1.0 for s in flagged)
    trusted = [s["metrics"]["score"] for s in records if "BLOCK = 64" in s["child_source"]]
    assert summary.best_speedup == pytest.approx(max(trusted))


def test_engine_target_score_stops_the_run(tmp_path):
    # The best so far reaches 1.0 as soon as a child beats the reference.
    cfg = _config(iterations=24, engine={"target_score": 1.0})
    summary = evolve_sync(TASK, cfg, tmp_path / "t", evaluator=CostModelEvaluator())
    assert summary.stop_reason.startswith("target")
    assert summary.best_speedup >= 1.0 and summary.steps < 25


def test_evaluations_in_flight_follow_the_evaluator_workers(tmp_path):
    import asyncio

    class ThreeWorkers(CostModelEvaluator):
        workers = 3  # e.g. one per GPU of a 3-GPU host

        def __init__(self):
            super().__init__()
            self.running = self.peak = 0

        async def evaluate_async(self, task, source, trials=None):
            self.running += 1
            self.peak = max(self.peak, self.running)
            await asyncio.sleep(0.02)
            self.running -= 1
            return await super().evaluate_async(task, source, trials)

    evaluator = ThreeWorkers()
    evolve_sync(TASK, _config(iterations=12, proposal_concurrency=6), tmp_path / "w", evaluator=evaluator)
    assert evaluator.peak == 3
    capped = ThreeWorkers()
    evolve_sync(
        TASK, _config(iterations=12, proposal_concurrency=6, eval_concurrency=2), tmp_path / "c", evaluator=capped
    )
    assert capped.peak == 2


def test_prompts_describe_the_hardware_the_worker_measured_on(tmp_path):
    class OnAnH200(CostModelEvaluator):
        def backend_for(self, task):
            backend = super().backend_for(task)

            def driver_must_not_probe():
                raise AssertionError("hardware_info() called in the driver")

            backend.hardware_info = driver_must_not_probe
            return backend

        async def evaluate_async(self, task, source, trials=None):
            result = await super().evaluate_async(task, source, trials)
            result.hardware = {
                "backend": "triton",
                "device": "NVIDIA H200",
                "compute_capability": "9.0",
                "sm_count": 132,
                "interpreter": False,
            }
            return result

    evolve_sync(TASK, _config(iterations=2), tmp_path / "h", evaluator=OnAnH200())
    step = next(s for s in read_trajectory(tmp_path / "h") if s["kind"] == "step")
    system = step["prompt"][0]["content"]
    assert "NVIDIA H200" in system and step["prompt_meta"]["hardware_family"] == "hopper"


def test_repair_shows_the_failed_program_and_keeps_the_evolve_block_rules(mock_llm, tmp_path, monkeypatch):
    """Every ask with a failure on its island is a repair (repair_ratio 1):
    the repaired program is the failed one's real text, and a repair's edit
    is still held to the EVOLVE blocks."""
    seed = (TASK / "seed.py").read_text()
    outside = seed.replace("import triton\n", "import triton  # changed outside the EVOLVE block\n")
    no_markers = seed.replace("# EVOLVE-BLOCK-START\n", "").replace("# EVOLVE-BLOCK-END\n", "")
    broken = seed.replace("BLOCK = 64", "BLOCK = (64")
    mock_llm.script(
        f"```python\n{outside}```",  # 1: edit-failed (outside the block): the parent's text is what to repair
        f"```python\n{no_markers}```",  # 2: repair of 1 dropping the markers: still rejected
        f"```python\n{broken}```",  # 3: repair of 2: a syntax error, kept as the text to repair
        "fixed, as a diff:\n<<<<<<< SEARCH\nBLOCK = (64  # tune: [32, 64, 128, 256, 512]\n=======\n"
        "BLOCK = 128  # tune: [32, 64, 128, 256, 512]\n>>>>>>> REPLACE\n",  # 4: repairs 3
    )
    monkeypatch.setenv("OPENAI_BASE_URL", mock_llm.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    cfg = _config(
        iterations=4, model="openai:m", proposal_concurrency=1, engine={"num_islands": 1, "repair_ratio": 1.0}
    )
    evolve_sync(TASK, cfg, tmp_path / "r", evaluator=CostModelEvaluator())
    steps = [s for s in read_trajectory(tmp_path / "r") if s["kind"] == "step"]
    assert [s["mode"] for s in steps[1:]] == ["repair"] * 3
    assert [s["status"] for s in steps] == ["edit-failed", "edit-failed", "edit-failed", "correct"]
    assert steps[0]["edit"]["error_kind"] == "evolve_blocks" and steps[0]["child"]["source"] == seed
    assert steps[1]["edit"]["error_kind"] == "evolve_blocks"  # the rules hold in repair mode too
    assert steps[2]["edit"]["error_kind"] == "syntax" and steps[2]["child"]["source"] == broken

    def current_program(step):
        user = step["prompt"][1]["content"]
        return user[user.index("## Current program") : user.index("### Evaluation of the current program")]

    assert "BLOCK = 64" in current_program(steps[1])  # the failed program's text, not an empty one
    assert "BLOCK = (64" in current_program(steps[3]) and "SyntaxError" in steps[3]["prompt"][1]["content"]
    assert "BLOCK = 128" in steps[3]["child_source"]


def test_corrupt_checkpoint_falls_back_to_the_previous_one_and_the_trajectory(tmp_path):
    evolve_sync(TASK, _config(), tmp_path / "full", evaluator=CostModelEvaluator())

    def crash(snapshot):
        if snapshot["steps"] == 11:
            raise Crash()

    with pytest.raises(Crash):
        evolve_sync(TASK, _config(), tmp_path / "run", evaluator=CostModelEvaluator(), progress=crash)
    run = RunDir(tmp_path / "run")
    latest = latest_checkpoint(run)
    assert latest.name == "step-000008" and (run.checkpoint_dir / "step-000004").is_dir()
    for file in (latest / "engine").rglob("*"):
        if file.is_file():
            file.write_bytes(file.read_bytes()[: len(file.read_bytes()) // 2])  # torn writes
    resumed = CostModelEvaluator()
    summary = evolve_sync(None, resume=tmp_path / "run", evaluator=resumed)
    assert summary.stop_reason == "iterations"
    assert _archive(tmp_path / "run") == _archive(tmp_path / "full")
    steps = [s for s in read_trajectory(tmp_path / "run") if s["kind"] == "step"]
    assert sorted(s["request_id"] for s in steps) == list(range(24))
    # Steps 5..10 were replayed from the trajectory, not evaluated again.
    again = {s["child_source"] for s in steps if s["step"] <= 10 and s.get("child_source")} & set(resumed.calls)
    assert not again

    # With no checkpoint left that reads back, resume says so instead of starting over.
    for folder in run.checkpoint_dir.glob("step-*"):
        (folder / "run_state.json").write_text("{")
    from kernelsmith.evolve.rundir import RunDirError

    with pytest.raises(RunDirError, match="no checkpoint reads back"):
        evolve_sync(None, resume=tmp_path / "run", evaluator=CostModelEvaluator())

"""RayEvaluator on a local Ray instance with the OpenCL backend (PoCL on the
CPU): the same verdicts as the local evaluator, through the same sandboxed
worker, and as the evaluator of an evolve run. One ray.init for the module."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import ray

from kernelsmith.evaluator.ray_executor import RayEvaluator  # noqa: E402
from kernelsmith.task import Task  # noqa: E402
from kernelsmith.trajectory import EvalStore  # noqa: E402

HERE = Path(__file__).resolve().parent
TASK_DIR = HERE / "fixtures_bench" / "suite" / "level1" / "2_softmax_dir"
WRONG = (HERE / "fixtures_opencl" / "wrong_kernel.py").read_text()
SEED = (TASK_DIR / "seed.py").read_text()


@pytest.fixture(scope="module")
def ray_evaluator():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    evaluator = RayEvaluator(isolation="process")
    try:
        yield evaluator
    finally:
        evaluator.close()
        ray.shutdown()


def test_correct_and_incorrect_candidates(ray_evaluator):
    assert ray_evaluator.num_gpus == 0  # no GPU here: one CPU per candidate
    task = Task.load(TASK_DIR)
    good, wrong = ray_evaluator.evaluate_many([(task, SEED), (task, WRONG)])
    assert good.correct and good.category == "ok", good.error
    assert good.speedup is not None and good.runtime_ms > 0
    assert good.hardware.get("backend") == "opencl"
    assert good.isolation == "process"  # the sandboxed worker ran, as in the local evaluator
    # the node's evaluator has the trusted referee (fresh mode has one, as the pool does)
    assert good.census.get("referee") == "agreed", good.census
    assert not wrong.correct and wrong.category == "incorrect"
    assert "mismatch" in wrong.render_feedback().lower() or wrong.correctness.get("max_abs_err", 0) > 0


def test_static_rejection_and_async(ray_evaluator):
    task = Task.load(TASK_DIR)
    broken = SEED.replace("class ModelNew(nn.Module):", "class ModelNew(nn.Module:")
    result = asyncio.run(ray_evaluator.evaluate_async(task, broken))
    assert result.category == "compile" and not result.correct
    assert ray_evaluator.backend_for(task).name == "opencl"


def test_evolve_with_ray_evaluator(ray_evaluator, tmp_path):
    from kernelsmith.evolve import evolve_sync, load_evolve_config, read_trajectory

    config = load_evolve_config(None, iterations=1, model="mutate", proposal_concurrency=1, trials=2)
    summary = evolve_sync(TASK_DIR, config, tmp_path / "run", evaluator=ray_evaluator)
    steps = read_trajectory(tmp_path / "run")
    evals = EvalStore.load(tmp_path / "run")
    assert steps[0]["kind"] == "seed" and steps[0]["status"] == "correct"
    assert summary.steps == 2
    # a best needs a reliable timing: on a loaded 2-core machine (Ray's own
    # processes included) the contention check may mark every timing
    # unreliable, and then the run rightly has no best
    reliable = [
        s for s in steps if s["status"] == "correct" and evals.raw(s.get("eval_key")).get("timing_reliable", True)
    ]
    assert (summary.best_speedup is not None) == bool(reliable), (
        summary,
        [evals.raw(s.get("eval_key")) for s in steps],
    )

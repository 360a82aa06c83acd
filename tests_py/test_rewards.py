"""Rewards: the pure function, then the adapters (verl, TRL) on real
completions built from the OpenCL softmax seed, evaluated in sandboxed
workers on the CPU (PoCL)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kernelsmith.evaluator import Evaluator
from kernelsmith.result import EvalResult
from kernelsmith.rewards import (
    LocalScorer,
    RewardBackend,
    RewardConfig,
    completion_text,
    compute_reward,
    compute_score,
    make_trl_reward,
)
from kernelsmith.task import Task

SOFTMAX = Path(__file__).resolve().parent.parent / "examples" / "opencl" / "softmax"
SEED = (SOFTMAX / "seed.py").read_text()
LAUNCH = "            program.row_per_item(ocl.round_up(rows, WORK_GROUP), WORK_GROUP, x, y, rows, cols, inputs=[0])\n"
assert LAUNCH in SEED


def fenced(source: str) -> str:
    return f"Rewritten:\n```python\n{source}```\n"


CORRECT = fenced(SEED.replace("WORK_GROUP = 64", "WORK_GROUP = 32"))
# Same output, forty times the work.
SLOWER = fenced(SEED.replace(LAUNCH, "            for _ in range(40):\n    " + LAUNCH))
# Launches the kernel, then returns PyTorch's answer: the torch-op guard says hacked.
HACKED = fenced(SEED.replace("        return y\n", "        return torch.softmax(x, dim=-1)\n"))
COMPILE_ERROR = fenced(SEED.replace("float inv = 1.0f / s;", "float inv = 1.0f / s"))
NO_CODE = "I would use shared memory here."


def ok(runtime: float, ref: float = 1.0) -> EvalResult:
    return EvalResult(
        compiled=True, correct=True, category="ok", runtime_ms=runtime, ref_runtime_ms=ref, speedup=ref / runtime
    )


# ------------------------------------------------------------ pure function
def test_reward_is_speedup_over_parent_with_shaping():
    assert compute_reward(ok(0.5), parent_runtime_ms=1.0).reward == pytest.approx(2.0)
    assert compute_reward(ok(2.0), parent_runtime_ms=1.0).reward == pytest.approx(0.5)
    log = RewardConfig(shaping="log", correct_bonus=0.5)
    assert compute_reward(ok(0.5), 1.0, log).reward == pytest.approx(math.log(2.0) + 0.5)
    clipped = RewardConfig(clip_max=3.0)
    assert compute_reward(ok(0.01), 1.0, clipped).reward == 3.0
    assert compute_reward(ok(4.0), 1.0, RewardConfig(shaping="log2", clip_min=-1.0)).reward == -1.0
    # No parent runtime: the ratio of the speedups over the reference.
    relative = compute_reward(ok(0.25, ref=1.0), None, parent_speedup=2.0)
    assert relative.speedup == pytest.approx(2.0) and relative.status == "correct"
    # A dict works as well as an EvalResult.
    assert compute_reward(ok(0.5).to_dict(), 1.0).reward == pytest.approx(2.0)


def test_penalties_order_failures():
    cfg = RewardConfig()
    edit = compute_reward(None, 1.0, cfg, edit_error="no code")
    compile_ = compute_reward(EvalResult(category="compile", error="x"), 1.0, cfg)
    runtime = compute_reward(EvalResult(compiled=True, category="timeout"), 1.0, cfg)
    wrong = compute_reward(EvalResult(compiled=True, category="incorrect"), 1.0, cfg)
    hacked = compute_reward(
        EvalResult(
            compiled=True,
            correct=True,
            hacked=True,
            category="hacked",
            hack_reasons=["forward ran PyTorch compute ops aten.add"],
        ),
        1.0,
        cfg,
    )
    slow = compute_reward(ok(100.0), 1.0, cfg)
    assert [r.status for r in (edit, compile_, runtime, wrong, hacked)] == [
        "edit-failed",
        "compile-failed",
        "runtime-error",
        "incorrect",
        "hacked",
    ]
    assert hacked.reward <= edit.reward < compile_.reward < runtime.reward < wrong.reward < slow.reward
    assert "aten.add" in hacked.detail
    custom = RewardConfig(incorrect=-7.0)
    assert compute_reward(EvalResult(compiled=True, category="incorrect"), 1.0, custom).reward == -7.0


def test_reward_pays_the_speedup_by_its_confidence_interval():
    # 10% faster than the parent, but the measurement cannot tell it from equal.
    noisy = EvalResult(
        compiled=True,
        correct=True,
        category="ok",
        runtime_ms=0.9,
        ref_runtime_ms=1.0,
        speedup=1.0 / 0.9,
        speedup_ci_low=0.9,
        speedup_ci_high=1.3,
    )
    snap = compute_reward(noisy, 1.0)
    assert snap.reward == 1.0 and snap.speedup == 1.0
    assert snap.speedup_ci[0] < 1.0 < snap.speedup_ci[1]
    assert compute_reward(noisy, 1.0, RewardConfig(ci="point")).reward == pytest.approx(1.0 / 0.9)
    lower = compute_reward(noisy, 1.0, RewardConfig(ci="lower"))
    assert lower.reward == pytest.approx((1.0 / 0.9) * 0.9 / (1.0 / 0.9))
    # Clearly faster: snap pays the point estimate, lower the interval's lower end.
    clear = EvalResult(
        compiled=True,
        correct=True,
        category="ok",
        runtime_ms=0.5,
        ref_runtime_ms=1.0,
        speedup=2.0,
        speedup_ci_low=1.8,
        speedup_ci_high=2.2,
    )
    assert compute_reward(clear, 1.0).reward == pytest.approx(2.0)
    assert compute_reward(clear, 1.0, RewardConfig(ci="lower")).reward == pytest.approx(1.8)
    # No interval measured: the point estimate, whatever the mode.
    assert compute_reward(ok(0.9), 1.0).reward == pytest.approx(1.0 / 0.9)
    with pytest.raises(ValueError, match="ci must be one of"):
        RewardConfig(ci="median")


def test_kernelbench_view_uses_their_names_and_units():
    from kernelsmith.kernelbench import to_kernelbench

    timed = EvalResult(
        compiled=True,
        correct=True,
        category="ok",
        runtime_ms=0.5,
        ref_runtime_ms=2.0,
        speedup=4.0,
        correctness={"trials": 5, "max_abs_err": 1e-6},
        timing={
            "candidate": {"mean": 0.5, "std": 0.01, "min": 0.49, "max": 0.6, "median": 0.5, "n": 30},
            "reference": {"mean": 2.0, "median": 2.0, "n": 30},
        },
        hardware={"name": "NVIDIA H200"},
    )
    view = to_kernelbench(timed)
    assert view["compiled"] is True and view["correctness"] is True
    assert view["runtime"] == 500.0 and view["ref_runtime"] == 2000.0  # us
    assert view["runtime_stats"]["mean"] == 500.0 and view["runtime_stats"]["num_trials"] == 30
    assert view["metadata"]["hardware"] == "NVIDIA H200" and view["metadata"]["correctness_trials"] == "(5 / 5)"
    hacked = to_kernelbench(
        EvalResult(compiled=True, correct=True, hacked=True, category="hacked", hack_reasons=["torch op"])
    )
    assert hacked["correctness"] is False and hacked["metadata"]["kernelsmith"]["hack_reasons"] == ["torch op"]
    failed = to_kernelbench(EvalResult(category="compile", error="syntax error").to_dict())
    assert failed["compiled"] is False and failed["runtime"] == -1.0
    assert failed["metadata"]["compilation_error"] == "syntax error"


def test_profiling_terms_are_off_by_default_and_add_what_was_measured():
    sol = {"counted": True, "fraction": 0.4, "bound": "memory"}
    measured = EvalResult(
        compiled=True,
        correct=True,
        category="ok",
        runtime_ms=0.5,
        ref_runtime_ms=1.0,
        speedup=2.0,
        speed_of_light=sol,
        census={"coverage": 0.8},
    )
    plain = compute_reward(measured, parent_runtime_ms=1.0)
    assert plain.reward == pytest.approx(2.0) and plain.fraction_of_peak == 0.4 and plain.coverage == 0.8
    both = compute_reward(measured, 1.0, RewardConfig(peak_weight=1.0, coverage_weight=0.5))
    assert both.reward == pytest.approx(2.0 + 0.4 + 0.4)
    # a lazy program (most of forward's device time in PyTorch) earns less than one doing it all
    lazy = EvalResult(**{**measured.to_dict(), "census": {"coverage": 0.1}})
    cfg = RewardConfig(coverage_weight=1.0)
    assert compute_reward(lazy, 1.0, cfg).reward < compute_reward(measured, 1.0, cfg).reward
    # nothing where nothing was measured (uncounted work, no census), nor on failures
    bare = EvalResult(**{**measured.to_dict(), "speed_of_light": {"counted": False, "fraction": None}, "census": {}})
    got = compute_reward(bare, 1.0, RewardConfig(peak_weight=1.0, coverage_weight=1.0))
    assert got.reward == pytest.approx(2.0) and got.fraction_of_peak is None and got.coverage is None
    wrong = EvalResult(**{**measured.to_dict(), "correct": False, "category": "incorrect"})
    assert compute_reward(wrong, 1.0, RewardConfig(peak_weight=5.0)).reward == RewardConfig().incorrect
    untimed = EvalResult(compiled=True, correct=True, category="ok", census={"coverage": 1.0})
    assert compute_reward(untimed, 1.0, RewardConfig(coverage_weight=0.2)).reward == pytest.approx(0.2)
    for bad in ({"peak_weight": -1.0}, {"coverage_weight": float("nan")}, {"peak_weight": True}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            RewardConfig(**bad)


def test_bad_reward_config_names_the_key():
    with pytest.raises(ValueError, match="shaping"):
        RewardConfig(shaping="exp")
    with pytest.raises(ValueError, match="unknown config key 'reward.bonus'"):
        RewardConfig.from_dict({"bonus": 1})


def test_completion_text_handles_chat_and_thinking():
    assert completion_text("<think>hmm ```x```</think>answer") == "answer"
    assert completion_text([{"role": "assistant", "content": "a"}]) == "a"
    assert completion_text({"role": "assistant", "content": "b"}) == "b"
    with pytest.raises(TypeError):
        completion_text(3)


# ------------------------------------------------------------ real evaluations
@pytest.fixture(scope="module")
def scorer():
    with Evaluator(workers=2) as evaluator:
        yield LocalScorer(evaluator)


@pytest.fixture(scope="module")
def row(scorer):
    """An RL row's reward inputs as `kernelsmith export rl` writes them, for the seed as parent."""
    task = Task.load(SOFTMAX)
    parent_runtime = scorer.parent_runtime(task, SEED)
    assert parent_runtime and parent_runtime > 0
    info = {
        "id": task.id,
        "name": task.name,
        "path": task.path,
        "original_path": str(SOFTMAX),
        "reference_source": task.reference_source,
        "backend": task.config.backend,
        "config_json": json.dumps(task.to_dict()["config"]),
        "difficulty": "unknown",
    }
    extra = {
        "task": info,
        "parent": {"id": 0, "source": SEED, "runtime_ms": parent_runtime, "speedup": 0.0, "is_reference": False},
        "edit_mode": "auto",
    }
    truth = json.dumps({"task_id": task.id, "parent_source": SEED, "parent_runtime_ms": parent_runtime})
    return {"extra_info": extra, "ground_truth": truth, "parent_runtime": parent_runtime}


def test_verl_compute_score_correct_and_broken(scorer, row):
    backend = RewardBackend(scorer=scorer)
    correct = compute_score("kernelsmith", CORRECT, row["ground_truth"], row["extra_info"], backend=backend)
    broken = compute_score("kernelsmith", NO_CODE, row["ground_truth"], row["extra_info"], backend=backend)
    # A correct rewrite of the same kernel: speedup over the parent near 1 (timing noise aside).
    assert 0.2 < correct < 5.0
    assert broken == RewardConfig().edit_failed


def test_trl_reward_slower_hacked_and_compile_error(scorer, row):
    fn = make_trl_reward(scorer=scorer)
    assert fn.__name__ == "kernelsmith_speedup"
    completions = [[{"role": "assistant", "content": c}] for c in (SLOWER, HACKED, COMPILE_ERROR)]
    prompts = [[{"role": "user", "content": "make it faster"}]] * 3
    rewards = fn(prompts, completions, extra_info=[row["extra_info"]] * 3, ground_truth=[row["ground_truth"]] * 3)
    slower, hacked, compile_error = rewards
    cfg = RewardConfig()
    assert 0.0 < slower < 0.5  # correct, forty launches: much slower than the parent
    assert hacked == cfg.hacked
    assert compile_error == cfg.compile_failed
    details = scorer.score_many(
        [
            {
                "completion": HACKED,
                "parent_source": SEED,
                "task": row["extra_info"]["task"],
                "parent_runtime_ms": row["parent_runtime"],
            }
        ]
    )
    assert details[0].status == "hacked" and any("torch" in r.lower() for r in details[0].result["hack_reasons"])


def test_profiling_terms_on_a_real_evaluation(scorer, row):
    """The same completion scored with the profiling terms on: its reward
    is the plain one plus each weight times what the evaluation measured
    (the fraction of the host's peak, where this host's peaks are known,
    and the census's coverage)."""
    task = row["extra_info"]["task"]
    item = {"completion": CORRECT, "parent_source": SEED, "task": task, "parent_runtime_ms": row["parent_runtime"]}
    cfg = RewardConfig(peak_weight=2.0, coverage_weight=0.5, ci="point")
    (got,) = scorer.score_many([item], cfg)
    assert got.status == "correct", got
    result = EvalResult.from_dict(got.result)
    sol = result.speed_of_light
    assert got.fraction_of_peak == (sol.get("fraction") if sol.get("counted") else None)
    assert got.coverage == result.coverage and got.coverage is not None  # the census measures OpenCL's
    plain = compute_reward(result, row["parent_runtime"], RewardConfig(ci="point"))
    assert got.reward == pytest.approx(plain.reward + 2.0 * (got.fraction_of_peak or 0.0) + 0.5 * (got.coverage or 0.0))


def test_shared_group_timing_ranks_a_group_against_one_reference(scorer, row):
    """group='shared': the group's correct completions and the parent are
    re-timed head to head in one worker; the 40-launch completion is paid far
    less than the rewrite, the broken one keeps its penalty, and every
    correct reward names the shared timing."""
    cfg = RewardConfig(group="shared", ci="point")
    items = [
        {"completion": c, "parent_source": SEED, "task": row["extra_info"]["task"]}
        for c in (CORRECT, SLOWER, COMPILE_ERROR)
    ]
    correct, slower, broken = scorer.score_many(items, cfg)
    assert broken.status == "compile-failed"
    for r in (correct, slower):
        # a re-timing the gate judged unreliable (a busy machine) is not used
        assert r.status == "correct" and ("head to head" in r.detail or "kept its own timing" in r.detail), r
        assert r.parent_runtime_ms and r.runtime_ms
    if all("head to head" in r.detail for r in (correct, slower)):
        # the parent's runtime came from the same worker for both
        assert correct.parent_runtime_ms == slower.parent_runtime_ms
    assert slower.speedup < 0.5 < correct.speedup
    with pytest.raises(Exception, match="group must be one of"):
        RewardConfig(group="pairs")


def test_rewards_read_the_category_not_the_error_text():
    """The evaluator sets the category where the error happens (a kernel
    build failure at the first call is "compile"), so rewards read it and
    never the error: a current record saying "runtime" is a runtime error
    whatever its text names."""
    cfg = RewardConfig()
    for backend, error in (
        ("triton", "triton.CompilationError: at 3:4"),
        ("opencl", "OpenCLError: CL_BUILD_PROGRAM_FAILURE"),
        ("", "clBuildProgram failed: -11"),
    ):
        runtime = EvalResult(compiled=True, category="runtime", backend=backend, error=error)
        assert compute_reward(runtime, 1.0, cfg).status == "runtime-error"
        assert compute_reward(runtime.to_dict(), 1.0, cfg).status == "runtime-error"
        built = EvalResult(compiled=False, category="compile", backend=backend, error=error)
        assert compute_reward(built, 1.0, cfg).status == "compile-failed"


def test_old_records_with_a_build_failure_as_runtime_are_normalised_on_loading():
    """Before schema 6 a kernel build failure at the first call could be
    recorded as "runtime" and rewards re-classified it by its backend's
    build-error text (a record without its backend: any backend's).
    EvalResult.from_dict now does that once for such records, so every
    reader sees the category the evaluator writes today; other runtime
    errors, and the same text in a current record, stay as they are."""
    cfg = RewardConfig()

    def old(**fields):
        return {**EvalResult(compiled=True, category="runtime", **fields).to_dict(), "schema_version": 5}

    ocl = old(backend="opencl", error="OpenCLError: CL_BUILD_PROGRAM_FAILURE")
    tri = old(backend="triton", error="triton.CompilationError: at 3:4")
    anyone = old(error="clBuildProgram failed: -11")
    for data in (ocl, tri, anyone):
        loaded = EvalResult.from_dict(data)
        assert (loaded.category, loaded.compiled, loaded.schema_version) == ("compile", False, 5)
        assert compute_reward(data, 1.0, cfg).status == "compile-failed"
        assert EvalResult.from_dict(loaded.to_dict()) == loaded  # loading again changes nothing
    # the markers are the backend's own: Triton's are not OpenCL's
    for data in (
        old(backend="opencl", error="IndexError: out of range"),
        old(backend="triton", error="CL_BUILD_PROGRAM_FAILURE"),
        old(backend="mine", error="CompilationError"),
    ):
        assert EvalResult.from_dict(data).category == "runtime"
        assert compute_reward(data, 1.0, cfg).status == "runtime-error"
    # a crash or timeout keeps its category whatever it says
    assert (
        EvalResult.from_dict({**old(backend="triton", error="CompilationError"), "category": "crash"}).category
        == "crash"
    )

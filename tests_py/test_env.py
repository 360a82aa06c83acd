"""kernelsmith.env on the real evaluator (OpenCL softmax through PoCL): the
loop's first prompt, edits, per-turn rewards bounded by the evaluator's
verdict, feedback turns, batched steps on the pool, recording in the loop's
trajectory format and export of a recorded episode."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kernelsmith.env import EnvConfig, EpisodeStart, KernelEnv, discounted_returns
from kernelsmith.evaluator import Evaluator
from kernelsmith.evolve.session import reference_as_seed
from kernelsmith.export import RLConfig, SFTConfig, export_rl, export_sft, load_run, read_jsonl
from kernelsmith.result import EvalResult
from kernelsmith.rewards import RewardConfig
from kernelsmith.task import Task
from kernelsmith.trajectory import EvalStore

SOFTMAX = Path(__file__).resolve().parent.parent / "examples" / "opencl" / "softmax"
# Few correctness trials and timing samples keep the tests quick (the timing protocol is the evaluator's, tested there).
TASK = Task.load(SOFTMAX, trials=2, timing={"warmup": 1, "repeats": 3, "cpu_max_samples": 6, "cpu_time_budget_s": 0.2})
SEED = TASK.seed_source
CORRECT = f"Here:\n```python\n{SEED}```\n"
CORRECT_32 = f"```python\n{SEED.replace('WORK_GROUP = 64', 'WORK_GROUP = 32')}```"
HACK = (
    "```python\n"
    + SEED.replace(
        "        x = x.contiguous()\n", "        return torch.softmax(x, dim=-1)\n        x = x.contiguous()\n"
    )
    + "```"
)
NO_CODE = "I would use local memory."


class CountingEvaluator(Evaluator):
    """The real pool evaluator, counting the batches it is handed."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.batches: list[int] = []

    def evaluate_many(self, items, trials=None):
        items = list(items)
        self.batches.append(len(items))
        return super().evaluate_many(items, trials)


@pytest.fixture(scope="module")
def evaluator():
    with CountingEvaluator(workers=2) as ev:
        yield ev


def test_episode_prompt_rewards_feedback_and_record(evaluator, tmp_path):
    config = EnvConfig(max_turns=3)
    env = KernelEnv(TASK, evaluator, config, record_dir=tmp_path / "rec")
    first = env.reset()
    # The first observation is the evolve loop's prompt for the reference-as-seed.
    assert [m["role"] for m in first] == ["system", "user"]
    assert "EVOLVE-BLOCK-START" in first[1]["content"] and "class ModelNew(" in first[1]["content"]
    assert env.episode.current_source == reference_as_seed(TASK.reference_source)

    # Turn 1: a full OpenCL rewrite, evaluated by the real evaluator.
    obs, reward, done, result = env.step(CORRECT)
    assert result is not None and result.correct and not done
    cfg = config.reward
    s = result.speedup
    if result.timing_reliable and not result.suspicious:
        from kernelsmith.rewards.core import apply_ci, speedup_interval

        paid = apply_ci(s, speedup_interval(result, s), cfg.ci)
    else:
        paid = min(s, 1.0)
    # From the reference, the previous program's speedup is 1: both terms pay the same speedup.
    assert reward == pytest.approx(cfg.correct_bonus + config.w_prev * paid + config.w_ref * paid)
    assert "Verdict: CORRECT" in obs and "## Current program" in obs and "WORK_GROUP = 64" in obs
    assert env.episode.messages[-1] == {"role": "user", "content": obs}

    # Turn 2: no code -> the edit-failure penalty, nothing evaluated, the program unchanged.
    batches = len(evaluator.batches)
    step = env.step(NO_CODE)
    assert step.result is None and step.reward == cfg.edit_failed and step.info["status"] == "edit-failed"
    assert len(evaluator.batches) == batches
    assert "could not be applied" in step.observation and "fenced code block" in step.observation

    # Turn 3: a shortcut that calls torch.softmax -> the hack penalty, and the episode ends.
    step = env.step(HACK)
    assert step.done and step.observation == "" and step.result.hacked
    assert step.reward == cfg.hacked
    rewards = [t.reward for t in env.episode.turns]
    assert step.info["returns"] == pytest.approx(discounted_returns(rewards, config.gamma))
    assert step.info["returns"][0] == pytest.approx(rewards[0] + 0.4 * rewards[1] + 0.16 * rewards[2])
    with pytest.raises(RuntimeError, match="done"):
        env.step(CORRECT)

    # Recorded like evolution steps: a reference seed, then one step per turn, chained by parent ids.
    run_dir = env.recorder.run_dirs()[0]
    records = [json.loads(line) for line in (run_dir / "trajectory.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in records] == ["seed", "step", "step", "step"]
    assert records[0]["name"] == "reference" and records[0]["status"] == "reference"
    steps = records[1:]
    assert [s["status"] for s in steps] == ["correct", "edit-failed", "hacked"]
    assert steps[0]["parent_id"] == records[0]["child_id"]
    assert steps[1]["parent_id"] == steps[0]["child_id"] == steps[2]["parent_id"]  # the failed edit changed nothing
    assert steps[0]["prompt"] == first and len(steps[2]["prompt"]) == 6  # system, user, (assistant, user) x 2
    assert [s["episode"]["reward"] for s in steps] == pytest.approx(rewards)
    # each turn's whole result is stored once, in evaluations.jsonl; the record keeps its key
    evals = EvalStore.load(run_dir)
    assert evals.raw(steps[0]["eval_key"])["correct"] and evals.raw(steps[2]["eval_key"])["hacked"]
    assert "eval_key" not in steps[1] and steps[0]["child"]["feedback"]["eval_key"] == steps[0]["eval_key"]


def test_batched_steps_evaluate_together_and_export(evaluator, tmp_path):
    config = EnvConfig(max_turns=2)
    env = KernelEnv([TASK], evaluator, config, record_dir=tmp_path / "rec")
    episodes = [env.new_episode() for _ in range(3)]
    before = len(evaluator.batches)
    first = env.step_many([(episodes[0], CORRECT), (episodes[1], CORRECT_32), (episodes[2], NO_CODE)])
    # Both programs went to the pool in one batch; the unapplied answer never reached it.
    assert evaluator.batches[before:] == [2]
    why = [(s.result.category, s.result.error) for s in first if s.result is not None and not s.result.correct]
    assert [s.info["status"] for s in first] == ["correct", "correct", "edit-failed"], why
    second = env.step_many([(ep, CORRECT_32 if i != 1 else CORRECT) for i, ep in enumerate(episodes)])
    assert evaluator.batches[before + 1 :] == [3] and all(s.done for s in second)
    # The second turn of episode 0 is paid over its first program: ratio of the speedups over the reference.
    turn = episodes[0].turns[1]
    if turn.status == "correct" and turn.info["reliable"] and episodes[0].turns[0].info["reliable"]:
        expected = turn.result.speedup / episodes[0].turns[0].result.speedup
        assert turn.info["speedup_prev"] == pytest.approx(expected, rel=0.5)  # CI snapping may pay exactly 1

    # The recorded episodes load as a run and export with the existing tools.
    run_dir = env.recorder.run_dirs()[0]
    run = load_run(run_dir)
    assert len(run.steps) == 6 and run.seeds[0].is_reference
    # Every first turn edits the reference, and so does the turn after episode 2's unapplied answer.
    assert sum(s.kind == "translation" for s in run.steps) == 4
    sft = export_sft([run_dir], tmp_path / "sft", "messages", SFTConfig(balance="none"))
    rows = read_jsonl(tmp_path / "sft" / "kernelsmith_sft.jsonl")
    assert sft.to_dict()["kept"] == len(rows) >= 1
    assert all(r["messages"][-1]["role"] == "assistant" and "```python" in r["messages"][-1]["content"] for r in rows)
    rl = export_rl([run_dir], tmp_path / "rl", "jsonl", RLConfig(strategy="all"))
    rl_rows = read_jsonl(tmp_path / "rl" / "train.jsonl")
    assert rl.to_dict()["kept"] == len(rl_rows) >= 3
    assert all(json.loads(r["extra_info"]["task"]["config_json"])["backend"] == "opencl" for r in rl_rows)

    # A recorded program is a start: its source, metrics and the loop's prompt around it.
    correct_ids = [s.record.child_id for s in run.steps if s.status == "correct"]
    start = EpisodeStart.from_run(run_dir, correct_ids[0])
    assert start.task.id == TASK.id and "OpenCL softmax" in start.source
    messages, _ = env.first_prompt(start)
    assert start.source.rstrip("\n")[-200:] in messages[1]["content"]
    assert "speedup=" in messages[1]["content"]
    assert len(start.history) == 6 and "## Previous attempts" in messages[1]["content"]


def _result(**fields) -> EvalResult:
    base = dict(
        compiled=True,
        correct=True,
        category="ok",
        runtime_ms=1.0,
        ref_runtime_ms=3.0,
        speedup=3.0,
        speedup_ci_low=2.8,
        speedup_ci_high=3.2,
        timing_reliable=True,
    )
    base.update(fields)
    return EvalResult(**base)


def test_reward_never_exceeds_the_evaluators_verdict(evaluator):
    """No speedup reward for timings the evaluator does not trust; hacks get the penalty."""
    config = EnvConfig(max_turns=2, w_prev=1.0, w_ref=0.5, reward=RewardConfig(baseline="relative", correct_bonus=0.3))
    env = KernelEnv(TASK, evaluator, config)
    episode = env.new_episode()
    from kernelsmith.edit import apply_response

    edit = apply_response(episode.current_source, CORRECT)
    assert edit.ok
    reward, status, terms = env.turn_reward(episode, edit, _result())
    assert status == "correct" and reward == pytest.approx(0.3 + 3.0 + 0.5 * 3.0)
    for untrusted in (_result(timing_reliable=False), _result(suspicious=True, suspicious_reasons=["floor"])):
        reward, status, terms = env.turn_reward(episode, edit, untrusted)
        assert status == "correct" and not terms["reliable"]
        assert reward == pytest.approx(0.3 + 1.0 + 0.5 * 1.0)  # paid as no faster than before
    slow = _result(speedup=0.5, speedup_ci_low=0.45, speedup_ci_high=0.55, runtime_ms=6.0, timing_reliable=False)
    assert env.turn_reward(episode, edit, slow)[0] == pytest.approx(0.3 + 0.5 + 0.25)  # slower still counts
    snapped = _result(speedup=1.05, speedup_ci_low=0.9, speedup_ci_high=1.2)
    assert env.turn_reward(episode, edit, snapped)[0] == pytest.approx(0.3 + 1.0 + 0.5)  # within noise: 1
    hacked = EvalResult(compiled=True, correct=True, hacked=True, category="hacked", hack_reasons=["x"], speedup=50.0)
    assert env.turn_reward(episode, edit, hacked)[:2] == (RewardConfig().hacked, "hacked")
    wrong = EvalResult(compiled=True, correct=False, category="incorrect", speedup=None)
    assert env.turn_reward(episode, edit, wrong)[:2] == (RewardConfig().incorrect, "incorrect")
    # Bad settings are refused with the reason.
    with pytest.raises(ValueError, match="gamma"):
        EnvConfig(gamma=1.5)
    with pytest.raises(ValueError, match="max_turns"):
        EnvConfig(max_turns=0)
    with pytest.raises(KeyError, match="no task or start named"):
        env.new_episode("nope")
    assert math.isclose(discounted_returns([1.0, 1.0], 0.5)[0], 1.5)


def test_a_start_never_timed_is_measured_against_the_reference(evaluator):
    env = KernelEnv(EpisodeStart.from_seed(SOFTMAX), evaluator, EnvConfig(max_turns=1))
    episode = env.new_episode()
    assert episode.current_source == SEED and episode.baseline_speedup is None
    assert "WORK_GROUP = 64" in episode.messages[1]["content"]
    from kernelsmith.edit import apply_response

    edit = apply_response(episode.current_source, CORRECT_32)
    reward, status, terms = env.turn_reward(
        episode, edit, _result(speedup=2.0, speedup_ci_low=1.9, speedup_ci_high=2.1)
    )
    assert status == "correct" and terms["speedup_prev"] == pytest.approx(2.0)
    assert reward == pytest.approx(0.3 + 2.0 + 2.0)

"""The verifiers MultiTurnEnv adapter runs rollouts against a scripted
OpenAI-compatible server on 127.0.0.1 (verifiers' own OpenAI client), each
turn evaluated for real on the OpenCL softmax task."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kernelsmith.env import EnvConfig, KernelEnv
from kernelsmith.evaluator import Evaluator
from kernelsmith.task import Task

import verifiers as vf  # noqa: E402 - verifiers==0.3.1, installed by scripts/setup.sh

SOFTMAX = Path(__file__).resolve().parent.parent / "examples" / "opencl" / "softmax"
TASK = Task.load(SOFTMAX, trials=2)
SEED = TASK.seed_source
FIRST = f"Translation:\n```python\n{SEED}```\n"
SECOND = f"Smaller groups:\n```python\n{SEED.replace('WORK_GROUP = 64', 'WORK_GROUP = 32')}```\n"


def test_verifiers_multiturn_rollouts_with_a_scripted_client(mock_llm, monkeypatch, tmp_path):
    from verifiers.legacy.types import ClientConfig

    from kernelsmith.env.verifiers_env import KernelMultiTurnEnv, load_environment

    def answer(request):
        last = request.body["messages"][-1]["content"]
        return SECOND if "## Result of your answer" in last else FIRST

    mock_llm.handler = answer
    monkeypatch.setenv("KS_TEST_KEY", "sk-test")
    client = ClientConfig(api_base_url=mock_llm.openai_base_url, api_key_var="KS_TEST_KEY", max_retries=0)
    # Correctness only (timing is covered by test_env.py): every correct turn is paid the bonus.
    with Evaluator(workers=2, timing=False) as evaluator:
        env = KernelEnv(TASK, evaluator, EnvConfig(max_turns=2), record_dir=tmp_path / "episodes")
        vf_env = load_environment(env)
        assert isinstance(vf_env, vf.MultiTurnEnv) and isinstance(vf_env, KernelMultiTurnEnv)
        out = asyncio.run(
            vf_env.evaluate(
                client=client,
                model="scripted",
                num_examples=1,
                rollouts_per_example=2,
                max_concurrent=2,
                on_progress=lambda *a, **k: None,
                state_columns=["ks_rewards"],
            )
        )

    assert vf_env._episodes == {}  # dropped when each rollout ended
    outputs = out["outputs"] if isinstance(out, dict) else out.outputs
    assert len(outputs) == 2
    # Two turns each: the loop's prompt, then the feedback of the first (real) evaluation.
    assert len(mock_llm.requests) == 4
    second_turns = [r.body["messages"] for r in mock_llm.requests if len(r.body["messages"]) > 2]
    assert len(second_turns) == 2
    for messages in second_turns:
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
        assert "Verdict: CORRECT" in messages[-1]["content"] and "## Current program" in messages[-1]["content"]
    for output in outputs:
        get = output.get if isinstance(output, dict) else lambda k, d=None: getattr(output, k, d)
        episode_rewards = get("ks_rewards")  # the per-turn rewards, also set on verifiers' trajectory steps
        assert get("error") is None and get("is_completed")
        bonus = env.config.reward.correct_bonus + env.config.reward.untimed
        assert episode_rewards == pytest.approx([bonus, bonus])  # both turns correct (untimed)
        gamma = env.config.gamma
        assert get("reward") == pytest.approx(episode_rewards[0] + gamma * episode_rewards[1])
        assert get("metrics")["turns_correct"] == 2.0
    # Every turn was evaluated and recorded like an evolution step.
    import json

    run_dir = env.recorder.run_dirs()[0]
    steps = [json.loads(line) for line in (run_dir / "trajectory.jsonl").read_text().splitlines()]
    assert [s["status"] for s in steps if s["kind"] == "step"] == ["correct"] * 4

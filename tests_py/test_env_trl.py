"""TRL's GRPOTrainer runs one step with 2-turn episodes through our
rollout_func adapter, on the CPU, with a tiny model built in the test (no
download) and the real evaluator on the OpenCL softmax task."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelsmith.env import EnvConfig, KernelEnv
from kernelsmith.env.trl_rollout import episode_return, make_rollout_func, trl_dataset
from kernelsmith.evaluator import Evaluator
from kernelsmith.rewards import RewardConfig
from kernelsmith.task import Task
from tiny_lm import build_tiny_lm

SOFTMAX = Path(__file__).resolve().parent.parent / "examples" / "opencl" / "softmax"


def test_trl_grpo_one_step_with_two_turn_episodes(tmp_path, monkeypatch):
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    task = Task.load(SOFTMAX, trials=2)
    with Evaluator(workers=2) as evaluator:
        config = EnvConfig(max_turns=2)
        env = KernelEnv(task, evaluator, config, record_dir=tmp_path / "episodes")
        dataset = trl_dataset(env)
        prompt = dataset[0]["prompt"]
        # The tokenizer learns the text it will see: the prompt and a feedback turn.
        probe = env.new_episode()
        feedback = env.step_many([(probe, "no code")])[0].observation
        model_dir = build_tiny_lm([m["content"] for m in prompt] + [feedback], tmp_path / "tiny-lm")
        tokenizer = AutoTokenizer.from_pretrained(model_dir)

        rollout = make_rollout_func(env)
        seen = []

        def recorded(prompts, trainer):
            out = rollout(prompts, trainer)
            seen.append(
                {
                    "n": len(prompts),
                    **{k: out[k] for k in ("ks_turns", "ks_return", "ks_rewards", "env_mask")},
                    "completion_ids": out["completion_ids"],
                }
            )
            return out

        args = GRPOConfig(
            output_dir=str(tmp_path / "out"),
            max_steps=1,
            per_device_train_batch_size=2,
            num_generations=2,
            max_completion_length=8,
            report_to=[],
            save_strategy="no",
            logging_steps=1,
            use_cpu=True,
            dataloader_num_workers=0,
        )
        trainer = GRPOTrainer(
            model=str(model_dir),
            reward_funcs=[episode_return],
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            rollout_func=recorded,
        )
        assert trainer.train().global_step == 1

    assert seen and all(call["n"] == 2 for call in seen)
    penalty = RewardConfig().edit_failed
    for call in seen:
        assert call["ks_turns"] == [2, 2]
        for rewards, ret, mask, ids in zip(
            call["ks_rewards"], call["ks_return"], call["env_mask"], call["completion_ids"]
        ):
            # Eight random tokens are no program: both turns get the edit-failure penalty, discounted.
            assert rewards == [penalty, penalty] and ret == pytest.approx(penalty * (1 + config.gamma))
            # The model's two answers (<= 8 tokens each) around the feedback turn, which is masked out of the loss.
            assert len(mask) == len(ids) and mask[0] == 1 and mask[-1] == 1
            assert 0 < sum(mask) <= 16 and mask.count(0) > 100
            first_end = mask.index(0)
            assert mask[first_end:].index(1) > 0 and 0 not in mask[first_end + mask[first_end:].index(1) :]
    logged = [e for e in trainer.state.log_history if "rewards/episode_return/mean" in e]
    assert logged and logged[0]["rewards/episode_return/mean"] == pytest.approx(penalty * (1 + config.gamma))
    # The episodes were recorded: 2 episodes x 2 turns (the probe's turn too), all edit failures.
    import json

    run_dir = env.recorder.run_dirs()[0]
    steps = [
        json.loads(line)
        for line in (run_dir / "trajectory.jsonl").read_text().splitlines()
        if json.loads(line)["kind"] == "step"
    ]
    assert len(steps) == 1 + 4 * len(seen)
    assert all(s["status"] == "edit-failed" for s in steps)


def test_feedback_tokens_continue_the_chat_template_exactly(tmp_path):
    """prompt + answer + feedback tokens are the template's rendering of the
    whole conversation, whether or not the model ended its turn itself."""
    from transformers import AutoTokenizer

    from kernelsmith.env.trl_rollout import _feedback_ids, _ids, _render

    messages = [{"role": "system", "content": "You write kernels."}, {"role": "user", "content": "Make softmax fast."}]
    answer, feedback = "```python\nprint(1)\n```", "## Result of your answer\n- compiled: no"
    tokenizer = AutoTokenizer.from_pretrained(
        build_tiny_lm([answer, feedback, "You write kernels. Make softmax fast."], tmp_path / "tok")
    )
    prompt_ids = _ids(tokenizer, _render(tokenizer, messages, True))
    expected = _render(
        tokenizer, messages + [{"role": "assistant", "content": answer}, {"role": "user", "content": feedback}], True
    )
    for ended in (False, True):
        answer_ids = _ids(tokenizer, answer) + ([tokenizer.eos_token_id] if ended else [])
        extra = _feedback_ids(tokenizer, messages, answer, feedback, answer_ids)
        assert tokenizer.decode(prompt_ids + answer_ids + extra) == expected
    # A template that rewrites earlier turns cannot be continued: refused with the reason.
    tokenizer.chat_template = (
        "{% for m in messages %}{{ m['role'] }}:{{ m['content'] }}{% if loop.last %}[last]{% endif %}\n{% endfor %}"
    )
    with pytest.raises(ValueError, match="only appends"):
        _feedback_ids(tokenizer, messages, answer, feedback, [])

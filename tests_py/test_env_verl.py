"""verl's agent-loop interface, as far as it runs without a GPU: our
KernelAgentLoop built the way verl's AgentLoopWorker builds one (its config
objects, a tokenizer, verl's Continuous Token builder), run on a row that
``kernelsmith export rl`` wrote, with a scripted server manager in place of
vLLM/SGLang (which need a GPU). Each answer is evaluated for real."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelsmith.env import EnvConfig, KernelEnv
from kernelsmith.evaluator import Evaluator
from kernelsmith.export import RLConfig, export_rl, read_jsonl
from kernelsmith.rewards import RewardConfig
from kernelsmith.task import Task
from tiny_lm import build_tiny_lm

SOFTMAX = Path(__file__).resolve().parent.parent / "examples" / "opencl" / "softmax"
# Few correctness trials and timing samples keep the tests quick (the timing protocol is the evaluator's, tested there).
TASK = Task.load(SOFTMAX, trials=2, timing={"warmup": 1, "repeats": 3, "cpu_max_samples": 6, "cpu_time_budget_s": 0.2})
SEED = TASK.seed_source
CORRECT = f"```python\n{SEED.replace('WORK_GROUP = 64', 'WORK_GROUP = 32')}```"


class ScriptedServer:
    """verl's server manager interface (``generate(request_id, prompt_ids,
    sampling_params, ...) -> TokenOutput``) answering from a script."""

    def __init__(self, tokenizer, answers):
        self.tokenizer, self.answers, self.prompts = tokenizer, list(answers), []

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.prompts.append(list(prompt_ids))
        ids = self.tokenizer(self.answers.pop(0), add_special_tokens=False)["input_ids"]
        return TokenOutput(token_ids=ids + [self.tokenizer.eos_token_id], stop_reason="completed")


def test_verl_agent_loop_runs_an_episode_from_an_exported_row(tmp_path):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    import hydra
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from kernelsmith.env.verl_agent import KernelAgentLoop, close_shared

    with Evaluator(workers=2) as evaluator:
        # A recorded one-turn episode (the answer is no program), exported as verl rows.
        recorder_env = KernelEnv(TASK, evaluator, EnvConfig(max_turns=1), record_dir=tmp_path / "episodes")
        recorder_env.reset()
        recorder_env.step("no code")
        export_rl(recorder_env.recorder.run_dirs(), tmp_path / "rl", "jsonl", RLConfig(strategy="all"))
        row = read_jsonl(tmp_path / "rl" / "train.jsonl")[0]
        probe = KernelEnv(TASK, evaluator, EnvConfig(max_turns=2))
        feedback = probe.step_many([(probe.new_episode(), "no code")])[0].observation
        model_dir = build_tiny_lm([m["content"] for m in row["prompt"]] + [feedback, CORRECT], tmp_path / "tiny")
        tokenizer = AutoTokenizer.from_pretrained(model_dir)

        assert _agent_loop_registry["kernelsmith"]["_target_"] == "kernelsmith.env.verl_agent.KernelAgentLoop"
        trainer_config = OmegaConf.create(
            {"actor_rollout_ref": {"rollout": {"prompt_length": 20000, "response_length": 20000}}}
        )
        server = ScriptedServer(tokenizer, [CORRECT, "I give up."])
        # Built as verl's AgentLoopWorker builds an agent loop: hydra instantiates the entry of the
        # agent loop config file (as docs/rl_environment.md gives it) with the worker's objects.
        entry = OmegaConf.create(
            {
                "name": "kernelsmith",
                "_target_": "kernelsmith.env.verl_agent.KernelAgentLoop",
                "max_turns": 2,
                "eval_workers": 2,
                "record_dir": str(tmp_path / "verl_episodes"),
            }
        )
        loop = hydra.utils.instantiate(
            config=entry,
            trainer_config=DictConfigWrap(trainer_config),
            server_manager=server,
            tokenizer=tokenizer,
            processor=None,
            hf_model_type=None,
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(OmegaConf.create({})),
            tools=ToolListWrap([]),
        )
        assert isinstance(loop, KernelAgentLoop)
        try:
            # verl runs an agent loop on the event loop it took at construction (AgentLoopBase.loop).
            output = loop.loop.run_until_complete(
                loop.run({"temperature": 1.0}, raw_prompt=row["prompt"], extra_info=row["extra_info"])
            )
        finally:
            close_shared()

    statuses = output.extra_fields["turn_statuses"]
    rewards = output.extra_fields["turn_scores"]
    assert statuses == ["correct", "edit-failed"]
    assert rewards[0] > 0 and rewards[1] == RewardConfig().edit_failed
    assert output.reward_score == pytest.approx(rewards[0] + 0.4 * rewards[1])
    # Two generations; the second saw the first answer and the evaluation's feedback in its prompt.
    assert len(server.prompts) == 2 and server.prompts[1][: len(server.prompts[0])] == server.prompts[0]
    second_prompt = tokenizer.decode(server.prompts[1])
    assert "Verdict: CORRECT" in second_prompt and "## Current program" in second_prompt
    # The response: answer 1 (mask 1), the feedback turn (mask 0), answer 2 (mask 1).
    mask = output.response_mask
    assert len(mask) == len(output.response_ids) and mask[0] == 1 and mask[-1] == 1 and 0 in mask
    first_zero = mask.index(0)
    last_zero = len(mask) - 1 - mask[::-1].index(0)
    assert all(m == 1 for m in mask[:first_zero]) and all(m == 0 for m in mask[first_zero : last_zero + 1])
    assert tokenizer.decode(output.prompt_ids) == tokenizer.decode(server.prompts[0])
    assert "Verdict: CORRECT" in tokenizer.decode(output.response_ids[first_zero : last_zero + 1])
    # The verl episode was recorded too, its first turn's parent the exported row's parent (the reference).
    run = tmp_path / "verl_episodes"
    steps = [s for s in read_jsonl(next(run.iterdir()) / "trajectory.jsonl") if s["kind"] == "step"]
    assert [s["status"] for s in steps] == ["correct", "edit-failed"]

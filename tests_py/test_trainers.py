"""The exports and rewards in the real trainers, on the CPU, with a tiny model
and tokenizer built in the test (tiny_lm.py, no download): TRL's SFTTrainer
on every SFT format TRL reads, TRL's GRPOTrainer with our reward, verl's
RLHFDataset and both of its reward managers over our compute_score, and
OpenRLHF's own remote-reward client against ``serve`` with a burst larger
than the queue. The runs exported are the session fixture ``runs``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kernelsmith.evaluator import Evaluator
from kernelsmith.export import RLConfig, SFTConfig, export_rl, export_sft, read_jsonl
from kernelsmith.rewards import LocalScorer, RewardConfig, make_trl_reward
from kernelsmith.server import build_server
from tiny_lm import build_tiny_lm

SOFTMAX = Path(__file__).resolve().parent.parent / "examples" / "opencl" / "softmax"
SEED = (SOFTMAX / "seed.py").read_text()
CORRECT = f"Rewritten:\n```python\n{SEED.replace('WORK_GROUP = 64', 'WORK_GROUP = 32')}```\n"
NO_CODE = "I would use shared memory here."
VERL_REWARD = Path(__file__).resolve().parent.parent / "python" / "kernelsmith" / "rewards" / "verl.py"


@pytest.fixture(scope="module")
def data(runs, tmp_path_factory):
    """Every export of the runs, and a tiny LM whose tokenizer learnt their text."""
    root = tmp_path_factory.mktemp("trainer_data")
    both = [runs["opt"], runs["tr"]]
    export_sft(both, root / "text", "messages", SFTConfig(balance="none"))
    texts = [m["content"] for row in read_jsonl(root / "text" / "kernelsmith_sft.jsonl") for m in row["messages"]]
    model = build_tiny_lm(texts, root / "tiny-lm")
    # Lengths in the model's own tokens: the trainers' limits are set from them, as a user would.
    cfg = SFTConfig(balance="none", tokenizer=str(model))
    longest = 0
    for fmt, options in (
        ("messages", {}),
        ("prompt-completion", {}),
        ("parquet", {}),
        ("prompt-completion", {"conversational": True}),
    ):
        name = fmt + ("-conv" if options else "")
        summary = export_sft(both, root / name, fmt, cfg, **options)
        assert summary.lengths["method"] == f"tokenizer {model}"
        longest = max(longest, summary.lengths["prompt_tokens"]["max"] + summary.lengths["completion_tokens"]["max"])
    rl = export_rl(both, root / "rl", "parquet", RLConfig(strategy="all", tokenizer=str(model)))
    export_rl(both, root / "openrlhf", "openrlhf", RLConfig(strategy="all"))
    return {"root": root, "model": model, "sft_max_tokens": longest, "rl_summary": rl}


SFT_FILES = {
    "messages": "messages/kernelsmith_sft.jsonl",
    "prompt-completion": "prompt-completion/kernelsmith_sft.jsonl",
    "prompt-completion-conversational": "prompt-completion-conv/kernelsmith_sft.jsonl",
    "parquet": "parquet/kernelsmith_sft.parquet",
}


@pytest.mark.parametrize("fmt", sorted(SFT_FILES))
def test_trl_sft_trains_two_steps_on_each_format(data, fmt, tmp_path):
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig as TRLSFTConfig
    from trl import SFTTrainer

    path = data["root"] / SFT_FILES[fmt]
    dataset = load_dataset("parquet" if path.suffix == ".parquet" else "json", data_files=str(path))["train"]
    tokenizer = AutoTokenizer.from_pretrained(data["model"])
    model = AutoModelForCausalLM.from_pretrained(data["model"])
    args = TRLSFTConfig(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=1,
        max_length=data["sft_max_tokens"] + 16,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        use_cpu=True,
        dataloader_num_workers=0,
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    result = trainer.train()
    assert result.global_step == 2
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 2 and all(loss > 0 for loss in losses)


@pytest.fixture(scope="module")
def scorer():
    with Evaluator(workers=2) as evaluator:
        yield LocalScorer(evaluator)


def test_trl_grpo_one_step_with_our_reward(data, scorer, tmp_path):
    from datasets import load_dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    dataset = load_dataset("parquet", data_files=str(data["root"] / "rl" / "train.parquet"))["train"]
    reward = make_trl_reward(scorer=scorer)
    seen: list[dict] = []

    def recorded(prompts, completions, **kwargs):
        values = reward(prompts, completions, **kwargs)
        seen.append({"n": len(completions), "values": values, "has_task": all(e["task"] for e in kwargs["extra_info"])})
        return values

    recorded.__name__ = reward.__name__
    args = GRPOConfig(
        output_dir=str(tmp_path),
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
        model=str(data["model"]),
        reward_funcs=[recorded],
        args=args,
        train_dataset=dataset,
        processing_class=AutoTokenizer.from_pretrained(data["model"]),
    )
    assert trainer.train().global_step == 1
    # Eight random tokens are no program: every completion gets the edit-failure penalty, through our reward.
    assert seen and all(
        call["has_task"] and call["values"] == [RewardConfig().edit_failed] * call["n"] for call in seen
    )
    logged = [entry for entry in trainer.state.log_history if f"rewards/{reward.__name__}/mean" in entry]
    assert logged and logged[0][f"rewards/{reward.__name__}/mean"] == RewardConfig().edit_failed


@pytest.fixture(scope="module")
def live():
    server = build_server(port=0, workers=1, queue_size=4, token="t0k3n").start()
    try:
        yield server
    finally:
        server.stop()


def _verl_batch(rows, completions, tokenizer):
    """A verl DataProto as the rollout hands it to a reward manager: left-padded
    prompts, right-padded responses, the rows' non-tensor columns."""
    import numpy as np
    import torch
    from verl import DataProto

    prompts = [tokenizer.apply_chat_template(r["raw_prompt"], add_generation_prompt=True, tokenize=True) for r in rows]
    prompts = [p["input_ids"] if hasattr(p, "keys") else p for p in prompts]
    responses = [tokenizer(c, add_special_tokens=False)["input_ids"] for c in completions]
    width_p, width_r = max(map(len, prompts)), max(map(len, responses))
    pad = tokenizer.pad_token_id
    prompt_ids = torch.tensor([[pad] * (width_p - len(p)) + p for p in prompts])
    response_ids = torch.tensor([r + [pad] * (width_r - len(r)) for r in responses])
    mask = torch.tensor(
        [
            [0] * (width_p - len(p)) + [1] * len(p) + [1] * len(r) + [0] * (width_r - len(r))
            for p, r in zip(prompts, responses)
        ]
    )
    return DataProto.from_dict(
        tensors={
            "prompts": prompt_ids,
            "responses": response_ids,
            "attention_mask": mask,
            "input_ids": torch.cat([prompt_ids, response_ids], dim=1),
        },
        non_tensors={
            key: np.array([r[key] for r in rows], dtype=object) for key in ("data_source", "reward_model", "extra_info")
        },
    )


def test_verl_dataset_and_both_reward_managers(data, live, monkeypatch):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.trainer.ppo.reward import get_custom_reward_fn
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.workers.reward_manager import BatchRewardManager, NaiveRewardManager

    import kernelsmith.rewards.adapters as adapters

    tokenizer = AutoTokenizer.from_pretrained(data["model"])
    files = [str(data["root"] / "rl" / "train.parquet")]
    summary = data["rl_summary"]
    longest = summary.lengths["prompt_tokens"]["max"]
    assert longest > 512 and any("data.max_prompt_length" in w for w in summary.warnings)

    def dataset(max_prompt_length):
        config = OmegaConf.create(
            {
                "max_prompt_length": max_prompt_length,
                "filter_overlong_prompts": True,
                "filter_overlong_prompts_workers": 1,
                "cache_dir": str(data["root"] / "verl"),
            }
        )
        return RLHFDataset(data_files=files, tokenizer=tokenizer, config=config)

    # verl's default limit drops every row (what the export warned about); the limit from our report keeps all.
    assert len(dataset(512)) == 0
    kept = dataset(longest)
    assert len(kept) == summary.kept_by["split"]["train"] >= 2
    rows = [kept[i] for i in range(2)]

    # compute_score loaded by verl's own loader from the path our docs give, scoring through serve.
    monkeypatch.setenv("KERNELSMITH_REWARD_URL", live.url)
    monkeypatch.setenv("KERNELSMITH_REWARD_TOKEN", "t0k3n")
    monkeypatch.setattr(adapters, "_default_backend", None)
    fn = get_custom_reward_fn(
        OmegaConf.create({"reward": {"custom_reward_function": {"path": str(VERL_REWARD), "name": "compute_score"}}})
    )
    batch = _verl_batch(rows, [CORRECT, NO_CODE], tokenizer)
    before = live.service.status()["counts"]
    naive = NaiveRewardManager(tokenizer=tokenizer, num_examine=0, compute_score=fn)(batch, return_dict=True)
    batched = BatchRewardManager(tokenizer=tokenizer, num_examine=0, compute_score=fn)(batch, return_dict=True)
    after = live.service.status()["counts"]
    for out in (naive, batched):
        scores = out["reward_tensor"].sum(dim=1).tolist()
        assert scores[0] > 0 and scores[1] == RewardConfig().edit_failed  # correct rewrite vs no program
    # Naive: one request per sample; batch: the whole batch in one request, evaluated side by side.
    assert after["requests"] - before.get("requests", 0) == 3

    # verl 0.9's reward loop (its default path): the per-sample manager, samples scored concurrently.
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager as LoopNaiveRewardManager

    async def reward_loop():
        manager = LoopNaiveRewardManager(config=OmegaConf.create({}), tokenizer=tokenizer, compute_score=fn)
        return await asyncio.gather(*(manager.run_single(batch[i : i + 1]) for i in range(len(batch))))

    looped = [out["reward_score"] for out in asyncio.run(reward_loop())]
    assert looped[0] > 0 and looped[1] == RewardConfig().edit_failed


def test_openrlhf_client_burst_against_serve(data, live):
    import torch
    from openrlhf.trainer.ppo_utils.experience import Experience
    from openrlhf.utils.agent import SingleTurnAgentExecutor
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(data["model"])
    rows = read_jsonl(data["root"] / "openrlhf" / "train.jsonl")
    assert set(rows[0]) == {"prompt", "label"} and isinstance(rows[0]["label"], str)
    prompt = tokenizer.apply_chat_template(rows[0]["prompt"], tokenize=False, add_generation_prompt=True)
    # OpenRLHF cannot send headers: the token travels in the URL it is given.
    executor = SingleTurnAgentExecutor(remote_rm_url=f"{live.url}/get_reward?token=t0k3n")
    completions = [CORRECT] * 2 + [NO_CODE] * 248  # a burst of 250, the queue holds 4

    async def burst():
        return await asyncio.gather(
            *(executor._fetch_rewards_via_http([prompt + c], [prompt], [rows[0]["label"]]) for c in completions)
        )

    before = live.service.status()
    answers = [a[0] for a in asyncio.run(burst())]
    after = live.service.status()
    rewards = [a["rewards"][0] for a in answers]
    assert all(r > 0 for r in rewards[:2]) and rewards[2:] == [RewardConfig().edit_failed] * 248
    assert len({tuple(sorted(a["extra_logs"])) for a in answers}) == 1  # the same keys whatever the verdict
    assert after["admitted_after_waiting"] > before["admitted_after_waiting"]  # it did wait for room
    counts = after["counts"]
    assert not any(k in counts for k in ("rejected_queue_full", "http_503", "http_500", "http_401"))
    # OpenRLHF's own batching of per-sample experiences (it fails when info keys differ).
    experiences = [
        Experience(
            rewards=torch.tensor([a["rewards"][0]]),
            sequences=torch.ones(1, 2, dtype=torch.long),
            info={k: torch.tensor([v[0]]) for k, v in a["extra_logs"].items()},
        )
        for a in answers
    ]
    merged = Experience.concat_experiences(experiences, pad_token_id=0)
    assert merged.info["kernelsmith/correct"].tolist() == [1.0, 1.0] + [0.0] * 248
    assert merged.info["kernelsmith/edit-failed"].sum().item() == 248

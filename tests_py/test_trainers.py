"""The exports and rewards in the real trainers, on the CPU, with a tiny model
and tokenizer built in the test (tiny_lm.py, no download): TRL's SFTTrainer
on every SFT format TRL reads, TRL's GRPOTrainer with our reward, verl's
RLHFDataset and both of its reward managers over our compute_score, and
OpenRLHF's own remote-reward client against ``serve`` with a burst larger
than the queue. The runs exported are the session fixture ``runs``."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from kernelsmith.evaluator import Evaluator
from kernelsmith.export import RLConfig, SFTConfig, export_rl, export_sft, read_jsonl
from kernelsmith.rewards import LocalScorer, RewardBackend, RewardConfig, make_trl_reward
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
    for fmt, options in (("messages", {}), ("prompt-completion", {}), ("parquet", {}),
                         ("prompt-completion", {"conversational": True})):
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
    args = TRLSFTConfig(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=1,
                        max_length=data["sft_max_tokens"] + 16,
                        report_to=[], save_strategy="no", logging_steps=1, use_cpu=True, dataloader_num_workers=0)
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    result = trainer.train()
    assert result.global_step == 2
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 2 and all(loss > 0 for loss in losses)

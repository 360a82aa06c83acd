"""TRL ``GRPOTrainer`` adapter: multi-turn episodes through ``rollout_func``.

TRL (1.x) documents ``rollout_func(prompts, trainer) -> {"prompt_ids",
"completion_ids", "logprobs", ...}``: the function generates the completions
itself; an ``env_mask`` field marks which completion tokens the model wrote
(1) and which the environment inserted (0, left out of the loss); any other
field is passed to the reward functions. Here one completion is one whole
episode: the model's answer, the environment's feedback message (masked), the
next answer, ..., and its reward is the episode's discounted return, read by
:func:`episode_return` from the ``ks_return`` field.

Usage::

    env = KernelEnv(tasks, evaluator, EnvConfig(max_turns=2))
    trainer = GRPOTrainer(model=..., reward_funcs=[episode_return], args=GRPOConfig(...),
                          train_dataset=trl_dataset(env), rollout_func=make_rollout_func(env),
                          processing_class=tokenizer)

Generation runs on the trainer's own model (``model.generate``), every
episode of the batch turn by turn; all the turn's programs are evaluated at
once on the evaluator's pool (:meth:`KernelEnv.step_many`). ``logprobs`` is
None: TRL then computes the old log-probabilities itself (no vLLM here).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Callable, Optional

from .core import KernelEnv

__all__ = ["episode_return", "make_rollout_func", "trl_dataset"]


def _key(prompt: Any) -> str:
    return hashlib.sha256(json.dumps(prompt, sort_keys=True).encode()).hexdigest()


def trl_dataset(env: KernelEnv, repeat: int = 1) -> Any:
    """A ``datasets.Dataset`` with one row per start of ``env`` (``repeat``
    times): ``prompt`` is the first observation (the loop's prompt, as chat
    messages), ``ks_start`` the start's index."""
    from datasets import Dataset

    rows = []
    for _ in range(repeat):
        for index, start in enumerate(env.starts):
            messages, _ = env.first_prompt(start)
            rows.append({"prompt": messages, "ks_start": index})
    return Dataset.from_list(rows)


def episode_return(
    prompts: Any = None, completions: Any = None, ks_return: Optional[list] = None, **_: Any
) -> list[float]:
    """The reward function to pass to GRPOTrainer: each episode's discounted return."""
    if ks_return is None:
        raise ValueError("episode_return needs the ks_return field: pass rollout_func=make_rollout_func(env)")
    return [float(v) for v in ks_return]


def _render(tokenizer: Any, messages: list[dict[str, str]], generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _feedback_ids(
    tokenizer: Any, messages: list[dict[str, str]], answer: str, feedback: str, answer_ids: list[int]
) -> list[int]:
    """Tokens between the model's answer and its next answer: the end of the
    assistant turn (unless the model already ended it), the feedback as a
    user turn, and the next assistant header -- as the chat template renders them."""
    closed = _render(tokenizer, messages + [{"role": "assistant", "content": answer}], False)
    following = _render(
        tokenizer, messages + [{"role": "assistant", "content": answer}, {"role": "user", "content": feedback}], True
    )
    if not following.startswith(closed):
        raise ValueError(
            "the chat template renders a conversation differently once a turn follows; "
            "multi-turn rollouts need a template that only appends"
        )
    at = closed.rfind(answer) if answer else len(_render(tokenizer, messages, True))
    if at < 0:
        raise ValueError("the chat template changes the assistant's text; cannot place the feedback tokens")
    close_ids = _ids(tokenizer, closed[at + len(answer) :])
    eos = tokenizer.eos_token_id
    if answer_ids and close_ids and answer_ids[-1] == eos and close_ids[0] == eos:
        close_ids = close_ids[1:]  # the model ended its turn itself
    return close_ids + _ids(tokenizer, following[len(closed) :])


def make_rollout_func(
    env: KernelEnv, *, max_new_tokens: Optional[int] = None, temperature: Optional[float] = None
) -> Callable[[list, Any], dict[str, Any]]:
    """``rollout_func`` for GRPOTrainer: every prompt of the batch (its rows
    made by :func:`trl_dataset`, TRL repeats each ``num_generations`` times)
    becomes an episode of ``env.config.max_turns`` turns. ``max_new_tokens``
    per answer defaults to the trainer's ``max_completion_length``."""
    by_prompt = {_key(env.first_prompt(start)[0]): index for index, start in enumerate(env.starts)}

    def rollout(prompts: list, trainer: Any) -> dict[str, Any]:
        import torch

        tokenizer = trainer.processing_class
        model = trainer.accelerator.unwrap_model(trainer.model)
        args = trainer.args
        new_tokens = int(max_new_tokens or args.max_completion_length)
        temp = float(temperature if temperature is not None else args.temperature)
        episodes = []
        for prompt in prompts:
            index = by_prompt.get(_key(prompt))
            if index is None:
                raise ValueError(
                    "a prompt that is no start of this environment: build the dataset with trl_dataset(env)"
                )
            episodes.append(env.new_episode(index))
        prompt_ids = [_ids(tokenizer, _render(tokenizer, ep.observation, True)) for ep in episodes]
        completion_ids: list[list[int]] = [[] for _ in episodes]
        env_mask: list[list[int]] = [[] for _ in episodes]
        pad = tokenizer.pad_token_id
        device = next(model.parameters()).device
        while True:
            active = [i for i, ep in enumerate(episodes) if not ep.done]
            if not active:
                break
            contexts = [prompt_ids[i] + completion_ids[i] for i in active]
            width = max(len(c) for c in contexts)
            input_ids = torch.tensor([[pad] * (width - len(c)) + c for c in contexts], device=device)
            mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts], device=device)
            with torch.no_grad():
                out = model.generate(
                    input_ids=input_ids,
                    attention_mask=mask,
                    max_new_tokens=new_tokens,
                    do_sample=True,
                    temperature=temp,
                    pad_token_id=pad,
                    eos_token_id=tokenizer.eos_token_id,
                )
            answers = []
            for row, i in enumerate(active):
                ids = out[row, width:].tolist()
                if tokenizer.eos_token_id in ids:  # up to and with the end of the turn
                    ids = ids[: ids.index(tokenizer.eos_token_id) + 1]
                else:
                    while ids and ids[-1] == pad:
                        ids.pop()
                answers.append((i, ids, tokenizer.decode(ids, skip_special_tokens=True)))
            steps = env.step_many([(episodes[i], text) for i, _, text in answers])
            for (i, ids, text), step in zip(answers, steps):
                before = episodes[i].messages[:-2] if not step.done else episodes[i].messages[:-1]
                completion_ids[i] += ids
                env_mask[i] += [1] * len(ids)
                if not step.done:
                    extra = _feedback_ids(tokenizer, before, text, step.observation, ids)
                    completion_ids[i] += extra
                    env_mask[i] += [0] * len(extra)
        gamma = env.config.gamma
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": None,
            "env_mask": env_mask,
            "ks_return": [ep.returns(gamma)[0] for ep in episodes],
            "ks_turns": [len(ep.turns) for ep in episodes],
            "ks_rewards": [ep.rewards for ep in episodes],
        }

    return rollout

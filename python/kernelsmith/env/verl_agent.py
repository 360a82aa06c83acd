"""verl agent-loop adapter: multi-turn kernel episodes in verl's rollout.

verl (0.9) documents custom multi-turn rollouts as ``AgentLoopBase``
subclasses registered under a name (``@register``) and listed in the agent
loop config file (``actor_rollout_ref.rollout.agent.agent_loop_config_path``);
a dataset row picks its loop with its ``agent_name`` column. ``run`` gets the
row's columns (``raw_prompt``, ``extra_info``, ...), generates through
``self.server_manager.generate`` and returns an ``AgentLoopOutput`` whose
``response_mask`` is 1 on the model's tokens and 0 on the environment's.

:class:`KernelAgentLoop` reads the rows ``kernelsmith export rl`` writes
(``extra_info.task`` and ``extra_info.parent``: the task and the program the
first answer edits; ``raw_prompt``: the loop's prompt) and runs an episode of
:class:`~kernelsmith.env.KernelEnv`: each answer is applied and evaluated on
the evaluator's pool (concurrent episodes of the worker share it), the
feedback message is appended as a user turn (masked), and the output carries
the discounted return as ``reward_score`` and the per-turn rewards as
``extra_fields["turn_scores"]``.

Agent loop config (YAML)::

    - name: kernelsmith
      _target_: kernelsmith.env.verl_agent.KernelAgentLoop
      max_turns: 3
      gamma: 0.4
      eval_workers: 4
"""

from __future__ import annotations

import threading
from typing import Any, Optional
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

from .core import EnvConfig, EpisodeStart, KernelEnv
from ..rewards.scorer import task_from_spec
from ..evaluator import Evaluator

__all__ = ["KernelAgentLoop", "close_shared", "start_from_row"]

_shared_lock = threading.Lock()
_shared: dict[tuple, KernelEnv] = {}


def close_shared() -> None:
    """Close the environments (and the evaluation pools they built) of this process."""
    with _shared_lock:
        envs = list(_shared.values())
        _shared.clear()
    for env in envs:
        env.close()


def start_from_row(extra_info: dict[str, Any]) -> EpisodeStart:
    """The episode start of an exported RL row (``extra_info.task`` and ``extra_info.parent``)."""
    if not isinstance(extra_info, dict) or "task" not in extra_info:
        raise ValueError("the row has no extra_info.task: use rows written by `kernelsmith export rl`")
    task = task_from_spec(extra_info["task"])
    parent = extra_info.get("parent") or {}
    if parent.get("is_reference") or not parent.get("source"):
        return EpisodeStart(task=task, name="reference")
    metrics = {
        k: float(parent[src]) for k, src in (("speedup", "speedup"), ("runtime_ms", "runtime_ms")) if parent.get(src)
    }
    return EpisodeStart(task=task, source=parent["source"], metrics=metrics, name=f"parent {parent.get('id')}")


@register("kernelsmith")
class KernelAgentLoop(AgentLoopBase):
    """verl agent loop over :class:`KernelEnv` episodes."""

    def __init__(
        self,
        *args: Any,
        max_turns: int = 3,
        gamma: float = 0.4,
        eval_workers: Optional[int] = None,
        trials: Optional[int] = None,
        evaluator: Any = None,
        record_dir: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.response_length = self.rollout_config.response_length
        key = (max_turns, gamma, eval_workers, trials, id(evaluator), record_dir)
        with _shared_lock:  # one environment (one evaluation pool) per worker process and setting
            env = _shared.get(key)
            if env is None:
                owned = evaluator is None
                if owned:
                    evaluator = Evaluator(workers=eval_workers)
                env = KernelEnv(
                    [], evaluator, EnvConfig(max_turns=max_turns, gamma=gamma, trials=trials), record_dir=record_dir
                )
                env._own_evaluator = owned  # closed by close_shared()
                _shared[key] = env
        self.env = env

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        messages = [dict(m) for m in kwargs["raw_prompt"]]
        episode = self.env.new_episode(start_from_row(kwargs.get("extra_info") or {}), messages=messages)
        prompt_ids = await self.ct_build_initial_tokens(messages)
        runtime_ids = list(prompt_ids)
        response_mask: list[int] = []
        logprobs: Optional[list[float]] = None
        while True:
            output = await self.server_manager.generate(
                request_id=uuid4().hex, prompt_ids=runtime_ids, sampling_params=sampling_params
            )
            merged, response_mask, logprobs = await self.ct_merge_assistant_token(
                runtime_ids,
                output.token_ids,
                response_mask,
                logprobs if (logprobs or output.log_probs) else None,
                assistant_logprobs=output.log_probs or None,
            )
            runtime_ids = merged.token_ids
            answer = self.tokenizer.decode(output.token_ids, skip_special_tokens=True)
            step = await self.env.step_async(episode, answer)
            if step.done or len(response_mask) >= self.response_length:
                break
            before = messages + [{"role": "assistant", "content": answer}]
            messages = before + [{"role": "user", "content": step.observation}]
            merged, response_mask, logprobs = await self.ct_merge_context_msg(
                before, messages, runtime_ids, response_mask, logprobs
            )
            runtime_ids = merged.token_ids
        response_ids = runtime_ids[len(runtime_ids) - len(response_mask) :] if response_mask else []
        prompt_ids = runtime_ids[: len(runtime_ids) - len(response_mask)]
        returns = episode.returns(self.env.config.gamma)
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids[: self.response_length],
            response_mask=response_mask[: self.response_length],
            response_logprobs=logprobs[: self.response_length] if logprobs else None,
            reward_score=returns[0] if returns else None,
            num_turns=1 + 2 * len(episode.turns) - (1 if episode.done else 0),
            metrics={},
            extra_fields={
                "turn_scores": episode.rewards,
                "tool_rewards": [],
                "turn_statuses": [t.status for t in episode.turns],
            },
        )

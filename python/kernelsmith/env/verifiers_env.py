"""Prime Intellect ``verifiers`` adapter: a ``MultiTurnEnv``.

``verifiers`` 0.3.x documents multi-turn environments as subclasses of
``vf.MultiTurnEnv`` with ``env_response(messages, state)`` (the
environment's next message), ``@vf.stop`` conditions and a ``vf.Rubric`` of
reward functions; ``add_trajectory_step`` is where intermediate (per-turn)
rewards are set. Here:

* the dataset holds one row per start of the :class:`KernelEnv` (``prompt``:
  the evolve loop's first prompt; ``info.ks_start``: the start's index);
* every model answer is stepped through the environment as soon as it
  arrives (:meth:`KernelEnv.step_async`: concurrent rollouts share the
  evaluator's pool); the turn's reward is the trajectory step's ``reward``,
  the feedback is the next user message;
* the episode stops when the environment says so (``max_turns`` or
  ``stop_speedup``); the rubric's reward is the episode's discounted return,
  with the turn count, the number of correct turns and the best speedup over
  the reference as metrics.

``verifiers`` 0.4 replaced this API (``verifiers.v1``, no ``MultiTurnEnv``);
0.3.1 is the newest release that has it (``import verifiers as vf;
vf.MultiTurnEnv``). Usage::

    vf_env = load_environment(KernelEnv(tasks, evaluator, EnvConfig(max_turns=3)))
    results = await vf_env.evaluate(client=AsyncOpenAI(base_url=...), model="...", num_examples=-1)
"""
from __future__ import annotations

from typing import Any

import verifiers as vf

from .core import Episode, KernelEnv

__all__ = ["KernelMultiTurnEnv", "load_environment"]


class KernelMultiTurnEnv(vf.MultiTurnEnv):
    """A verifiers MultiTurnEnv whose turns are :class:`KernelEnv` steps."""

    def __init__(self, env: KernelEnv, repeat: int = 1, **kwargs: Any) -> None:
        from datasets import Dataset

        self.kernel_env = env
        self._episodes: dict[str, Episode] = {}
        rows = []
        for _ in range(repeat):
            for index, start in enumerate(env.starts):
                messages, _ = env.first_prompt(start)
                rows.append({"prompt": messages, "answer": "", "info": {"ks_start": index, "ks_task": start.task.name}})
        dataset = Dataset.from_list(rows)
        rubric = vf.Rubric(funcs=[self.episode_return], weights=[1.0])
        for metric in (self.turns_correct, self.best_speedup):
            rubric.add_metric(metric)
        super().__init__(dataset=dataset, eval_dataset=dataset, rubric=rubric, max_turns=env.config.max_turns,
                         **kwargs)

    def episode(self, state: Any) -> Episode:
        return self._episodes[state["trajectory_id"]]

    async def setup_state(self, state: Any) -> Any:
        info = state.get("info") or {}
        self._episodes[state["trajectory_id"]] = self.kernel_env.new_episode(int(info.get("ks_start", 0)))
        state["ks_done"] = False
        state["ks_rewards"] = []
        return state

    async def add_trajectory_step(self, state: Any, trajectory_step: Any) -> None:
        completion = trajectory_step["completion"]
        text = ""
        for message in reversed(completion):
            role = message.get("role") if isinstance(message, dict) else getattr(message, "role", None)
            if role == "assistant":
                text = message.get("content") if isinstance(message, dict) else getattr(message, "content", "")
                break
        step = await self.kernel_env.step_async(self.episode(state), text or "")
        trajectory_step["reward"] = step.reward
        trajectory_step["extras"] = {**(trajectory_step.get("extras") or {}),
                                     "ks_status": step.info["status"], "ks_terms": {
                                         k: v for k, v in step.info.items() if isinstance(v, (int, float, str, bool))}}
        state["trajectory"].append(trajectory_step)
        state["ks_rewards"] = state["ks_rewards"] + [step.reward]
        state["ks_feedback"] = step.observation
        state["ks_done"] = step.done

    async def env_response(self, messages: Any, state: Any, **kwargs: Any) -> Any:
        return [vf.UserMessage(content=state["ks_feedback"])]

    @vf.stop
    async def episode_done(self, state: Any) -> bool:
        return bool(state.get("ks_done"))

    # -- rubric ---------------------------------------------------------
    async def episode_return(self, state: Any, **_: Any) -> float:
        """The episode's discounted return G_0 (docs/rl_environment.md)."""
        return self.episode(state).returns(self.kernel_env.config.gamma)[0]

    async def turns_correct(self, state: Any, **_: Any) -> float:
        return float(sum(t.status in ("correct", "untimed") for t in self.episode(state).turns))

    async def best_speedup(self, state: Any, **_: Any) -> float:
        return max((float(t.info.get("speedup_ref", 0.0)) for t in self.episode(state).turns
                    if t.status == "correct"), default=0.0)


def load_environment(env: KernelEnv, **kwargs: Any) -> KernelMultiTurnEnv:
    """The verifiers entry point (``load_environment``) over a KernelEnv."""
    return KernelMultiTurnEnv(env, **kwargs)

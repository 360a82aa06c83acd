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

from .core import Episode, KernelEnv, discounted_returns

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
        super().__init__(dataset=dataset, eval_dataset=dataset, rubric=rubric, max_turns=env.config.max_turns, **kwargs)

    def episode(self, state: Any) -> Episode:
        return self._episodes[state["trajectory_id"]]

    async def setup_state(self, state: Any) -> Any:
        info = state.get("info") or {}
        self._episodes[state["trajectory_id"]] = self.kernel_env.new_episode(int(info.get("ks_start", 0)))
        state["ks_done"] = False
        state["ks_rewards"] = []
        state["ks_statuses"] = []
        state["ks_speedups"] = []
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
        trajectory_step["extras"] = {
            **(trajectory_step.get("extras") or {}),
            "ks_status": step.info["status"],
            "ks_terms": {k: v for k, v in step.info.items() if isinstance(v, (int, float, str, bool))},
        }
        state["trajectory"].append(trajectory_step)
        # Plain values in the state: the rubric scores from them after the episode object is dropped.
        state["ks_rewards"] = state["ks_rewards"] + [step.reward]
        state["ks_statuses"] = state["ks_statuses"] + [step.info["status"]]
        state["ks_speedups"] = state["ks_speedups"] + [float(step.info.get("speedup_ref", 0.0) or 0.0)]
        state["ks_feedback"] = step.observation
        state["ks_done"] = step.done

    async def env_response(self, messages: Any, state: Any, **kwargs: Any) -> Any:
        return [vf.UserMessage(content=state["ks_feedback"])]

    @vf.stop
    async def episode_done(self, state: Any) -> bool:
        return bool(state.get("ks_done"))

    @vf.cleanup
    async def drop_episode(self, state: Any) -> None:
        """However the rollout ended (done, verifiers' own limits, an error)."""
        self._episodes.pop(state.get("trajectory_id"), None)

    # -- rubric ---------------------------------------------------------
    async def episode_return(self, state: Any, **_: Any) -> float:
        """The episode's discounted return G_0 (docs/rl_environment.md)."""
        returns = discounted_returns(state.get("ks_rewards") or [], self.kernel_env.config.gamma)
        return returns[0] if returns else 0.0

    async def turns_correct(self, state: Any, **_: Any) -> float:
        return float(sum(s in ("correct", "untimed") for s in state.get("ks_statuses") or []))

    async def best_speedup(self, state: Any, **_: Any) -> float:
        """The best speedup over the reference paid in the episode (0: none correct and timed)."""
        return max(
            (
                s
                for s, status in zip(state.get("ks_speedups") or [], state.get("ks_statuses") or [])
                if status == "correct"
            ),
            default=0.0,
        )


def load_environment(env: KernelEnv, **kwargs: Any) -> KernelMultiTurnEnv:
    """The verifiers entry point (``load_environment``) over a KernelEnv."""
    return KernelMultiTurnEnv(env, **kwargs)

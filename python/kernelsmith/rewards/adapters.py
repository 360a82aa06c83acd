"""Reward functions in the shapes RL trainers call them.

* verl: :func:`compute_score` ``(data_source, solution_str, ground_truth,
  extra_info=None) -> float`` -- point ``custom_reward_function.path`` at
  ``kernelsmith/rewards/verl.py`` (its ``compute_score``).
* TRL GRPO: :func:`make_trl_reward` returns ``fn(prompts, completions,
  **kwargs) -> list[float]``; dataset columns arrive as kwargs (``extra_info``
  or ``ground_truth``, as written by ``kernelsmith export rl``).
* OpenRLHF: ``kernelsmith serve`` answers ``POST /get_reward`` (pass
  ``--remote_rm_url http://HOST:PORT/get_reward``); labels are the rows'
  ``reward_model.ground_truth`` strings.

Each scores through the server when a URL is given (argument or the
``KERNELSMITH_REWARD_URL`` environment variable, token in
``KERNELSMITH_REWARD_TOKEN``), else through an in-process
:class:`~kernelsmith.rewards.scorer.LocalScorer` whose evaluations run in
sandboxed worker processes.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Callable, Mapping, Optional, Sequence

from .core import RewardConfig
from .scorer import LocalScorer, item_from_verl

_default_lock = threading.Lock()
_default_backend: Optional["RewardBackend"] = None


class RewardBackend:
    """Scores items through a server (url) or a LocalScorer."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None,
                 scorer: Optional[LocalScorer] = None, config: Optional[RewardConfig] = None) -> None:
        self.config = config
        self.client = None
        self.scorer = None
        if url:
            from ..server.client import EvaluationClient

            self.client = EvaluationClient(url, token=token)
        else:
            self.scorer = scorer or LocalScorer(config=config)

    def score_many(self, items: Sequence[Mapping[str, Any]]) -> list[float]:
        if not items:
            return []
        if self.client is not None:
            return self.client.rewards(items, self.config)
        assert self.scorer is not None
        return [r.reward for r in self.scorer.score_many(items, self.config)]

    def close(self) -> None:
        if self.scorer is not None:
            self.scorer.close()


def default_backend() -> RewardBackend:
    """One backend per process, configured from the environment."""
    global _default_backend
    with _default_lock:
        if _default_backend is None:
            _default_backend = RewardBackend(url=os.environ.get("KERNELSMITH_REWARD_URL"),
                                             token=os.environ.get("KERNELSMITH_REWARD_TOKEN"))
        return _default_backend


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Optional[Mapping[str, Any]] = None,
                  backend: Optional[RewardBackend] = None, **_: Any) -> float:
    """verl's custom reward function signature."""
    item = item_from_verl(solution_str, ground_truth, extra_info)
    return (backend or default_backend()).score_many([item])[0]


def _column(kwargs: Mapping[str, Any], name: str, index: int) -> Any:
    values = kwargs.get(name)
    if values is None:
        return None
    return values[index]


def make_trl_reward(url: Optional[str] = None, token: Optional[str] = None, *, scorer: Optional[LocalScorer] = None,
                    config: Optional[RewardConfig] = None, backend: Optional[RewardBackend] = None,
                    name: str = "kernelsmith_speedup") -> Callable[..., list[float]]:
    """A TRL GRPO reward function. Completions may be strings or chat message
    lists (conversational datasets); the parent and task come from the
    ``extra_info`` column (or ``reward_model`` / ``ground_truth``) of the
    dataset written by ``kernelsmith export rl``."""
    chosen = backend or RewardBackend(url=url, token=token, scorer=scorer, config=config)

    def reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        items = []
        for i, completion in enumerate(completions):
            truth = _column(kwargs, "ground_truth", i)
            reward_model = _column(kwargs, "reward_model", i)
            if truth is None and isinstance(reward_model, Mapping):
                truth = reward_model.get("ground_truth")
            items.append(item_from_verl(completion, truth, _column(kwargs, "extra_info", i)))
        return chosen.score_many(items)

    reward.__name__ = name  # TRL logs each reward function under its name
    return reward

"""Reward functions in the shapes RL trainers call them.

* verl: :func:`compute_score`, per sample ``(data_source, solution_str,
  ground_truth, extra_info) -> float`` or batch ``(data_sources=,
  solution_strs=, ground_truths=, extra_infos=) -> list[float]`` -- point
  ``reward.custom_reward_function.path`` (verl 0.9) at
  ``kernelsmith/rewards/verl.py``.
* TRL GRPO: :func:`make_trl_reward` returns ``fn(prompts, completions,
  **kwargs) -> list[float]``; dataset columns arrive as kwargs (``extra_info``
  or ``ground_truth``, as written by ``kernelsmith export rl``).
* OpenRLHF: ``kernelsmith serve`` answers ``POST /get_reward`` (pass
  ``--remote_rm_url http://HOST:PORT/get_reward``); labels are the ``label``
  column of ``kernelsmith export rl --format openrlhf``.

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

    def __init__(
        self,
        url: Optional[str] = None,
        token: Optional[str] = None,
        scorer: Optional[LocalScorer] = None,
        config: Optional[RewardConfig] = None,
    ) -> None:
        self.config = config
        self.client = None
        self.scorer = None
        if url:
            # lazy: cycle rewards.adapters -> server -> server.client -> rewards -> rewards.adapters
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
            _default_backend = RewardBackend(
                url=os.environ.get("KERNELSMITH_REWARD_URL"), token=os.environ.get("KERNELSMITH_REWARD_TOKEN")
            )
        return _default_backend


def compute_score(
    data_source: Any = None,
    solution_str: Any = None,
    ground_truth: Any = None,
    extra_info: Optional[Mapping[str, Any]] = None,
    *,
    data_sources: Optional[Sequence[Any]] = None,
    solution_strs: Optional[Sequence[Any]] = None,
    ground_truths: Optional[Sequence[Any]] = None,
    extra_infos: Optional[Sequence[Any]] = None,
    backend: Optional[RewardBackend] = None,
    **_: Any,
) -> Any:
    """verl's custom reward function, in both of its call shapes.

    * per sample (``NaiveRewardManager``, verl 0.9's reward loop):
      ``compute_score(data_source, solution_str, ground_truth, extra_info)``
      -> float;
    * batch (``BatchRewardManager``): ``compute_score(data_sources=...,
      solution_strs=..., ground_truths=..., extra_infos=...)`` -> list of
      floats, the whole batch evaluated concurrently on the evaluation pool
      (or in one server request).

    Extra keyword arguments (verl's ``reward_kwargs``, ``num_turns``...) are
    accepted and ignored.
    """
    chosen = backend or default_backend()
    if solution_strs is not None:
        n = len(solution_strs)
        truths = list(ground_truths) if ground_truths is not None else [None] * n
        extras = list(extra_infos) if extra_infos is not None else [None] * n
        if not len(truths) == len(extras) == n:
            raise ValueError(
                f"batch compute_score: {n} solution_strs but {len(truths)} ground_truths and {len(extras)} extra_infos"
            )
        return chosen.score_many([item_from_verl(s, t, e) for s, t, e in zip(solution_strs, truths, extras)])
    if solution_str is None:
        raise TypeError("compute_score needs solution_str (per sample) or solution_strs (batch)")
    return chosen.score_many([item_from_verl(solution_str, ground_truth, extra_info)])[0]


def _column(kwargs: Mapping[str, Any], name: str, index: int) -> Any:
    values = kwargs.get(name)
    if values is None:
        return None
    return values[index]


def make_trl_reward(
    url: Optional[str] = None,
    token: Optional[str] = None,
    *,
    scorer: Optional[LocalScorer] = None,
    config: Optional[RewardConfig] = None,
    backend: Optional[RewardBackend] = None,
    name: str = "kernelsmith_speedup",
) -> Callable[..., list[float]]:
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

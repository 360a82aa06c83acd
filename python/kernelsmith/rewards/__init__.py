"""Rewards for RL on kernels: speedup over the parent, with shaping and
penalties (:mod:`.core`), completion -> reward through the sandboxed
evaluator (:mod:`.scorer`), and adapters for verl, TRL and OpenRLHF
(:mod:`.adapters`). See docs/training_data.md."""

from .adapters import RewardBackend, compute_score, make_trl_reward
from .core import Reward, RewardConfig, compute_reward, shape, speedup_over_parent
from .scorer import LocalScorer, TaskRegistry, completion_text, item_from_verl, task_from_spec

__all__ = [
    "LocalScorer",
    "Reward",
    "RewardBackend",
    "RewardConfig",
    "TaskRegistry",
    "completion_text",
    "compute_reward",
    "compute_score",
    "item_from_verl",
    "make_trl_reward",
    "shape",
    "speedup_over_parent",
    "task_from_spec",
]

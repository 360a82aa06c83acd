"""verl entry point: ``custom_reward_function.path`` = this file,
``custom_reward_function.name`` = ``compute_score``.

Set ``KERNELSMITH_REWARD_URL`` (and ``KERNELSMITH_REWARD_TOKEN``) to score
through ``kernelsmith serve``; without it, evaluations run in process (in
sandboxed workers) on this machine.
"""
from kernelsmith.rewards.adapters import compute_score

__all__ = ["compute_score"]

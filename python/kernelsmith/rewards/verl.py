"""verl entry point (verl 0.9 keys): ``reward.custom_reward_function.path``
= this file, ``reward.custom_reward_function.name`` = ``compute_score``.
It answers both the per-sample call (``reward.reward_manager.name=naive``)
and the batch call (``batch``, which scores a whole batch concurrently).

Set ``KERNELSMITH_REWARD_URL`` (and ``KERNELSMITH_REWARD_TOKEN``) to score
through ``kernelsmith serve``; without it, evaluations run in process (in
sandboxed workers) on this machine.
"""

from kernelsmith.rewards.adapters import compute_score

__all__ = ["compute_score"]

"""Multi-turn RL environment over tasks: the evolution step as an episode.

:class:`KernelEnv` (``reset`` / ``step`` / ``step_many`` / ``step_async``)
knows no trainer; adapters, one small module each, wrap it the way each
trainer documents: :mod:`.trl_rollout` (TRL GRPOTrainer's ``rollout_func``),
:mod:`.verl_agent` (verl's agent loop), :mod:`.verifiers_env` (Prime
Intellect verifiers' ``MultiTurnEnv``). See docs/rl_environment.md.
"""

from .core import EnvConfig, Episode, EpisodeStart, KernelEnv, StepResult, Turn, discounted_returns
from .record import EpisodeRecorder

__all__ = [
    "EnvConfig",
    "Episode",
    "EpisodeRecorder",
    "EpisodeStart",
    "KernelEnv",
    "StepResult",
    "Turn",
    "discounted_returns",
]

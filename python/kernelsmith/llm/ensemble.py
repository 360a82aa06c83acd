"""Several models with weights behind one client."""

from __future__ import annotations

import random
from typing import Any, Optional, Sequence

from .types import Completion, LLMClient
from .usage import UsageMeter


class EnsembleClient:
    """Picks one member per request, with probability proportional to its weight.

    The pick is deterministic for a seed: by default the n-th call draws the
    n-th number of a ``random.Random(seed)`` stream (its position is in
    :meth:`state_dict` for checkpoints); with ``pick_key`` (e.g. the
    iteration number) the pick depends only on ``(seed, pick_key)``, so it
    does not depend on the order in which concurrent requests start, and a
    resumed run picks the same models. The returned Completion's ``model``
    names the member that answered.
    """

    def __init__(
        self, members: Sequence[tuple[LLMClient, float]], *, seed: int = 0, meter: Optional[UsageMeter] = None
    ) -> None:
        if not members:
            raise ValueError("ensemble: at least one model is needed")
        for client, weight in members:
            if weight < 0:
                raise ValueError(f"ensemble: weight of {client.model} must be >= 0, got {weight}")
        if sum(w for _, w in members) <= 0:
            raise ValueError("ensemble: the weights must not all be zero")
        self.members = [(c, float(w)) for c, w in members]
        self.seed = seed
        self._rng = random.Random(seed)
        self._draws = 0
        self.meter = meter if meter is not None else getattr(members[0][0], "meter", UsageMeter())
        self.model = "ensemble(" + ", ".join(f"{c.model}={w:g}" for c, w in self.members) + ")"

    def __repr__(self) -> str:
        return f"EnsembleClient({', '.join(f'{c!r}: {w:g}' for c, w in self.members)}, seed={self.seed})"

    @property
    def models(self) -> list[str]:
        return [c.model for c, _ in self.members]

    def _choose(self, u: float) -> LLMClient:
        total = sum(w for _, w in self.members)
        acc = 0.0
        for client, weight in self.members:
            acc += weight / total
            if u < acc and weight > 0:
                return client
        return [c for c, w in self.members if w > 0][-1]

    def pick(self, pick_key: Any = None) -> LLMClient:
        """The member for the next request (advances the stream unless keyed)."""
        if pick_key is not None:
            return self._choose(random.Random(f"{self.seed}:{pick_key}").random())
        self._draws += 1
        return self._choose(self._rng.random())

    async def complete(self, messages: list[dict[str, Any]], *, pick_key: Any = None, **params: Any) -> Completion:
        return await self.pick(pick_key).complete(messages, **params)

    async def aclose(self) -> None:
        for client, _ in self.members:
            await client.aclose()

    def state_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "draws": self._draws}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seed = int(state["seed"])
        self._rng = random.Random(self.seed)
        self._draws = 0
        for _ in range(int(state["draws"])):
            self._rng.random()
            self._draws += 1

"""The proposer interface: a request and its prompt in, response text out.

Every proposer returns text as if a model wrote it (a fenced program or
SEARCH/REPLACE blocks), so the loop applies all of them the same way.
"""

from __future__ import annotations

import abc
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

__all__ = ["Proposal", "Proposer", "ProposerExhausted"]


class ProposerExhausted(RuntimeError):
    """The proposer has nothing more to propose (e.g. a replayed run ended).

    The loop should stop cleanly (checkpoint and summary), not count a failure.
    """


@dataclass
class Proposal:
    text: str
    model: str = ""
    # prompt_tokens, completion_tokens, total_tokens, and whatever else the client counts.
    usage: dict[str, Any] = field(default_factory=dict)
    latency_s: float = 0.0
    reasoning: str | None = None
    # Set when the proposer failed (e.g. the API errored after retries); text is then "".
    error: str | None = None
    # What failed, for the record: kind, HTTP status, the provider's message
    # (LLMError.to_dict()); None when the proposal did not fail.
    error_info: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Proposal":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


class Proposer(abc.ABC):
    """Base class. ``name`` is what the trajectory records as the model when
    the proposer does not report one."""

    name: str = "proposer"

    @abc.abstractmethod
    async def propose(self, request: Any, messages: Sequence[Mapping[str, str]]) -> Proposal:
        """Propose a response for ``request`` given the prompt ``messages``."""

    async def aclose(self) -> None:
        """Release resources (HTTP clients); the default has none."""

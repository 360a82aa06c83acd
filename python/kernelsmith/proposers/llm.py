"""The LLM proposer: sends the prompt to a chat client."""

from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

from ..llm.types import LLMError
from .base import Proposal, Proposer

__all__ = ["LLMProposer"]


def _usage_dict(usage: Any) -> dict[str, Any]:
    if usage is None:
        return {}
    if isinstance(usage, Mapping):
        return dict(usage)
    if hasattr(usage, "to_dict"):
        return dict(usage.to_dict())
    if hasattr(usage, "__dict__"):
        return {k: v for k, v in vars(usage).items() if not k.startswith("_")}
    return {"value": usage}


class LLMProposer(Proposer):
    """Wraps a client with ``async complete(messages, **params) -> Completion``
    (fields ``text``, ``reasoning``, ``model``, ``usage``, ``latency_s``).

    ``params`` (temperature, top_p, max_tokens, ...) go to every call.
    Exceptions from the client become a Proposal with ``error`` (and
    ``error_info``) set so that the loop records the step as an LLM failure
    and moves on, except those in ``propagate`` (e.g. the client's
    budget-exhausted error) and fatal :class:`LLMError` s (authentication,
    quota: every later request would fail the same way), which are re-raised
    for the loop to stop.
    """

    name = "llm"

    def __init__(self, client: Any, *, propagate: tuple[type[BaseException], ...] = (), **params: Any) -> None:
        if not hasattr(client, "complete"):
            raise TypeError("client must have an async complete(messages, **params) method")
        self.client = client
        self.params = params
        self.propagate = tuple(propagate)

    async def propose(self, request: Any, messages: Sequence[Mapping[str, str]]) -> Proposal:
        started = time.perf_counter()
        try:
            completion = await self.client.complete(list(messages), **self.params)
        except self.propagate:
            raise
        except LLMError as exc:
            if exc.fatal:
                raise
            return self._failed(request, exc, exc.to_dict(), started)
        except Exception as exc:  # noqa: BLE001 -- any client failure is one failed step
            info = {
                "kind": "other",
                "status": None,
                "model": str(getattr(self.client, "model", "") or ""),
                "message": f"{type(exc).__name__}: {exc}",
                "fatal": False,
            }
            return self._failed(request, exc, info, started)
        latency = getattr(completion, "latency_s", None)
        return Proposal(
            text=str(getattr(completion, "text", "") or ""),
            model=str(getattr(completion, "model", "") or getattr(self.client, "model", "") or ""),
            usage=_usage_dict(getattr(completion, "usage", None)),
            latency_s=float(latency) if latency is not None else time.perf_counter() - started,
            reasoning=getattr(completion, "reasoning", None),
            meta={"iteration": getattr(request, "iteration", None)},
        )

    def _failed(self, request: Any, exc: BaseException, info: dict[str, Any], started: float) -> Proposal:
        return Proposal(
            text="",
            model=str(getattr(exc, "model", "") or getattr(self.client, "model", "") or ""),
            latency_s=time.perf_counter() - started,
            error=f"{type(exc).__name__}: {exc}",
            error_info=info,
            meta={"iteration": getattr(request, "iteration", None)},
        )

    async def aclose(self) -> None:
        close = getattr(self.client, "aclose", None) or getattr(self.client, "close", None)
        if close is not None:
            result = close()
            if hasattr(result, "__await__"):
                await result

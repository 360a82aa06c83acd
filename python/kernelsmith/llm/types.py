"""Common types of the LLM clients: a completion, its token usage, the client
protocol and the errors a caller must tell apart (budget reached vs. failure)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Protocol, runtime_checkable

# Defaults of the unified protocol (the paper's evolution setting).
DEFAULT_TEMPERATURE = 0.6
DEFAULT_TOP_P = 0.95
DEFAULT_MAX_TOKENS = 32_768


@dataclass
class Usage:
    """Tokens of one request (or a sum of requests).

    ``reasoning_tokens`` is the part of ``completion_tokens`` the server reports
    as hidden reasoning; None when the server does not say.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: Optional[int] = None
    total_tokens: int = 0

    def __post_init__(self) -> None:
        if not self.total_tokens:
            self.total_tokens = self.prompt_tokens + self.completion_tokens

    @property
    def total(self) -> int:
        return self.total_tokens

    def __add__(self, other: "Usage") -> "Usage":
        reasoning: Optional[int]
        if self.reasoning_tokens is None and other.reasoning_tokens is None:
            reasoning = None
        else:
            reasoning = (self.reasoning_tokens or 0) + (other.reasoning_tokens or 0)
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            reasoning,
            self.total_tokens + other.total_tokens,
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Usage":
        return cls(
            **{
                k: data[k]
                for k in ("prompt_tokens", "completion_tokens", "reasoning_tokens", "total_tokens")
                if k in data
            }
        )


@dataclass
class Completion:
    """One answer of a model.

    ``text`` is the visible answer with any ``<think>`` block removed;
    ``reasoning`` the model's thinking text when the server returned it (None
    otherwise). ``model`` is the spec of the model that answered
    ("openai:NAME" / "anthropic:NAME"), so an ensemble's choice is recorded.
    ``latency_s`` is the wall time of the whole call, retries and backoff
    included; ``attempts`` counts HTTP requests sent (1 = no retry).
    """

    text: str
    reasoning: Optional[str] = None
    model: str = ""
    usage: Usage = field(default_factory=Usage)
    latency_s: float = 0.0
    finish_reason: Optional[str] = None
    attempts: int = 1
    cost_usd: Optional[float] = None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["usage"] = self.usage.to_dict()
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Completion":
        kwargs = dict(data)
        kwargs["usage"] = Usage.from_dict(kwargs.get("usage") or {})
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in kwargs.items() if k in known})


@runtime_checkable
class LLMClient(Protocol):
    """What the proposer needs from any model client (or an ensemble)."""

    model: str

    async def complete(self, messages: list[dict[str, Any]], *, pick_key: Any = None, **params: Any) -> Completion:
        """Answer chat ``messages`` ([{"role", "content"}, ...]).

        ``params``: temperature, top_p, max_tokens, timeout (seconds) and
        provider-specific extras; unset ones take the client's defaults.
        ``pick_key`` (e.g. the iteration) makes an ensemble's model choice
        depend only on (seed, key); single clients ignore it.
        """
        ...

    async def aclose(self) -> None: ...


#: How a request failed. auth: 401/403 (key missing, wrong or revoked);
#: quota: 402 or a quota/billing refusal (429 "insufficient_quota", Anthropic's
#: "credit balance is too low"); not-found: 404 (no such model or endpoint);
#: bad-request: another 4xx the server will refuse again; rate-limit, server,
#: timeout, connection, malformed: transient, retried with backoff first.
FAILURE_KINDS = (
    "auth",
    "quota",
    "not-found",
    "bad-request",
    "rate-limit",
    "server",
    "timeout",
    "connection",
    "malformed",
    "other",
)
FATAL_KINDS = ("auth", "quota", "not-found")


class LLMError(RuntimeError):
    """A request failed for good (after retries, or not retryable).

    ``attempts`` is how many HTTP requests were sent; ``status`` the last HTTP
    status (None for connection errors and timeouts). The message never holds
    an API key (it is passed through :func:`redact`).
    """

    def __init__(
        self,
        message: str,
        *,
        model: str = "",
        attempts: int = 0,
        status: Optional[int] = None,
        retryable: bool = False,
        kind: str = "other",
        provider_message: str = "",
    ) -> None:
        super().__init__(message)
        self.model = model
        self.attempts = attempts
        self.status = status
        self.retryable = retryable
        #: one of FAILURE_KINDS; "auth" and "quota" (see FATAL_KINDS) will
        #: fail every later request too, so a run stops at once on them
        self.kind = kind
        #: what the provider said, without our prefix
        self.provider_message = provider_message

    @property
    def fatal(self) -> bool:
        return self.kind in FATAL_KINDS

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "status": self.status,
            "model": self.model,
            "attempts": self.attempts,
            "message": str(self),
            "provider_message": self.provider_message,
            "fatal": self.fatal,
        }


class LLMTimeoutError(LLMError):
    """Every attempt ran past the per-request timeout."""


class BudgetExceeded(RuntimeError):
    """The run's token or money budget is spent; raised *before* sending a
    request, so the loop can checkpoint and stop cleanly."""

    def __init__(self, message: str, *, spent_tokens: int = 0, spent_usd: float = 0.0) -> None:
        super().__init__(message)
        self.spent_tokens = spent_tokens
        self.spent_usd = spent_usd

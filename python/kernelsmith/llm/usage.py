"""Token accounting per request and per run, prices, and the budget cap.

One :class:`UsageMeter` is shared by every client of a run (an ensemble's
members too). Clients call :meth:`UsageMeter.check` before each HTTP request
and :meth:`UsageMeter.record` after each answer; the loop reads
:meth:`UsageMeter.summary` for the progress bar and the run summary, and saves
:meth:`UsageMeter.to_dict` in checkpoints so a resumed run keeps its spend.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from .types import BudgetExceeded, Usage


@dataclass
class Price:
    """Dollars per one million tokens. Reasoning tokens are billed as output
    (they are part of ``completion_tokens``)."""

    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0

    def cost(self, usage: Usage) -> float:
        return (usage.prompt_tokens * self.input_per_mtok + usage.completion_tokens * self.output_per_mtok) / 1e6


@dataclass
class Budget:
    """Stop sending requests once a run has spent this much. None = no cap."""

    max_tokens: Optional[int] = None  # prompt + completion tokens over the run
    max_usd: Optional[float] = None  # needs prices for the models used

    def __post_init__(self) -> None:
        if self.max_tokens is not None and self.max_tokens < 0:
            raise ValueError(f"budget.max_tokens must be >= 0, got {self.max_tokens}")
        if self.max_usd is not None and self.max_usd < 0:
            raise ValueError(f"budget.max_usd must be >= 0, got {self.max_usd}")


@dataclass
class ModelTotals:
    requests: int = 0
    failed_requests: int = 0  # calls that ended in an error (after retries)
    attempts: int = 0  # HTTP requests sent, retries included
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0


class UsageMeter:
    """Run-wide token and money totals per model, with an optional budget.

    Thread-safe. The budget is checked before a request is sent, so requests
    already in flight when the cap is crossed still finish and are counted:
    the overshoot is at most the concurrency limit times one answer.
    """

    def __init__(
        self, prices: Optional[Mapping[str, Price | Mapping[str, float]]] = None, budget: Optional[Budget] = None
    ) -> None:
        self._lock = threading.Lock()
        self.prices: dict[str, Price] = {}
        for model, price in (prices or {}).items():
            self.set_price(model, price)
        self.budget = budget or Budget()
        self.per_model: dict[str, ModelTotals] = {}

    def set_price(self, model: str, price: Price | Mapping[str, float]) -> None:
        if not isinstance(price, Price):
            price = Price(**price)
        self.prices[model] = price

    def price_for(self, model: str) -> Optional[Price]:
        """Price by full spec ("openai:gpt-x") or by bare model name ("gpt-x")."""
        if model in self.prices:
            return self.prices[model]
        bare = model.split(":", 1)[1] if ":" in model else model
        return self.prices.get(bare)

    def cost(self, model: str, usage: Usage) -> Optional[float]:
        price = self.price_for(model)
        return None if price is None else price.cost(usage)

    # -- spend ----------------------------------------------------------------
    @property
    def total_tokens(self) -> int:
        with self._lock:
            return sum(t.total_tokens for t in self.per_model.values())

    @property
    def total_usd(self) -> float:
        with self._lock:
            return sum(t.cost_usd for t in self.per_model.values())

    @property
    def requests(self) -> int:
        with self._lock:
            return sum(t.requests for t in self.per_model.values())

    def exhausted_reason(self) -> Optional[str]:
        """Why the budget is spent, or None while there is budget left."""
        b = self.budget
        tokens, usd = self.total_tokens, self.total_usd
        if b.max_tokens is not None and tokens >= b.max_tokens:
            return f"token budget spent: {tokens} of {b.max_tokens} tokens used"
        if b.max_usd is not None and usd >= b.max_usd:
            return f"money budget spent: ${usd:.4f} of ${b.max_usd:.4f} used"
        return None

    def check(self, model: str = "") -> None:
        """Raise :class:`BudgetExceeded` if no further request may be sent.

        A money budget for a model without a price cannot be enforced; that
        is refused here rather than silently letting the run spend.
        """
        b = self.budget
        if b.max_usd is not None and model and self.price_for(model) is None:
            raise BudgetExceeded(
                f"a money budget (max_usd={b.max_usd}) is set but model '{model}' has no price; "
                "add it under prices or use a token budget",
                spent_tokens=self.total_tokens,
                spent_usd=self.total_usd,
            )
        reason = self.exhausted_reason()
        if reason is not None:
            raise BudgetExceeded(reason, spent_tokens=self.total_tokens, spent_usd=self.total_usd)

    def record(self, model: str, usage: Usage, *, attempts: int = 1, latency_s: float = 0.0) -> Optional[float]:
        """Add one answered request; return its cost in $ (None without a price)."""
        cost = self.cost(model, usage)
        with self._lock:
            t = self.per_model.setdefault(model, ModelTotals())
            t.requests += 1
            t.attempts += attempts
            t.prompt_tokens += usage.prompt_tokens
            t.completion_tokens += usage.completion_tokens
            t.reasoning_tokens += usage.reasoning_tokens or 0
            t.total_tokens += usage.total_tokens
            t.cost_usd += cost or 0.0
            t.latency_s += latency_s
        return cost

    def record_failure(self, model: str, *, attempts: int) -> None:
        with self._lock:
            t = self.per_model.setdefault(model, ModelTotals())
            t.failed_requests += 1
            t.attempts += attempts

    # -- reporting and checkpoints -------------------------------------------
    def summary(self) -> dict[str, Any]:
        with self._lock:
            per_model = {m: dataclasses.asdict(t) for m, t in self.per_model.items()}
        return {
            "requests": sum(t["requests"] for t in per_model.values()),
            "prompt_tokens": sum(t["prompt_tokens"] for t in per_model.values()),
            "completion_tokens": sum(t["completion_tokens"] for t in per_model.values()),
            "reasoning_tokens": sum(t["reasoning_tokens"] for t in per_model.values()),
            "total_tokens": sum(t["total_tokens"] for t in per_model.values()),
            "cost_usd": sum(t["cost_usd"] for t in per_model.values()),
            "per_model": per_model,
        }

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                "per_model": {m: dataclasses.asdict(t) for m, t in self.per_model.items()},
                "prices": {m: dataclasses.asdict(p) for m, p in self.prices.items()},
                "budget": dataclasses.asdict(self.budget),
            }

    def load_totals(self, data: Mapping[str, Any]) -> None:
        """Restore the spend of a checkpoint (prices and budget stay as configured)."""
        with self._lock:
            self.per_model = {m: ModelTotals(**t) for m, t in (data.get("per_model") or {}).items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "UsageMeter":
        meter = cls(prices=data.get("prices") or {}, budget=Budget(**(data.get("budget") or {})))
        meter.load_totals(data)
        return meter

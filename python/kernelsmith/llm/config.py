"""LLM configuration (YAML section ``llm``) and the client factories."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Union

from ..config import ConfigError, from_dict
from .anthropic_client import AnthropicClient
from .base import BaseClient, RetryPolicy, SamplingDefaults
from .ensemble import EnsembleClient
from .openai_client import OpenAIClient
from .types import DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE, DEFAULT_TOP_P, LLMClient
from .usage import Budget, Price, UsageMeter

PROVIDERS = {"openai": OpenAIClient, "anthropic": AnthropicClient}


def parse_spec(spec: str) -> tuple[str, str]:
    """ "openai:NAME" -> ("openai", "NAME"). NAME may itself hold colons
    (e.g. "openai:qwen3:32b" for an Ollama-style name)."""
    provider, sep, name = spec.partition(":")
    if not sep or not name or provider not in PROVIDERS:
        raise ValueError(
            f"model spec {spec!r}: expected 'PROVIDER:NAME' with PROVIDER one of "
            f"{', '.join(sorted(PROVIDERS))} (e.g. 'openai:gpt-4.1', 'anthropic:claude-sonnet-4-5')"
        )
    return provider, name


@dataclass
class ModelConfig:
    """One model of the run. Keys are never written in config files: name the
    environment variable that holds the key instead (``api_key_env``)."""

    spec: str = ""  # "openai:NAME" or "anthropic:NAME"
    weight: float = 1.0  # share of requests in an ensemble
    base_url: Optional[str] = None  # default: OPENAI_BASE_URL / OPENAI_API_BASE / ANTHROPIC_BASE_URL
    api_key_env: Optional[str] = None  # default: OPENAI_API_KEY / ANTHROPIC_API_KEY
    temperature: Optional[float] = None  # None: LLMConfig.temperature
    top_p: Optional[float] = None  # None: LLMConfig.top_p (Anthropic: not sent)
    max_tokens: Optional[int] = None  # None: LLMConfig.max_tokens
    max_concurrency: Optional[int] = None  # None: LLMConfig.max_concurrency
    thinking_budget: Optional[int] = None  # Anthropic extended thinking, tokens
    stream: bool = True  # Anthropic: read the answer as a stream (long answers survive idle proxies)
    max_tokens_param: str = "max_tokens"  # OpenAI reasoning models: "max_completion_tokens"
    sampling: bool = True  # send temperature/top_p; false for models that refuse them
    extra: dict[str, Any] = field(default_factory=dict)  # extra request fields (top_k, reasoning_effort, ...)

    def __post_init__(self) -> None:
        parse_spec(self.spec)
        if self.weight < 0:
            raise ValueError(f"weight of {self.spec} must be >= 0, got {self.weight}")


@dataclass
class LLMConfig:
    """Models, sampling, retries, concurrency, prices and budget of a run."""

    models: list[ModelConfig] = field(default_factory=list)  # YAML: specs or mappings
    temperature: float = DEFAULT_TEMPERATURE
    top_p: Optional[float] = DEFAULT_TOP_P
    max_tokens: int = DEFAULT_MAX_TOKENS  # output cap per request
    timeout_s: float = 900.0  # per attempt
    max_concurrency: int = 8  # requests in flight per model
    seed: int = 0  # ensemble picks and backoff jitter
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    prices: dict[str, Price] = field(default_factory=dict)  # model spec or name -> $ per 1M tokens
    budget: Budget = field(default_factory=Budget)

    def __post_init__(self) -> None:
        models: list[ModelConfig] = []
        for i, m in enumerate(self.models or []):
            if isinstance(m, str):
                m = {"spec": m}
            if not isinstance(m, ModelConfig):
                m = from_dict(ModelConfig, m, f"llm.models[{i}]")
            models.append(m)
        self.models = models
        prices: dict[str, Price] = {}
        for name, p in (self.prices or {}).items():
            if not isinstance(p, Price):
                p = from_dict(Price, p, f"llm.prices.{name}")
            prices[name] = p
        self.prices = prices
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {self.max_concurrency}")

    @classmethod
    def from_dict(cls, data: Optional[Mapping[str, Any]]) -> "LLMConfig":
        return from_dict(cls, data, "llm")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def make_meter(self) -> UsageMeter:
        return UsageMeter(prices=self.prices, budget=self.budget)


def make_client(
    spec: str,
    *,
    base_url: Optional[str] = None,
    api_key: Optional[str] = None,
    api_key_env: Optional[str] = None,
    meter: Optional[UsageMeter] = None,
    temperature: Optional[float] = DEFAULT_TEMPERATURE,
    top_p: Optional[float] = DEFAULT_TOP_P,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    timeout_s: float = 900.0,
    max_concurrency: int = 8,
    retry: Optional[RetryPolicy] = None,
    extra: Optional[dict[str, Any]] = None,
    seed: Optional[int] = None,
    **provider_kwargs: Any,
) -> BaseClient:
    """A client for ``spec`` ("openai:NAME" / "anthropic:NAME").

    ``base_url`` / ``api_key`` override the environment; ``provider_kwargs``
    are provider options (OpenAI ``max_tokens_param``, Anthropic
    ``thinking_budget``). For Anthropic, ``top_p`` defaults to not sent.
    """
    provider, name = parse_spec(spec)
    if provider == "anthropic" and top_p == DEFAULT_TOP_P:
        top_p = None
    defaults = SamplingDefaults(
        temperature=temperature, top_p=top_p, max_tokens=max_tokens, timeout_s=timeout_s, extra=dict(extra or {})
    )
    return PROVIDERS[provider](
        name,
        api_key=api_key,
        base_url=base_url,
        api_key_env=api_key_env,
        defaults=defaults,
        retry=retry,
        max_concurrency=max_concurrency,
        meter=meter,
        rng=random.Random(seed) if seed is not None else None,
        **provider_kwargs,
    )


def build_client(config: LLMConfig, meter: Optional[UsageMeter] = None) -> Union[BaseClient, EnsembleClient]:
    """The run's client: one model, or an :class:`EnsembleClient` of several.

    Every client shares ``meter`` (default: ``config.make_meter()``), so the
    budget covers the whole run.
    """
    if not config.models:
        raise ConfigError("llm.models: no model configured (e.g. models: ['openai:gpt-4.1'])")
    meter = meter or config.make_meter()
    members: list[tuple[LLMClient, float]] = []
    for i, m in enumerate(config.models):
        provider, _ = parse_spec(m.spec)
        kwargs: dict[str, Any] = {}
        if provider == "openai":
            kwargs["max_tokens_param"] = m.max_tokens_param
        else:
            kwargs["thinking_budget"] = m.thinking_budget
            kwargs["stream"] = m.stream
        top_p = m.top_p if m.top_p is not None else (config.top_p if provider == "openai" else None)
        temperature = m.temperature if m.temperature is not None else config.temperature
        if not m.sampling:
            temperature = top_p = None
        client = make_client(
            m.spec,
            base_url=m.base_url,
            api_key_env=m.api_key_env,
            meter=meter,
            temperature=temperature,
            top_p=top_p,
            max_tokens=m.max_tokens if m.max_tokens is not None else config.max_tokens,
            timeout_s=config.timeout_s,
            max_concurrency=m.max_concurrency if m.max_concurrency is not None else config.max_concurrency,
            retry=config.retry,
            extra=m.extra,
            seed=config.seed * 1000 + i,
            **kwargs,
        )
        members.append((client, m.weight))
    if len(members) == 1:
        return members[0][0]  # type: ignore[return-value]
    return EnsembleClient(members, seed=config.seed, meter=meter)

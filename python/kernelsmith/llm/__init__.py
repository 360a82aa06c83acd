"""LLM clients: OpenAI-compatible and Anthropic models, ensembles, retries,
token accounting, budgets and key redaction.

Typical use::

    from kernelsmith.llm import LLMConfig, build_client

    client = build_client(LLMConfig.from_dict({"models": ["openai:gpt-4.1"]}))
    completion = await client.complete([{"role": "user", "content": "..."}])
    completion.text, completion.reasoning, completion.usage, completion.model
"""

from __future__ import annotations

from .anthropic_client import AnthropicClient
from .base import BaseClient, RetryPolicy, SamplingDefaults, parse_retry_after
from .config import LLMConfig, ModelConfig, build_client, make_client, parse_spec
from .ensemble import EnsembleClient
from .openai_client import OpenAIClient
from .redact import RedactingFilter, SECRET_ENV_VARS, mask_key, redact, redact_obj, register_secret, scrub_env
from .thinking import split_thinking
from .types import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_TEMPERATURE,
    DEFAULT_TOP_P,
    BudgetExceeded,
    Completion,
    LLMClient,
    LLMError,
    LLMTimeoutError,
    Usage,
)
from .usage import Budget, ModelTotals, Price, UsageMeter

__all__ = [
    "AnthropicClient",
    "BaseClient",
    "Budget",
    "BudgetExceeded",
    "Completion",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_TEMPERATURE",
    "DEFAULT_TOP_P",
    "EnsembleClient",
    "LLMClient",
    "LLMConfig",
    "LLMError",
    "LLMTimeoutError",
    "ModelConfig",
    "ModelTotals",
    "OpenAIClient",
    "Price",
    "RedactingFilter",
    "RetryPolicy",
    "SECRET_ENV_VARS",
    "SamplingDefaults",
    "Usage",
    "UsageMeter",
    "build_client",
    "make_client",
    "mask_key",
    "parse_retry_after",
    "parse_spec",
    "redact",
    "redact_obj",
    "register_secret",
    "scrub_env",
    "split_thinking",
]

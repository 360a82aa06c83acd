"""OpenAI-compatible chat completions (OpenAI, vLLM, SGLang, LMDeploy, ...)."""

from __future__ import annotations

import json
import os
from typing import Any, Optional

from .base import BaseClient, import_sdk, usage_from
from .thinking import join_reasoning, split_thinking
from .types import Completion

# Local servers (vLLM, SGLang) accept any key but the SDK wants one.
PLACEHOLDER_KEY = "EMPTY"


def openai_env(
    base_url: Optional[str] = None, api_key: Optional[str] = None, api_key_env: Optional[str] = None
) -> tuple[Optional[str], Optional[str]]:
    """Resolve (base_url, api_key): arguments first, then OPENAI_BASE_URL (or
    its older name OPENAI_API_BASE) and OPENAI_API_KEY (or ``api_key_env``)."""
    base_url = base_url or os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_BASE") or None
    if api_key is None:
        api_key = os.environ.get(api_key_env or "OPENAI_API_KEY") or None
    return base_url, api_key


class MalformedResponse(ValueError):
    """The server answered 200 but not with a usable chat completion."""


class OpenAIClient(BaseClient):
    """Chat completions through ``openai.AsyncOpenAI``.

    ``max_tokens_param`` names the output cap field: "max_tokens" (what
    open-source servers expect) or "max_completion_tokens" (OpenAI's reasoning
    models). Extra request fields (top_k, seed, reasoning_effort,
    chat_template_kwargs, ...) go into the JSON body unchanged.
    """

    sdk_module = "openai"
    malformed_error = MalformedResponse

    provider = "openai"

    def __init__(
        self,
        name: str,
        *,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        api_key_env: Optional[str] = None,
        max_tokens_param: str = "max_tokens",
        **kwargs: Any,
    ) -> None:
        base_url, api_key = openai_env(base_url, api_key, api_key_env)
        if api_key is None:
            if base_url is None:
                raise ValueError(
                    f"openai:{name}: no API key: set {api_key_env or 'OPENAI_API_KEY'} "
                    "(or OPENAI_BASE_URL for a local server that needs none)"
                )
            api_key = PLACEHOLDER_KEY
        if max_tokens_param not in ("max_tokens", "max_completion_tokens"):
            raise ValueError(
                f"max_tokens_param must be 'max_tokens' or 'max_completion_tokens', got {max_tokens_param!r}"
            )
        self.max_tokens_param = max_tokens_param
        super().__init__(name, api_key=api_key, base_url=base_url, **kwargs)

    def _make_sdk(self) -> Any:
        openai = import_sdk("openai")

        # max_retries=0: our loop in BaseClient is the only retry layer.
        return openai.AsyncOpenAI(
            api_key=self._api_key, base_url=self.base_url, max_retries=0, timeout=self.defaults.timeout_s
        )

    async def _send(self, messages: list[dict[str, Any]], p: dict[str, Any]) -> Completion:
        kwargs: dict[str, Any] = {
            "model": self.name,
            "messages": messages,
            "timeout": p["timeout"],
            self.max_tokens_param: p["max_tokens"],
        }
        if p["temperature"] is not None:
            kwargs["temperature"] = p["temperature"]
        if p["top_p"] is not None:
            kwargs["top_p"] = p["top_p"]
        if p["extra"]:
            kwargs["extra_body"] = p["extra"]
        resp = await self._sdk.chat.completions.create(**kwargs)
        return parse_chat_completion(resp)


def _field(obj: Any, name: str) -> Any:
    """A response field, whether the SDK declares it or keeps it as an extra."""
    value = getattr(obj, name, None)
    if value is None:
        extra = getattr(obj, "model_extra", None) or {}
        value = extra.get(name)
    return value


def parse_chat_completion(resp: Any) -> Completion:
    if isinstance(resp, (str, bytes)) or not getattr(resp, "choices", None):
        raise MalformedResponse(f"no choices in response: {str(resp)[:200]!r}")
    choice = resp.choices[0]
    msg = choice.message
    # vLLM/SGLang/DeepSeek put thinking in reasoning_content; OpenRouter and
    # newer vLLM in reasoning.
    field_reasoning = _field(msg, "reasoning_content") or _field(msg, "reasoning")
    if field_reasoning is not None and not isinstance(field_reasoning, str):
        field_reasoning = (
            json.dumps(field_reasoning)
            if not hasattr(field_reasoning, "model_dump_json")
            else field_reasoning.model_dump_json()
        )
    text, tag_reasoning = split_thinking(msg.content or "")
    u = getattr(resp, "usage", None)
    details = getattr(u, "completion_tokens_details", None) if u is not None else None
    usage = usage_from(
        getattr(u, "prompt_tokens", 0),
        getattr(u, "completion_tokens", 0),
        getattr(details, "reasoning_tokens", None) if details is not None else None,
        getattr(u, "total_tokens", 0),
    )
    return Completion(
        text=text,
        reasoning=join_reasoning(field_reasoning, tag_reasoning),
        usage=usage,
        finish_reason=choice.finish_reason,
    )

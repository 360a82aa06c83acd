"""Anthropic messages API, thinking blocks included."""

from __future__ import annotations

import os
from typing import Any, Optional

from .base import BaseClient, import_sdk, usage_from
from .thinking import join_reasoning, split_thinking
from .types import Completion


def anthropic_env(
    base_url: Optional[str] = None, api_key: Optional[str] = None, api_key_env: Optional[str] = None
) -> tuple[Optional[str], Optional[str]]:
    base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
    if api_key is None:
        api_key = os.environ.get(api_key_env or "ANTHROPIC_API_KEY") or None
    return base_url, api_key


class MalformedMessage(ValueError):
    """The server answered 200 but not with a usable message."""


class AnthropicClient(BaseClient):
    """Messages through ``anthropic.AsyncAnthropic``.

    With ``stream`` (the default) the answer is read as server-sent events
    and assembled here. System messages are joined into the ``system`` parameter. With
    ``thinking_budget`` set, extended thinking is enabled with that many
    tokens; the API then requires the default temperature, so temperature is
    not sent, and top_p only when it is at least 0.95. Recent Claude models
    refuse temperature and top_p together, hence ``top_p`` defaults to None
    (not sent) for this provider.
    """

    sdk_module = "anthropic"
    malformed_error = MalformedMessage

    provider = "anthropic"

    def __init__(
        self,
        name: str,
        *,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        api_key_env: Optional[str] = None,
        thinking_budget: Optional[int] = None,
        stream: bool = True,
        **kwargs: Any,
    ) -> None:
        base_url, api_key = anthropic_env(base_url, api_key, api_key_env)
        if api_key is None:
            raise ValueError(f"anthropic:{name}: no API key: set {api_key_env or 'ANTHROPIC_API_KEY'}")
        if thinking_budget is not None and thinking_budget < 1024:
            raise ValueError(f"thinking_budget must be >= 1024 tokens (API minimum), got {thinking_budget}")
        self.thinking_budget = thinking_budget
        # Streaming keeps long (32K-token) answers alive through proxies that
        # drop idle connections, as Anthropic recommends for long requests.
        self.stream = stream
        super().__init__(name, api_key=api_key, base_url=base_url, **kwargs)

    def _make_sdk(self) -> Any:
        anthropic = import_sdk("anthropic")

        return anthropic.AsyncAnthropic(
            api_key=self._api_key, base_url=self.base_url, max_retries=0, timeout=self.defaults.timeout_s
        )

    async def _send(self, messages: list[dict[str, Any]], p: dict[str, Any]) -> Completion:
        system_parts = [m["content"] for m in messages if m.get("role") == "system"]
        chat = [{"role": m["role"], "content": m["content"]} for m in messages if m.get("role") != "system"]
        if not chat:
            raise ValueError("anthropic: at least one user message is needed besides the system prompt")
        kwargs: dict[str, Any] = {
            "model": self.name,
            "messages": chat,
            "max_tokens": p["max_tokens"],
            "timeout": p["timeout"],
        }
        if system_parts:
            kwargs["system"] = "\n\n".join(str(s) for s in system_parts)
        # Sampling and thinking fields go through extra_body: SDK releases
        # differ in which of them are typed keyword arguments, the wire
        # format is the same.
        body: dict[str, Any] = {}
        extra = dict(p["extra"])
        budget = extra.pop("thinking_budget", self.thinking_budget)
        if budget:
            budget = int(budget)
            if budget >= p["max_tokens"]:
                raise ValueError(f"thinking_budget ({budget}) must be below max_tokens ({p['max_tokens']})")
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
            if p["top_p"] is not None and p["top_p"] >= 0.95:
                body["top_p"] = p["top_p"]
        else:
            if p["temperature"] is not None:
                body["temperature"] = p["temperature"]
            if p["top_p"] is not None:
                body["top_p"] = p["top_p"]
        body.update(extra)
        if body:
            kwargs["extra_body"] = body
        if not self.stream:
            return parse_message(await self._sdk.messages.create(**kwargs))
        events = await self._sdk.messages.create(stream=True, **kwargs)
        try:
            return collect_stream([event async for event in events])
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                await close()


def parse_message(resp: Any) -> Completion:
    content = getattr(resp, "content", None)
    if isinstance(resp, (str, bytes)) or content is None:
        raise MalformedMessage(f"no content in response: {str(resp)[:200]!r}")
    texts: list[str] = []
    thoughts: list[str] = []
    for block in content:
        kind = getattr(block, "type", None)
        if kind == "text":
            texts.append(block.text)
        elif kind == "thinking":
            thoughts.append(getattr(block, "thinking", "") or "")
        # redacted_thinking holds only encrypted data: nothing to record.
    text, tag_reasoning = split_thinking("".join(texts))
    u = getattr(resp, "usage", None)
    prompt = 0
    if u is not None:
        # Cached prompt tokens are reported apart from input_tokens.
        prompt = sum(
            int(getattr(u, f, 0) or 0)
            for f in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        )
    usage = usage_from(prompt, getattr(u, "output_tokens", 0) if u is not None else 0)
    return Completion(
        text=text,
        reasoning=join_reasoning("\n\n".join(t for t in thoughts if t) or None, tag_reasoning),
        usage=usage,
        finish_reason=getattr(resp, "stop_reason", None),
    )


def collect_stream(events: list[Any]) -> Completion:
    """Assemble a streamed message (message_start, content_block_*,
    message_delta, message_stop events) into a Completion."""
    blocks: dict[int, dict[str, Any]] = {}
    prompt = output = 0
    stop_reason: Optional[str] = None
    started = False
    for ev in events:
        kind = getattr(ev, "type", None)
        if kind == "message_start":
            started = True
            u = getattr(ev.message, "usage", None)
            if u is not None:
                prompt = sum(
                    int(getattr(u, f, 0) or 0)
                    for f in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
                )
                output = int(getattr(u, "output_tokens", 0) or 0)
        elif kind == "content_block_start":
            block = ev.content_block
            blocks[ev.index] = {
                "type": getattr(block, "type", None),
                "text": getattr(block, "text", None) or getattr(block, "thinking", None) or "",
            }
        elif kind == "content_block_delta":
            b = blocks.setdefault(ev.index, {"type": None, "text": ""})
            delta = ev.delta
            dtype = getattr(delta, "type", None)
            if dtype == "text_delta":
                b["text"] += delta.text
            elif dtype == "thinking_delta":
                b["text"] += delta.thinking
        elif kind == "message_delta":
            stop_reason = getattr(ev.delta, "stop_reason", None) or stop_reason
            u = getattr(ev, "usage", None)
            if u is not None:
                # output_tokens here is cumulative; newer servers repeat input counts too.
                output = max(output, int(getattr(u, "output_tokens", 0) or 0))
                prompt = max(prompt, int(getattr(u, "input_tokens", 0) or 0))
    if not started:
        raise MalformedMessage("stream ended without a message_start event")
    ordered = [blocks[i] for i in sorted(blocks)]
    text, tag_reasoning = split_thinking("".join(b["text"] for b in ordered if b["type"] == "text"))
    thoughts = "\n\n".join(b["text"] for b in ordered if b["type"] == "thinking" and b["text"]) or None
    return Completion(
        text=text,
        reasoning=join_reasoning(thoughts, tag_reasoning),
        usage=usage_from(prompt, output),
        finish_reason=stop_reason,
    )

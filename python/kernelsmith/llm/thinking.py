"""Separate a thinking model's reasoning from its visible answer."""

from __future__ import annotations

import re
from typing import Optional

_THINK_BLOCK = re.compile(r"<think(?:ing)?>(.*?)</think(?:ing)?>", re.DOTALL | re.IGNORECASE)
_OPEN = re.compile(r"<think(?:ing)?>", re.IGNORECASE)
_CLOSE = re.compile(r"</think(?:ing)?>", re.IGNORECASE)


def split_thinking(content: Optional[str]) -> tuple[str, Optional[str]]:
    """Return ``(answer, reasoning)`` from raw message content.

    Handles what servers do in practice: complete ``<think>...</think>``
    blocks anywhere; a close tag with no open tag (the chat template put
    ``<think>`` in the prompt, as DeepSeek-R1 and Qwen3 templates do, so the
    reasoning is everything before ``</think>``); and an unterminated leading
    ``<think>`` (the answer was cut off by max_tokens while thinking: all of
    it is reasoning, the answer is empty).
    """
    if not content:
        return content or "", None
    parts: list[str] = []

    def take(match: "re.Match[str]") -> str:
        parts.append(match.group(1).strip())
        return ""

    text = _THINK_BLOCK.sub(take, content)
    close = _CLOSE.search(text)
    if close is not None and not _OPEN.search(text[: close.start()]):
        parts.insert(0, text[: close.start()].strip())
        text = text[close.end() :]
    stripped = text.lstrip()
    opened = _OPEN.match(stripped)
    if opened is not None:
        parts.append(stripped[opened.end() :].strip())
        text = ""
    if not parts:
        return content, None
    reasoning = "\n\n".join(p for p in parts if p)
    return text.strip(), (reasoning or None)


def join_reasoning(*pieces: Optional[str]) -> Optional[str]:
    kept = [p for p in pieces if p]
    return "\n\n".join(kept) if kept else None

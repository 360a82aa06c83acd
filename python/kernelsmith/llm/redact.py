"""Keep API keys out of everything kernelsmith writes.

Clients register the key values they use (:func:`register_secret`);
:func:`redact` masks those values and common key shapes in any text, so the
loop can pass prompts, responses, errors and log lines through it before they
reach the trajectory or a log. :func:`scrub_env` removes key variables from an
environment before a worker process (which runs candidate code) starts.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Iterable, Mapping, MutableMapping, Optional

MASK = "***"

# Environment variables that hold credentials of the providers we talk to.
SECRET_ENV_VARS = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "AZURE_OPENAI_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "TOGETHER_API_KEY",
    "DEEPSEEK_API_KEY",
    "OPENROUTER_API_KEY",
    "MISTRAL_API_KEY",
    "GROQ_API_KEY",
)

# Shapes of keys that leak even when we never saw the value: OpenAI/Anthropic
# style "sk-..." keys, Hugging Face tokens, AWS access key ids, bearer headers
# and "api_key=..." assignments.
_PATTERNS = [
    re.compile(r"\bsk-[A-Za-z0-9_\-]{12,}"),
    re.compile(r"\bhf_[A-Za-z0-9]{20,}"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9_\-\.=]{12,}"),
    re.compile(r"(?i)(\b(?:x-)?api[_\-]?key[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]{8,}"),
]

_lock = threading.Lock()
_secrets: set[str] = set()

# Shorter values are too likely to be ordinary words ("EMPTY", "none").
_MIN_SECRET_LEN = 8


def register_secret(value: Optional[str]) -> None:
    """Remember ``value`` so that :func:`redact` masks it everywhere."""
    if value and len(value) >= _MIN_SECRET_LEN:
        with _lock:
            _secrets.add(value)


def registered_secret_count() -> int:
    with _lock:
        return len(_secrets)


def mask_key(value: Optional[str]) -> str:
    """How a key appears in repr(): never the value, only whether it is set."""
    if not value:
        return "None"
    return f"'{MASK}'"


def redact(text: str, extra_secrets: Iterable[str] = ()) -> str:
    """``text`` with every registered secret, every ``extra_secrets`` value and
    every known key shape replaced by ``***``."""
    if not text:
        return text
    with _lock:
        values = sorted(_secrets.union(s for s in extra_secrets if s and len(s) >= 4), key=len, reverse=True)
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    for pattern in _PATTERNS:
        if pattern.groups:
            text = pattern.sub(lambda m: m.group(1) + MASK, text)
        else:
            text = pattern.sub(MASK, text)
    return text


def redact_obj(obj):  # type: ignore[no-untyped-def]
    """:func:`redact` applied to every string inside nested dicts/lists."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, Mapping):
        return {k: redact_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact_obj(v) for v in obj)
    return obj


def scrub_env(env: MutableMapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` without provider credentials or anything else that
    looks like one: ``kernelsmith.evaluator.sandbox.scrub_env``, the one
    scrubber (kept importable from here)."""
    # lazy: cycle llm.redact -> evaluator -> evaluator.sandbox -> llm.redact
    from ..evaluator.sandbox import scrub_env as _scrub

    return _scrub(dict(env))


class RedactingFilter(logging.Filter):
    """A logging filter that redacts the formatted message of each record.

    Attach it to a handler (``handler.addFilter(RedactingFilter())``) to make
    sure no key reaches that handler's output, whoever logged it.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg = cleaned
            record.args = None
        return True

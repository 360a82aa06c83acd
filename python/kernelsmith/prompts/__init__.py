"""Evolution prompts: templates, the builder and the feedback renderer."""

from __future__ import annotations

from .builder import (
    TEMPLATE_NAMES,
    Prompt,
    PromptBuilder,
    PromptConfig,
    estimate_tokens,
    hardware_family,
    load_template,
)
from .feedback import format_metrics, render_feedback, trim_log

__all__ = [
    "TEMPLATE_NAMES",
    "Prompt",
    "PromptBuilder",
    "PromptConfig",
    "estimate_tokens",
    "format_metrics",
    "hardware_family",
    "load_template",
    "render_feedback",
    "trim_log",
]

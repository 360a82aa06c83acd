"""Feedback rendering for prompts: re-exported from :mod:`kernelsmith.feedback`,
where the one renderer and the :class:`Feedback` seam live."""

from __future__ import annotations

from ..feedback import Feedback, clip, format_metrics, render_feedback, trim_log

__all__ = ["Feedback", "clip", "format_metrics", "render_feedback", "trim_log"]

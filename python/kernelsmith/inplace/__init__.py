"""In-place tasks: evolve a kernel where it lives, in a project's own source
tree, checked by the project's own tests, delivered as a patch.
See docs/in_place.md."""

from __future__ import annotations

from pathlib import Path

from .config import CONFIG_NAME, InplaceConfig, InplaceError, is_inplace, load_config, save_config
from .evaluate import InplaceEvaluator, run_tests
from .outputs import finish_run, render_summary, write_task_copy
from .patch import make_patch
from .source import insert_markers, strip_markers
from .task import InplaceTask, load_inplace

#: prompt templates of in-place tasks (system.md, user.md); the others are kernelsmith's defaults
TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"

__all__ = [
    "CONFIG_NAME",
    "InplaceConfig",
    "InplaceError",
    "InplaceEvaluator",
    "InplaceTask",
    "TEMPLATE_DIR",
    "finish_run",
    "insert_markers",
    "is_inplace",
    "load_config",
    "load_inplace",
    "make_patch",
    "render_summary",
    "run_tests",
    "save_config",
    "strip_markers",
    "write_task_copy",
]

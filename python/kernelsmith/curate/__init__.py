"""Curation: from a tree of repositories to deduplicated, runnable
KernelBench-format tasks grouped into families (``kernelsmith curate``)."""

from __future__ import annotations

from .extract import Extracted, extract_file, normalized_ast_hash, normalized_text
from .families import difficulty
from .inputs import SIZE_CLASSES, SIZES, ConfigSpec, GuessError, InputVariant, guess_inputs
from .pipeline import CurateConfig, Report, curate, read_index, size_class_of, write_index
from .resolve import PackageIndex, module_name_of
from .runner import RunnerConfig, run_checks

__all__ = [
    "SIZES",
    "SIZE_CLASSES",
    "ConfigSpec",
    "CurateConfig",
    "Extracted",
    "GuessError",
    "InputVariant",
    "PackageIndex",
    "Report",
    "RunnerConfig",
    "curate",
    "difficulty",
    "extract_file",
    "guess_inputs",
    "module_name_of",
    "normalized_ast_hash",
    "normalized_text",
    "read_index",
    "run_checks",
    "size_class_of",
    "write_index",
]

"""Curation: from a tree of repositories to deduplicated, runnable
KernelBench-format tasks grouped into families (``kernelsmith curate``)."""
from __future__ import annotations

from .extract import Extracted, extract_file, normalized_ast_hash, normalized_text
from .families import difficulty
from .inputs import GuessError, InputVariant, guess_inputs
from .pipeline import CurateConfig, Report, curate, read_index, write_index
from .runner import RunnerConfig, run_checks

__all__ = ["CurateConfig", "Extracted", "GuessError", "InputVariant", "Report", "RunnerConfig", "curate",
           "difficulty", "extract_file", "guess_inputs", "normalized_ast_hash", "normalized_text", "read_index",
           "run_checks", "write_index"]

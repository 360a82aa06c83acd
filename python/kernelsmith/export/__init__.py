"""Run directories -> training data: SFT samples and RL prompts (verl rows).

See docs/training_data.md. Entry points: :func:`export_sft`,
:func:`export_rl` (also ``kernelsmith export sft|rl``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Sequence

from .formats import RL_FORMATS, SFT_FORMATS, read_jsonl
from .rl import STRATEGIES, RLConfig, rl_schema, select_rl, write_rl
from .sft import ExportSummary, Sample, SFTConfig, classify_sft, select_sft, write_sft
from .steps import DifficultyMap, Run, Step, TaskInfo, load_run, load_runs

__all__ = [
    "DifficultyMap",
    "ExportSummary",
    "RLConfig",
    "RL_FORMATS",
    "Run",
    "SFTConfig",
    "SFT_FORMATS",
    "STRATEGIES",
    "Sample",
    "Step",
    "TaskInfo",
    "classify_sft",
    "export_rl",
    "export_sft",
    "load_run",
    "load_runs",
    "read_jsonl",
    "rl_schema",
    "select_rl",
    "select_sft",
    "write_rl",
    "write_sft",
]


def _write_summary(summary: ExportSummary, out: Path) -> None:
    path = out / "summary.json"
    summary.files.append(str(path))
    path.write_text(json.dumps(summary.to_dict(), indent=2) + "\n")


def export_sft(
    run_dirs: Sequence[str | Path],
    out: str | Path,
    fmt: str = "messages",
    config: SFTConfig | None = None,
    difficulty_maps: Iterable[str | Path] = (),
    **write_options: object,
) -> ExportSummary:
    """Select SFT samples from run directories and write them under ``out``."""
    config = config or SFTConfig()
    out = Path(out)
    runs = load_runs(run_dirs, DifficultyMap.load(difficulty_maps))
    samples, summary = select_sft(runs, config)
    summary.config["format"] = fmt
    summary.files = [str(p) for p in write_sft(samples, out, fmt, config, **write_options)]  # type: ignore[arg-type]
    _write_summary(summary, out)
    return summary


def export_rl(
    run_dirs: Sequence[str | Path],
    out: str | Path,
    fmt: str = "parquet",
    config: RLConfig | None = None,
    difficulty_maps: Iterable[str | Path] = (),
) -> ExportSummary:
    """Select RL prompts from run directories and write verl rows under ``out``."""
    config = config or RLConfig()
    out = Path(out)
    runs = load_runs(run_dirs, DifficultyMap.load(difficulty_maps))
    splits, summary = select_rl(runs, config)
    summary.config["format"] = fmt
    summary.files = [str(p) for p in write_rl(splits, out, fmt)]
    _write_summary(summary, out)
    return summary

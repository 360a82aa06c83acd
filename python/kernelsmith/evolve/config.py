"""Configuration of an evolution run, in sections:

    iterations: 40            # the unified protocol's defaults
    model: mutate             # mutate | replay:RUN_DIR | openai:NAME | anthropic:NAME | llm
    llm: {...}                # kernelsmith.llm.LLMConfig: models/weights (model: llm), sampling
                              #   (temperature 0.6, top-p 0.95, 32K output cap), retries, prices, budget
    prompt: {...}             # kernelsmith.prompts.PromptConfig: output format, 32K input cap, ...
    engine: {...}             # kernelsmith.engine.EngineConfig: islands, features, selection, and
                              #   stopping (target_score: a speedup to stop at; patience: steps without
                              #   a new best)

Load with :func:`load_evolve_config`; unknown keys are rejected by name.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..config import ConfigError, from_dict


@dataclass
class EvolveConfig:
    #: proposal steps to run (children asked for), not counting the seed
    iterations: int = 40
    #: seed of the engine and of every proposer's random choices
    seed: int = 0
    #: "mutate" (offline autotuner), "replay:RUN_DIR", "openai:NAME",
    #: "anthropic:NAME", or "llm" to use the models listed in llm.models
    model: str = "mutate"
    #: backend override; None takes the task's backend
    backend: Optional[str] = None
    #: steps in flight at once (proposals being generated or evaluated)
    proposal_concurrency: int = 4
    #: candidates evaluated at once (each in its own worker process); None:
    #: one per local GPU (every GPU is used), one on a CPU-only host
    eval_concurrency: Optional[int] = None
    #: write an engine checkpoint every this many steps (and always on stop)
    checkpoint_every: int = 5
    #: at the end of a run, this many of the fastest correct programs are
    #: re-timed head to head in one worker; the winner is the run's best
    #: (0: keep the best per-step speedup, unconfirmed)
    finalists: int = 4
    #: correctness trials per candidate; None keeps the task's setting
    trials: Optional[int] = None
    #: "diff" (SEARCH/REPLACE), "full" (whole program) or "auto" (accept either)
    edit_mode: str = "auto"
    #: stop the run after this many LLM requests in a row failed (each after
    #: its retries); authentication and quota errors stop it at the first
    max_llm_failures: int = 5
    #: sections (see the module docstring)
    llm: dict[str, Any] = field(default_factory=dict)
    prompt: dict[str, Any] = field(default_factory=dict)
    engine: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.iterations < 0:
            raise ConfigError(f"iterations must be >= 0, got {self.iterations}")
        if self.edit_mode not in ("diff", "full", "auto"):
            raise ConfigError(f"edit_mode must be one of diff, full, auto; got '{self.edit_mode}'")
        for key in ("proposal_concurrency", "eval_concurrency", "checkpoint_every", "max_llm_failures"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                raise ConfigError(f"{key} must be >= 1, got {getattr(self, key)}")
        kind = self.model.split(":", 1)[0]
        if kind not in ("mutate", "replay", "openai", "anthropic", "llm"):
            raise ConfigError(
                f"model must be mutate, replay:RUN_DIR, openai:NAME, anthropic:NAME or llm; got '{self.model}'"
            )
        # Validate the sections now, so a typo fails before any work starts.
        self.llm_config()
        self.prompt_config()
        self.engine_config()

    def llm_config(self) -> Any:
        from ..llm import LLMConfig

        data = dict(self.llm)
        if self.model.split(":", 1)[0] in ("openai", "anthropic"):
            data["models"] = [self.model]
        return LLMConfig.from_dict(data)

    def engine_config(self) -> Any:
        from ..engine import EngineConfig

        return from_dict(EngineConfig, self.engine, "engine")

    def prompt_config(self) -> Any:
        from ..prompts import PromptConfig

        return from_dict(PromptConfig, self.prompt, "prompt")


def load_evolve_config(path: str | Path | None = None, **overrides: Any) -> EvolveConfig:
    """Defaults, then the YAML file, then explicit overrides (command-line
    flags; None means not given), each validated."""
    data: dict[str, Any] = {}
    if path:
        import yaml

        file = Path(path)
        if not file.is_file():
            what = "is a directory" if file.is_dir() else "does not exist"
            raise ConfigError(f"config file {path} {what}; pass a YAML file to --config (see docs/evolve.md)")
        try:
            loaded = yaml.safe_load(file.read_text()) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {' '.join(str(exc).split())}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {path}: expected a mapping of keys at the top level, "
                              f"got {type(loaded).__name__}")
        data.update(loaded)
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return from_dict(EvolveConfig, data)
    except ConfigError as exc:
        # Name the file too when the bad key or value may have come from it.
        raise ConfigError(f"config file {path}: {exc}" if path else str(exc)) from None

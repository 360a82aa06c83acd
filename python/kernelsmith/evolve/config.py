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
from ..llm import LLMConfig
from ..engine import EngineConfig
from ..prompts import PromptConfig


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
    finalists: int = 5
    #: correctness trials per candidate; None keeps the task's setting
    trials: Optional[int] = None
    #: integrity policy ("strict" | "partial") and the partial policy's
    #: minimum coverage (docs/evaluator.md, "Integrity v2"); None keeps the task's
    policy: Optional[str] = None
    min_coverage: Optional[float] = None
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
        data = dict(self.llm)
        if self.model.split(":", 1)[0] in ("openai", "anthropic"):
            data["models"] = [self.model]
        return LLMConfig.from_dict(data)

    def engine_config(self) -> Any:
        return from_dict(EngineConfig, self.engine, "engine")

    def prompt_config(self) -> Any:
        return from_dict(PromptConfig, self.prompt, "prompt")


#: OpenEvolve's config keys that mean the same here: top level -> (section, key)
OPENEVOLVE_ALIASES: dict[str, tuple[Optional[str], str]] = {
    "max_iterations": (None, "iterations"),
    "random_seed": (None, "seed"),
    "checkpoint_interval": (None, "checkpoint_every"),
    "early_stopping_patience": ("engine", "patience"),
}
#: OpenEvolve's sections whose keys are named alike here, under another section
OPENEVOLVE_SECTIONS = {"database": "engine"}
#: OpenEvolve's prompt keys that mean the same in kernelsmith's prompt section
OPENEVOLVE_PROMPT_KEYS = {"num_top_programs": "max_top_programs", "num_diverse_programs": "max_inspirations"}
#: OpenEvolve keys with no equivalent key: what to write instead (one line each)
OPENEVOLVE_REFUSED = {
    "diff_based_evolution": "write 'edit_mode: diff' (or full, or auto: accept either)",
    "allow_full_rewrites": "write 'edit_mode: full' (or diff, or auto: accept either)",
    "max_code_length": "drop it: the prompt's size is capped by 'prompt: {max_input_tokens: N}'",
    "language": "drop it: the kernel language is the task's backend ('backend:' in task.yaml, or --backend)",
    "log_level": "drop it: use --quiet/--json; everything is recorded in the run directory",
    "log_dir": "drop it: logs and records go to the run directory (--out RUN_DIR)",
    "evaluator": "drop the section: correctness trials are 'trials: N', time limits are the task's 'timeout_s'",
    "convergence_threshold": "write 'engine: {target_score: SPEEDUP}' to stop at a speedup",
    "early_stopping_metric": "drop it: runs are ranked by speedup over the reference",
    "system_message": "write your own templates and point 'prompt: {template_dir: DIR}' at them",
}


def _openevolve_key(key: str, source: str) -> None:
    if key in OPENEVOLVE_REFUSED:
        raise ConfigError(
            f"{source}: '{key}' is an OpenEvolve key kernelsmith does not take; {OPENEVOLVE_REFUSED[key]}"
        )


def translate_openevolve(data: dict[str, Any], source: str = "config") -> dict[str, Any]:
    """An OpenEvolve config's common keys under kernelsmith's names; a key
    with no equivalent stops with one line saying what to write instead."""
    import logging

    log = logging.getLogger("kernelsmith.evolve")
    out: dict[str, Any] = {}
    for key, value in data.items():
        _openevolve_key(key, source)
        if key in OPENEVOLVE_SECTIONS and isinstance(value, dict):
            section = OPENEVOLVE_SECTIONS[key]
            log.info("%s: OpenEvolve section '%s' read as '%s'", source, key, section)
            out.setdefault(section, {}).update(value)
        elif key in OPENEVOLVE_ALIASES:
            section, name = OPENEVOLVE_ALIASES[key]
            log.info("%s: OpenEvolve key '%s' read as '%s'", source, key, f"{section}.{name}" if section else name)
            (out.setdefault(section, {}) if section else out)[name] = value
        elif key == "prompt" and isinstance(value, dict):
            prompt = {}
            for pkey, pvalue in value.items():
                _openevolve_key(pkey, f"{source}: prompt")
                prompt[OPENEVOLVE_PROMPT_KEYS.get(pkey, pkey)] = pvalue
            out.setdefault("prompt", {}).update(prompt)
        elif key == "llm" and isinstance(value, dict) and ("api_base" in value or "primary_model" in value):
            raise ConfigError(
                f"{source}: 'llm.api_base'/'llm.primary_model' are OpenEvolve keys; write "
                "'llm: {models: [{spec: openai:NAME, base_url: URL, weight: W}]}'"
            )
        else:
            out[key] = value
    return out


def load_evolve_config(path: str | Path | None = None, **overrides: Any) -> EvolveConfig:
    """Defaults, then the YAML file, then explicit overrides (command-line
    flags; None means not given), each validated. OpenEvolve's common keys
    are read under their kernelsmith names (:func:`translate_openevolve`)."""
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
            raise ConfigError(
                f"config file {path}: expected a mapping of keys at the top level, got {type(loaded).__name__}"
            )
        data.update(translate_openevolve(loaded, str(path)))
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return from_dict(EvolveConfig, data)
    except ConfigError as exc:
        # Name the file too when the bad key or value may have come from it.
        raise ConfigError(f"config file {path}: {exc}" if path else str(exc)) from None

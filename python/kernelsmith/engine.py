"""The evolution engine: MAP-Elites islands, steady-state ask/tell, checkpoints.

The engine itself is C++ (``kernelsmith._core``); this module holds the
records it exchanges with Python (:class:`Program`, :class:`Request`,
:class:`TellResult`), the :class:`EngineConfig` dataclass (loadable from
YAML through :mod:`kernelsmith.config`; the C++ side is the validator) and the
:class:`Engine` wrapper. See docs/engine.md.

Typical loop::

    eng = Engine(EngineConfig(num_islands=4), seed=0)
    eng.add_seed(Program(source=seed_src, metrics={"score": 1.0}, status="correct"))
    while not eng.should_stop():
        req = eng.ask()
        child_src = propose(req.parent, req.inspirations)
        if eng.seen(child_src):
            eng.cancel(req.id)
            continue
        result = evaluate(child_src)
        eng.tell(Program(source=child_src, metrics=result.metrics, status=result.status,
                         feedback=result.feedback), request_id=req.id)
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Union

from . import _core
from .config import ConfigError, from_dict, load_yaml

STATUSES = ("pending", "edit-failed", "compile-failed", "incorrect", "hacked", "correct")
FAILED_STATUSES = ("edit-failed", "compile-failed", "incorrect", "hacked")
MODES = ("explore", "exploit", "weighted", "repair")


@dataclass
class Program:
    """One candidate program and its evaluation.

    ``metrics["score"]`` is the fitness (higher is better). Only ``status ==
    "correct"`` programs compete for archive cells; failed ones are kept on a
    bounded per-island list and come back as repair requests.
    """

    source: str = ""
    id: int = -1  # assigned by the engine on tell/add_seed when -1
    parent_id: int = -1  # -1: no parent (a seed)
    island: int = -1  # -1: the request's island (tell) or every island (add_seed)
    iteration: int = 0  # ask counter of the request that produced it
    metrics: dict[str, float] = field(default_factory=dict)
    status: str = "pending"  # one of STATUSES; tell() refuses "pending"
    feedback: dict[str, Any] = field(default_factory=dict)  # evaluator output (errors, timings)
    features: list[int] = field(default_factory=list)  # grid coordinates, set by the archive
    created: float = 0.0  # unix seconds; set by the engine when 0
    migrated_from: int = -1  # id of the program this is a migrant copy of
    migrated: bool = False  # a copy of it was sent to another island

    @property
    def score(self) -> Optional[float]:
        return self.metrics.get("score")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Program":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"Program.from_dict: unknown keys {sorted(unknown)}; allowed: {sorted(names)}")
        return cls(**data)


@dataclass
class Request:
    """Work handed out by :meth:`Engine.ask`: improve (or, in ``repair`` mode,
    fix) ``parent`` using ``inspirations``; tell the child with ``request_id=id``."""

    id: int
    island: int
    parent: Program
    inspirations: list[Program]
    mode: str  # one of MODES
    iteration: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Request":
        d = dict(data)
        d["parent"] = Program.from_dict(d["parent"])
        d["inspirations"] = [Program.from_dict(p) for p in d["inspirations"]]
        return cls(**d)


@dataclass
class TellResult:
    id: int  # the id given to the told program
    inserted: bool  # entered the island population (correct and not a duplicate)
    owns_cell: bool  # took or kept an archive cell
    new_best: bool  # became the best program of the run


@dataclass
class EngineConfig:
    """Engine options (C++ validates them; unknown keys are rejected by name)."""

    num_islands: int = 4
    # Grid axes: "complexity" (code structure), "score", or names listed in `metrics`.
    feature_dimensions: list[str] = field(default_factory=lambda: ["complexity", "score"])
    # Bins per axis: one int for all, or {dimension: bins}.
    feature_bins: Union[int, dict[str, int]] = 10
    # Fixed [lo, hi] per axis; axes not listed adapt to the observed min/max.
    feature_ranges: dict[str, list[float]] = field(default_factory=dict)
    # Extra metric names that may be used as feature dimensions.
    metrics: list[str] = field(default_factory=list)
    population_size: int = 1000  # per island; eviction spares cell owners and elites
    elite_size: int = 10  # top programs per island, never evicted
    num_inspirations: int = 4  # island best, elites, neighbouring cells, then random
    inspiration_elites: int = 1
    inspiration_neighbours: int = 2
    # Parent selection (normalized to sum 1): uniform random cell /
    # rank-based power law / fitness-proportional over cell owners.
    exploration_ratio: float = 0.2
    exploitation_ratio: float = 0.7
    weighted_ratio: float = 0.1
    power_law_alpha: float = 1.0  # P(rank r) ~ (r+1)^-alpha
    repair_ratio: float = 0.1  # share of asks that hand back a recent failure
    recent_failures: int = 16  # failures kept per island for repair
    migration_interval: int = 50  # tells between migrations; 0 disables
    migration_rate: float = 0.1  # sends the best ceil(rate * occupied cells) programs of each island
    migration_topology: str = "ring"  # ring | all
    island_selection: str = "round_robin"  # round_robin | least_loaded
    max_iterations: int = 0  # tells before stopping; 0: no limit
    target_score: Optional[float] = None  # stop when the best score reaches it
    patience: int = 0  # tells without improvement before stopping; 0: no limit
    keep_checkpoints: int = 3  # checkpoint files kept per directory

    def __post_init__(self) -> None:
        # Fail at construction (and so at YAML load), naming the bad key.
        self.validate()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "EngineConfig":
        return from_dict(cls, data)

    @classmethod
    def from_yaml(cls, path: Union[str, Path], section: Optional[str] = None) -> "EngineConfig":
        return load_yaml(cls, path, section)

    def validate(self) -> "EngineConfig":
        """Raise ValueError (naming the key) if C++ rejects this config."""
        _core.validate_engine_config(self.to_json())
        return self


_core._register_engine_records(Program, Request)


def _config_json(config: Union[EngineConfig, Mapping[str, Any], None]) -> str:
    if config is None:
        return "{}"
    if isinstance(config, EngineConfig):
        return config.to_json()
    if isinstance(config, Mapping):
        # Unknown keys are reported by the C++ validator with the allowed list.
        return json.dumps(dict(config))
    raise TypeError(f"config must be an EngineConfig or a dict, got {type(config).__name__}")


class Engine:
    """Thread-safe steady-state evolution engine (see module docstring)."""

    def __init__(
        self, config: Union[EngineConfig, Mapping[str, Any], None] = None, seed: int = 0, *, _impl: Any = None
    ) -> None:
        self._impl = _impl if _impl is not None else _core._Engine(_config_json(config), int(seed))

    # -- evolution -------------------------------------------------------
    def add_seed(self, program: Program) -> list[int]:
        """Add an initial program (island -1: a copy per island). Returns the ids."""
        return list(self._impl.add_seed(program))

    def add_initial(
        self,
        source: str,
        metrics: Mapping[str, float],
        status: str = "correct",
        island: int = -1,
        feedback: Optional[dict[str, Any]] = None,
    ) -> list[int]:
        return self.add_seed(
            Program(source=source, metrics=dict(metrics), status=status, island=island, feedback=dict(feedback or {}))
        )

    def ask(self) -> Request:
        return self._impl.ask()

    def tell(self, program: Program, request_id: int = -1) -> TellResult:
        """Insert an evaluated program; closes ``request_id`` when given."""
        return TellResult(*self._impl.tell(program, int(request_id)))

    def cancel(self, request_id: int) -> None:
        """Close a request without a result (e.g. its child was a duplicate)."""
        self._impl.cancel(int(request_id))

    def seen(self, source: str) -> bool:
        """True if this code (up to comments/whitespace) was seeded, told or marked before."""
        return self._impl.seen(source)

    def mark_seen(self, source: str) -> None:
        self._impl.mark_seen(source)

    def should_stop(self) -> Optional[str]:
        """ "max_iterations", "target_score", "patience", or None."""
        return self._impl.should_stop()

    # -- inspection ------------------------------------------------------
    def best(self) -> Optional[Program]:
        return self._impl.best()

    def program(self, program_id: int) -> Optional[Program]:
        return self._impl.program(int(program_id))

    def programs(self) -> list[Program]:
        """Every live program (populations, recent failures), by id."""
        return self._impl.programs()

    def elites(self, n: int = 10, island: int = -1) -> list[Program]:
        return self._impl.elites(int(island), int(n))

    def archive_cells(self, island: int) -> list[tuple[tuple[int, ...], Program]]:
        return self._impl.archive_cells(int(island))

    def next_program_id(self) -> int:
        """Id the next program told without one will get (see engine.hpp)."""
        return self._impl.next_program_id()

    def pending_requests(self) -> list[Request]:
        return self._impl.pending_requests()

    def stats(self) -> dict[str, Any]:
        return self._impl.stats()

    @property
    def config(self) -> EngineConfig:
        return EngineConfig.from_dict(json.loads(self._impl.config_json()))

    @property
    def seed(self) -> int:
        return self._impl.seed

    def state(self) -> dict[str, Any]:
        """The full checkpoint state as plain data."""
        return json.loads(self._impl.state_json())

    # -- persistence -----------------------------------------------------
    def save(self, directory: Union[str, Path]) -> Path:
        """Write a new checkpoint file atomically; returns its path."""
        return Path(self._impl.save(str(directory)))

    @classmethod
    def load(cls, path: Union[str, Path]) -> "Engine":
        """Load a checkpoint file, or a directory's newest checkpoint.

        Raises CorruptStateError for a truncated or altered file (the message
        names the previous checkpoint, which can be loaded by its path).
        """
        return cls(_impl=_core._Engine.load(str(path)))

    @staticmethod
    def list_checkpoints(directory: Union[str, Path]) -> list[Path]:
        return [Path(p) for p in _core._Engine.list_checkpoints(str(directory))]


normalize_source = _core.normalize_source
normalized_hash = _core.normalized_hash
complexity = _core.complexity
code_stats = _core.code_stats

__all__ = [
    "Engine",
    "EngineConfig",
    "Program",
    "Request",
    "TellResult",
    "ConfigError",
    "STATUSES",
    "FAILED_STATUSES",
    "MODES",
    "normalize_source",
    "normalized_hash",
    "complexity",
    "code_stats",
]

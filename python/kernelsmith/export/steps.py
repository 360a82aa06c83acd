"""Run directories read back as steps with their context.

A step record alone does not say everything export needs: whether its parent
was the PyTorch reference (a translation step) or a kernel (an optimization
step), the parent's source and runtime, the task it belongs to and the
task's difficulty. :func:`load_run` joins the records of one run directory
into :class:`Step` objects that carry all of that.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

import yaml

from ..result import EvalResult
from ..rewards.core import speedup_ratio
from ..trajectory import EvalStore, StepRecord, read_step_records
from ..task import Task, TaskConfig
from ..config import from_dict

UNKNOWN_DIFFICULTY = "unknown"


@dataclass
class TaskInfo:
    """The task of a run, as recorded in its directory."""

    id: str
    name: str
    path: str  # the run's own copy of reference.py (absolute)
    original_path: str  # where the run loaded it from
    reference_source: str
    backend: str
    config: dict[str, Any]  # TaskConfig fields (JSON-able), enough to rebuild the Task
    difficulty: str = UNKNOWN_DIFFICULTY

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "path": self.path,
            "original_path": self.original_path,
            "reference_source": self.reference_source,
            "backend": self.backend,
            "config_json": json.dumps(self.config, sort_keys=True),
            "difficulty": self.difficulty,
        }


@dataclass
class RecordedProgram:
    """A program told to the engine: a seed or a step's child."""

    id: int
    source: str
    status: str
    metrics: dict[str, Any]
    is_reference: bool = False  # the reference-as-seed of a run started without a kernel
    is_seed: bool = False
    parent_id: int = -1


@dataclass
class Step:
    """One proposal step with what export needs to judge it."""

    run_dir: str
    task: TaskInfo
    record: StepRecord
    parent: Optional[RecordedProgram]
    # the step's whole result, read through the record's key (the run's
    # evaluations.jsonl); None when not evaluated
    evaluation: Optional[EvalResult] = None

    # -- raw fields ---------------------------------------------------------
    @property
    def step(self) -> int:
        return int(self.record.step) if self.record.step is not None else -1

    @property
    def request_id(self) -> int:
        return int(self.record.request_id) if self.record.request_id is not None else -1

    @property
    def status(self) -> str:
        return str(self.record.status or "skipped")

    @property
    def prompt(self) -> list[dict[str, str]]:
        return [{"role": str(m["role"]), "content": str(m["content"])} for m in self.record.prompt or []]

    @property
    def response(self) -> Optional[str]:
        text = self.record.raw_response
        return text if isinstance(text, str) and text.strip() else None

    @property
    def reasoning(self) -> Optional[str]:
        text = self.record.reasoning
        return text if isinstance(text, str) and text.strip() else None

    @property
    def metrics(self) -> dict[str, Any]:
        return dict(self.record.metrics or {})

    # -- derived ------------------------------------------------------------
    @property
    def kind(self) -> str:
        """ "translation" when the parent is the PyTorch reference, else "optimization"."""
        return "translation" if self.parent is not None and self.parent.is_reference else "optimization"

    @property
    def parent_runtime_ms(self) -> Optional[float]:
        return _positive(self.record.parent_metrics.get("runtime_ms")) or (
            _positive(self.parent.metrics.get("runtime_ms")) if self.parent else None
        )

    @property
    def parent_speedup(self) -> Optional[float]:
        """Parent's speedup over the reference (the reference itself: 1)."""
        if self.parent is not None and self.parent.is_reference:
            return 1.0
        return _positive(self.record.parent_metrics.get("speedup")) or (
            _positive(self.parent.metrics.get("speedup")) if self.parent else None
        )

    @property
    def child_runtime_ms(self) -> Optional[float]:
        return _positive(self.metrics.get("runtime_ms"))

    @property
    def coverage(self) -> Optional[float]:
        """Share of the child's forward time in its own kernels (the
        evaluator's kernel census; None when not measured)."""
        value = self.evaluation.coverage if self.evaluation is not None else None
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    @property
    def speed_of_light(self) -> tuple[Optional[float], str]:
        """(fraction of the device's peak, bound) of the child's timing:
        the evaluator's speed of light; (None, "") where it was not counted
        or the bound is unknown."""
        sol = getattr(self.evaluation, "speed_of_light", None) if self.evaluation is not None else None
        if (
            isinstance(sol, dict)
            and isinstance(sol.get("fraction"), (int, float))
            and sol.get("bound") in ("memory", "compute")
        ):
            return float(sol["fraction"]), str(sol["bound"])
        return None, ""

    @property
    def child_speedup(self) -> Optional[float]:
        """Child's speedup over the reference (None unless correct and timed)."""
        return _positive(self.metrics.get("speedup")) if self.status == "correct" else None

    @property
    def speedup_over_parent(self) -> Optional[float]:
        """Parent runtime / child runtime; for a translation step the parent
        is the reference, so this is the speedup over the reference.

        Runtimes when both were measured, else the ratio of the two speedups
        over the reference (each measured next to the reference in its own
        evaluation). None when neither is known.
        """
        if self.status != "correct":
            return None
        if self.kind == "translation":
            return self.child_speedup
        return speedup_ratio(self.child_runtime_ms, self.child_speedup, self.parent_runtime_ms, self.parent_speedup)


@dataclass
class Run:
    path: str
    task: TaskInfo
    programs: dict[int, RecordedProgram] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    seeds: list[RecordedProgram] = field(default_factory=list)


def _positive(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if value > 0 and math.isfinite(value) else None


# ---------------------------------------------------------------- difficulty
class DifficultyMap:
    """Task -> difficulty category, looked up by task id, name or path.

    Sources, later ones winning: a ``difficulty`` key in the run's
    ``task/task.yaml`` or config snapshot, then the map files given (YAML or
    JSON mapping ``{key: difficulty}``, or a curation index as JSONL/parquet
    whose rows hold ``difficulty`` and any of ``task_id``, ``id``, ``name``,
    ``path``, ``file``).
    """

    KEYS = ("task_id", "id", "name", "task_name", "path", "file", "task_path")

    def __init__(self, entries: Mapping[str, str] | None = None) -> None:
        self.entries: dict[str, str] = {}
        for key, value in (entries or {}).items():
            self.add(key, value)

    def add(self, key: Any, difficulty: Any) -> None:
        if key is None or difficulty is None or str(difficulty) == "":
            return
        key = str(key)
        self.entries[key] = str(difficulty)
        # Paths match by their file or directory name too: runs and
        # indexes rarely agree on the root.
        stem = Path(key).name
        if stem and stem != key:
            self.entries.setdefault(stem, str(difficulty))
            if stem == "reference.py":
                self.entries.setdefault(Path(key).parent.name, str(difficulty))
            elif stem.endswith(".py"):
                self.entries.setdefault(stem[:-3], str(difficulty))

    @classmethod
    def load(cls, paths: Iterable[str | Path]) -> "DifficultyMap":
        out = cls()
        for path in paths:
            path = Path(path)
            if not path.exists():
                raise FileNotFoundError(f"--difficulty-map {path}: no such file")
            for row in _read_rows(path):
                out.add_row(row)
        return out

    def add_row(self, row: Mapping[str, Any]) -> None:
        difficulty = row.get("difficulty")
        for key in self.KEYS:
            if row.get(key):
                self.add(row[key], difficulty)

    def lookup(self, task: TaskInfo) -> Optional[str]:
        candidates = [
            task.id,
            task.name,
            task.original_path,
            Path(task.original_path).name,
            Path(task.original_path).stem,
            Path(task.original_path).parent.name,
        ]
        for key in candidates:
            if key and key in self.entries:
                return self.entries[key]
        return None


def _read_rows(path: Path) -> list[Mapping[str, Any]]:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    text = path.read_text()
    if suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    data = json.loads(text) if suffix == ".json" else yaml.safe_load(text)
    if isinstance(data, list):
        return data
    if isinstance(data, Mapping):
        return [{"name": key, "difficulty": value} for key, value in data.items()]
    raise ValueError(f"{path}: a difficulty map is a mapping {{task: difficulty}} or a list of index rows")


# ---------------------------------------------------------------- loading
def _task_info(run_path: Path, snapshot: dict[str, Any]) -> TaskInfo:
    task_meta = snapshot.get("task") or {}
    config = snapshot.get("config") or {}
    copy = run_path / "task"
    if not (copy / "reference.py").exists():
        original = Path(task_meta.get("path", ""))
        copy = copy / original.name if (copy / original.name).exists() else copy
    raw_yaml: dict[str, Any] = {}
    yaml_path = copy / "task.yaml"
    if copy.is_dir() and yaml_path.exists():
        raw_yaml = yaml.safe_load(yaml_path.read_text()) or {}
    # A difficulty written into task.yaml is read here and kept out of the
    # Task (whose config rejects keys it does not know).
    difficulty = raw_yaml.pop("difficulty", None) or task_meta.get("difficulty")
    overrides = {k: config.get(k) for k in ("backend", "trials") if config.get(k) is not None}
    if difficulty is not None and "difficulty" in (yaml.safe_load(yaml_path.read_text()) or {}):
        cfg = from_dict(TaskConfig, {**raw_yaml, **overrides})
        cfg.name = cfg.name or copy.name
        task = Task(
            reference_source=(copy / "reference.py").read_text(),
            config=cfg,
            seed_source=None,
            path=str(copy / "reference.py"),
        )
    else:
        task = Task.load(copy, **overrides)
    task_dict = task.to_dict()
    return TaskInfo(
        id=str(task_meta.get("id") or task.id),
        name=str(task_meta.get("name") or task.name),
        path=str(Path(task.path or copy).resolve()),
        original_path=str(task_meta.get("path", "")),
        reference_source=task.reference_source,
        backend=task.config.backend,
        config=task_dict["config"],
        difficulty=str(difficulty) if difficulty else UNKNOWN_DIFFICULTY,
    )


def load_run(path: str | Path, difficulty: DifficultyMap | None = None) -> Run:
    """Read one run directory (``config.yaml``, ``task/``, ``trajectory.jsonl``)."""
    run_path = Path(path)
    if not (run_path / "config.yaml").exists():
        raise FileNotFoundError(f"{run_path}: not a run directory (no config.yaml)")
    snapshot = yaml.safe_load((run_path / "config.yaml").read_text()) or {}
    task = _task_info(run_path, snapshot)
    if difficulty is not None:
        task.difficulty = difficulty.lookup(task) or task.difficulty
    run = Run(path=str(run_path.resolve()), task=task)
    records = read_step_records(run_path)
    evaluations = EvalStore.load(run_path)
    for record in records:
        if record.kind == "seed":
            ids = record.program_ids
            for pid in ids:
                program = RecordedProgram(
                    id=pid,
                    source=record.child_source or "",
                    status=str(record.status),
                    metrics=dict(record.metrics or {}),
                    is_reference=record.is_reference,
                    is_seed=True,
                )
                run.programs[pid] = program
            if ids:
                run.seeds.append(run.programs[ids[0]])
    for record in records:
        if record.kind != "step":
            continue
        parent_id = int(record.parent_id) if record.parent_id is not None else -1
        parent = run.programs.get(parent_id)
        run.steps.append(
            Step(run_dir=run.path, task=task, record=record, parent=parent, evaluation=evaluations.of(record))
        )
        child = record.child
        if record.child_id is not None and child is not None:
            run.programs[int(record.child_id)] = RecordedProgram(
                id=int(record.child_id),
                source=child.source,
                status=str(record.status),
                metrics=dict(record.metrics or {}),
                parent_id=parent_id,
            )
    run.steps.sort(key=lambda s: s.step)
    return run


def load_runs(paths: Iterable[str | Path], difficulty: DifficultyMap | None = None) -> list[Run]:
    runs = [load_run(p, difficulty) for p in paths]
    if not runs:
        raise ValueError("no run directories given")
    return runs

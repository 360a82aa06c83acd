"""The run directory: everything a run leaves behind, written so that a crash
at any instant loses nothing that was finished.

Layout::

    RUN_DIR/
      config.yaml        snapshot of the run config, with the task's path and id
      task/              copy of the task files, so the run stands on its own
      checkpoint/        step-NNNNNN/{engine/, run_state.json}: the engine's checkpoint and the
                         loop counters belonging to it (each written atomically), and LATEST
      trajectory.jsonl   one record per step, appended and fsynced per record
      evaluations.jsonl  each evaluation's whole result the moment it ends, stored
                         only here: records keep its key (reused on resume)
      proposals.jsonl    prompt and answer of each open request (reused on resume)
      best_program.py    the best correct program so far
      summary.json       written when the run stops (any reason)
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import yaml

from ..llm.redact import redact_obj
from ..trajectory import EvalStore, StepRecord, evaluation_row_key

log = logging.getLogger("kernelsmith.evolve")

#: schema version of the evaluation and proposal logs' records (a trajectory
#: record carries its own: StepRecord.schema_version)
TRAJECTORY_SCHEMA_VERSION = 1
#: what a run writes into its directory; a run that never reached its first
#: checkpoint is replaced by removing exactly these, nothing else
RUN_FILES = (
    "config.yaml",
    "task",
    "checkpoint",
    "trajectory.jsonl",
    "evaluations.jsonl",
    "proposals.jsonl",
    "best_program.py",
    "summary.json",
)


class RunDirError(ValueError):
    """A run directory cannot be used as asked (not a run, already a run,
    no readable checkpoint); the message says which and what to do."""


class RunExistsError(RunDirError, FileExistsError):
    """``--out`` names a directory that already holds a started run."""


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so readers see the old or the new file, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class RunDir:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._eval_keys: set[str] | None = None  # keys in evaluations.jsonl, read when first needed

    # -- files ------------------------------------------------------------
    @property
    def trajectory_path(self) -> Path:
        return self.path / "trajectory.jsonl"

    @property
    def evaluations_path(self) -> Path:
        return self.path / "evaluations.jsonl"

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / "checkpoint"

    def exists(self) -> bool:
        return (self.path / "config.yaml").exists()

    def started(self) -> bool:
        """Whether the run reached its first checkpoint (before that, it has
        nothing worth keeping: at most the seed's evaluation)."""
        root = self.checkpoint_dir
        return root.is_dir() and any(p.is_dir() and p.name.startswith("step-") for p in root.iterdir())

    # -- creation ---------------------------------------------------------
    def create(self, config: dict[str, Any], task_files: list[Path]) -> None:
        """Write a new run. ``config.yaml`` comes last: it marks a run, so a
        start killed half-way leaves a folder a new run may take over."""
        if self.exists():
            if self.started():
                raise RunExistsError(
                    f"{self.path} already holds a run; continue it with --resume {self.path}, or choose another --out"
                )
            log.warning("%s: replacing a run that stopped before its first checkpoint", self.path)
            self.remove_run_files()
        if self.path.exists() and not self.path.is_dir():
            raise RunDirError(f"--out {self.path} is a file, not a directory; choose another --out")
        self.path.mkdir(parents=True, exist_ok=True)
        task_dir = self.path / "task"
        shutil.rmtree(task_dir, ignore_errors=True)
        task_dir.mkdir()
        for file in task_files:
            shutil.copy2(file, task_dir / file.name)
        self.trajectory_path.write_text("")
        self.write_config(config)

    def remove_run_files(self) -> None:
        """Remove what a run wrote (only that: the folder may hold the user's
        own files); the folder itself goes when nothing else is left."""
        for name in RUN_FILES:
            target = self.path / name
            if target.is_dir():
                shutil.rmtree(target, ignore_errors=True)
            else:
                target.unlink(missing_ok=True)
        try:
            self.path.rmdir()
        except OSError:
            pass

    def write_config(self, config: dict[str, Any]) -> None:
        atomic_write_text(self.path / "config.yaml", yaml.safe_dump(redact_obj(config), sort_keys=False))

    def load_config(self) -> dict[str, Any]:
        return yaml.safe_load((self.path / "config.yaml").read_text())

    # -- trajectory -------------------------------------------------------
    def append_step(self, record: StepRecord) -> None:
        """Append one step durably: a record is either wholly on disk or absent."""
        _append_record(self.trajectory_path, record.to_dict())

    def read_steps(self) -> list[StepRecord]:
        """The trajectory's records (a last line cut off by a crash is removed)."""
        return [StepRecord.from_dict(r) for r in iter_trajectory(self.trajectory_path, repair=True)]

    def append_evaluation(self, sha256: str, evaluation: dict[str, Any]) -> str:
        """Log an evaluation (``EvalResult.to_dict()`` of the source whose
        sha256 is given) the moment it ends, before its step is applied
        (steps are applied in ask order, so a finished evaluation may wait):
        a run killed meanwhile reuses it on resume instead of running it
        again. The only copy of the whole result: records keep the key
        returned, the sha256, or ``SHA256-N`` for the Nth evaluation of one
        source in this run (the RL environment may evaluate a program again)."""
        if self._eval_keys is None:
            self._eval_keys = {k for k in map(evaluation_row_key, self.read_evaluations()) if k is not None}
        key, n = sha256, 1
        while key in self._eval_keys:
            n += 1
            key = f"{sha256}-{n}"
        row: dict[str, Any] = {"sha256": sha256}
        if key != sha256:
            row["key"] = key
        row["eval"] = evaluation
        _append_record(self.evaluations_path, row)
        self._eval_keys.add(key)
        return key

    def read_evaluations(self) -> list[dict[str, Any]]:
        return list(iter_trajectory(self.evaluations_path, repair=True))

    def evaluations(self) -> EvalStore:
        """The run's evaluations by key (what the records' ``eval_key`` names)."""
        return EvalStore(self.read_evaluations())

    @property
    def proposals_path(self) -> Path:
        return self.path / "proposals.jsonl"

    def append_proposal(self, record: dict[str, Any]) -> None:
        """Log a step's prompt and answer the moment the answer arrives (see
        :meth:`append_evaluation` for why a finished part may wait)."""
        _append_record(self.proposals_path, record)

    def read_proposals(self) -> list[dict[str, Any]]:
        return list(iter_trajectory(self.proposals_path, repair=True))

    def keep_proposals(self, request_ids: set[int]) -> None:
        """Rewrite the proposal log with the entries of ``request_ids`` only."""
        kept = [r for r in self.read_proposals() if int(r["request_id"]) in request_ids]
        text = "".join(json.dumps(r, default=_json_default) + "\n" for r in kept)
        atomic_write_text(self.proposals_path, text)

    def write_best(self, source: str) -> None:
        atomic_write_text(self.path / "best_program.py", source)

    def write_summary(self, summary: dict[str, Any]) -> None:
        atomic_write_text(self.path / "summary.json", json.dumps(summary, indent=2, default=_json_default))


def _append_record(path: Path, record: dict[str, Any]) -> None:
    # Keys never reach the run directory, whatever a server or model echoed.
    record = redact_obj({"schema_version": TRAJECTORY_SCHEMA_VERSION, **record})
    line = json.dumps(record, default=_json_default) + "\n"
    with open(path, "a") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())


def iter_trajectory(path: str | Path, repair: bool = False) -> Iterator[dict[str, Any]]:
    """Records of a trajectory file. A last line cut off by a crash is dropped
    (and, with ``repair``, removed from the file so appends stay valid)."""
    path = Path(path)
    if not path.exists():
        return
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if repair and end < len(data):
        with open(path, "r+b") as handle:
            handle.truncate(end)
    for number, line in enumerate(data[:end].splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: corrupt trajectory record: {exc}") from None


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")

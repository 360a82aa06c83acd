"""Episodes recorded as evolution steps.

Each task gets a run directory under the recorder's root, laid out like one
``kernelsmith evolve`` writes (``config.yaml``, ``task/``,
``trajectory.jsonl``): an episode's start program is a ``seed`` record (the
reference-as-seed is named "reference", as the loop names it), and each turn
is a ``step`` record with the loop's fields -- the prompt (the conversation
up to the turn), the raw answer, the edit, the key of the evaluation (whose
whole result is in the run's ``evaluations.jsonl``), the child program with
its status, metrics and compact feedback -- plus an ``episode`` field (episode id, turn,
reward and its terms; the returns on the last turn). ``kernelsmith export
sft|rl`` and :func:`kernelsmith.export.load_run` read these directories as
they read runs.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any, Optional

import yaml

from ..config import to_dict
from ..evolve.rundir import RunDir
from ..feedback import Feedback
from ..program_record import ProgramRecord, source_key
from ..trajectory import StepRecord
from .core import REFERENCE_NOTE, EnvConfig, Episode, Turn

__all__ = ["EpisodeRecorder"]


class _TaskRun:
    def __init__(self, run_dir: RunDir) -> None:
        self.run_dir = run_dir
        self.next_id = 0
        self.next_request = 0
        self.steps = 0
        self.seeds: dict[str, int] = {}  # sha256 of a start program -> its id


class EpisodeRecorder:
    """Writes episodes under ``root``, one run directory per task."""

    def __init__(self, root: str | Path, config: EnvConfig) -> None:
        self.root = Path(root)
        self.config = config
        self._runs: dict[str, _TaskRun] = {}
        self._lock = threading.Lock()

    def run_dir(self, task: Any) -> Path:
        """The run directory of ``task``'s episodes."""
        return self.root / f"{task.name}-{task.id[:8]}"

    def _task_run(self, task: Any) -> _TaskRun:
        run = self._runs.get(task.id)
        if run is not None:
            return run
        run_dir = RunDir(self.run_dir(task))
        if run_dir.exists():
            raise FileExistsError(f"{run_dir.path} already holds a run; record episodes into a new folder")
        snapshot = {
            "task": {"path": str(task.path or ""), "id": task.id, "name": task.name},
            "config": {
                "backend": task.config.backend,
                "trials": self.config.trials or task.config.trials,
                "edit_mode": self.config.edit_mode,
                "source": "kernelsmith.env",
                "environment": self.config.to_dict(),
            },
        }
        run_dir.path.mkdir(parents=True, exist_ok=True)
        staging = run_dir.path / ".task"
        staging.mkdir(exist_ok=True)
        (staging / "reference.py").write_text(task.reference_source)
        config = to_dict(task.config)
        (staging / "task.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        run_dir.create(snapshot, [staging / "reference.py", staging / "task.yaml"])
        for file in staging.iterdir():
            file.unlink()
        staging.rmdir()
        run = _TaskRun(run_dir)
        self._runs[task.id] = run
        return run

    def begin(self, episode: Episode) -> None:
        """Record the episode's start program (once per distinct program)."""
        start = episode.start
        source = start.program_source()
        key = source_key(source)
        with self._lock:
            run = self._task_run(episode.task)
            pid = run.seeds.get(key)
            if pid is None:
                pid = run.next_id
                run.next_id += 1
                run.seeds[key] = pid
                reference = start.from_reference
                record = StepRecord(
                    kind="seed",
                    step=run.steps,
                    name="reference" if reference else (start.name or "start"),
                    child_id=pid,
                    copy_ids=[pid],
                    child_source=source,
                    status="reference" if reference else "correct",
                    metrics={"score": 0.0} if reference else dict(start.metrics),
                    eval_key=None,
                    time=time.time(),
                )
                if reference:
                    record.child = ProgramRecord.unevaluated(
                        source, "correct", Feedback(note=REFERENCE_NOTE), parent_id=-1, island=0, iteration=0
                    )
                    record.child.id = pid
                run.run_dir.append_step(record)
                run.steps += 1
        episode.current_id = pid

    def turn(
        self,
        episode: Episode,
        turn: Turn,
        *,
        parent_id: Optional[int],
        parent_metrics: dict[str, Any],
        prompt: list[dict[str, str]],
        model: str,
    ) -> int:
        """Record one turn as a step; returns the child's program id. The
        turn's whole result goes to the run's evaluations.jsonl, the record
        and its child keep its key."""
        edit, result = turn.edit, turn.result
        if turn.program is None:
            raise ValueError("a turn is recorded with its program (KernelEnv._finish sets it)")
        with self._lock:
            run = self._task_run(episode.task)
            child_id = run.next_id
            run.next_id += 1
            request_id = run.next_request
            run.next_request += 1
            eval_key = (
                run.run_dir.append_evaluation(source_key(turn.source), result.to_dict()) if result is not None else None
            )
            child = dataclasses.replace(turn.program, eval_key=eval_key, id=child_id)
            status, metrics = child.status, child.metrics
            record = StepRecord(
                kind="step",
                request_id=request_id,
                iteration=turn.index + 1,
                island=0,
                mode=self.config.mode if turn.index == 0 else "repair" if status != "correct" else "exploit",
                parent_id=parent_id if parent_id is not None else -1,
                parent_metrics=parent_metrics,
                inspiration_ids=[],
                prompt=prompt,
                prompt_meta=episode.prompt_meta if turn.index == 0 else {"episode_turn": turn.index},
                raw_response=turn.response,
                reasoning=None,
                model=model,
                usage={},
                latency_s=None,
                edit=edit,
                child_source=turn.source if result is not None else None,
                eval_key=eval_key,
                child_id=child_id,
                status=status,
                metrics=metrics,
                step=run.steps,
                time=time.time(),
                child=child,
                episode={
                    "id": episode.id,
                    "turn": turn.index,
                    "reward": turn.reward,
                    "reward_status": turn.status,
                    "terms": {k: v for k, v in turn.info.items() if k != "edit_error"},
                    "done": episode.done,
                },
            )
            if episode.done:
                record.episode["returns"] = episode.returns(self.config.gamma)
            run.run_dir.append_step(record)
            run.steps += 1
        return child_id

    def run_dirs(self) -> list[Path]:
        with self._lock:
            return [run.run_dir.path for run in self._runs.values()]

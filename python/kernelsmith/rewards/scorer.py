"""Completion -> reward: apply the completion to the parent program, evaluate
the candidate in the evaluator's sandboxed workers, compare with the parent.

A scoring request ("item") is a plain dict, the same in process, over HTTP
and in the adapters::

    {"completion": "...",            # the model's response (think blocks are stripped)
     "parent_source": "...",         # the program the completion edits
     "task_id": "..." | "task": {...} | "task_path": "...",
     "parent_runtime_ms": 1.23,      # optional (0 or missing = unknown)
     "parent_speedup": 1.5,          # optional, parent's speedup over the reference
     "edit_mode": "auto",            # diff | full | auto
     "trials": 5}                    # optional correctness trials

``task`` is a Task dict (``Task.to_dict()``) or an exported task (RL rows'
``extra_info.task``, with ``config_json``). Candidate code never runs here:
only :func:`kernelsmith.edit.apply_response` (parsing) and the Evaluator's
workers touch it.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import threading
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from ..result import EvalResult
from ..task import Task
from .core import Reward, RewardConfig, compute_reward
from ..llm.thinking import split_thinking
from ..evaluator import Evaluator
from ..edit import apply_response


#: Building a Task parses its reference with ast.parse, which CPython 3.11
#: does not make safe to run in several threads at once: now and then one of
#: them fails with "SystemError: AST constructor recursion depth mismatch"
#: (python/cpython#106905; seen under a burst of 1000 requests to serve,
#: whose request threads build inline tasks). Tasks are built one at a time.
_BUILD_LOCK = threading.Lock()


class TaskRegistry:
    """Tasks by id: registered ones, and those given inline or by path.

    An inline task (a dict, as every OpenRLHF label carries) is built once
    per distinct content and reused: a burst of a thousand requests for one
    task parses its reference once, not a thousand times."""

    def __init__(self, allow_paths: bool = True) -> None:
        self.allow_paths = allow_paths
        self._tasks: dict[str, Task] = {}
        self._inline: dict[str, Task] = {}  # inline specs already built, by a hash of their content
        self._lock = threading.Lock()

    def register(self, task: Task | str | Path | Mapping[str, Any]) -> Task:
        if not isinstance(task, Task):
            with _BUILD_LOCK:
                task = task_from_spec(task)
        with self._lock:
            self._tasks[task.id] = task
        return task

    def register_run(self, run_dir: str | Path) -> Task:
        # lazy: cycle rewards.scorer -> export -> export.steps -> rewards -> rewards.scorer
        from ..export.steps import load_run

        info = load_run(run_dir).task
        return self.register(info.to_dict())

    def ids(self) -> list[str]:
        with self._lock:
            return sorted(self._tasks)

    def get(self, task_id: str) -> Task:
        with self._lock:
            task = self._tasks.get(task_id)
        if task is None:
            raise KeyError(f"unknown task_id '{task_id}'; registered: {', '.join(self.ids()) or 'none'}")
        return task

    def resolve(self, item: Mapping[str, Any]) -> Task:
        if item.get("task") is not None:
            spec = item["task"]
            if isinstance(spec, str):
                return self._from_path(spec)
            return self._inline_task(spec)
        if item.get("task_path"):
            return self._from_path(str(item["task_path"]))
        if item.get("task_id"):
            return self.get(str(item["task_id"]))
        raise ValueError("a scoring request needs 'task', 'task_id' or 'task_path'")

    def _inline_task(self, spec: Any) -> Task:
        if not isinstance(spec, Mapping):
            return self.register(spec)
        key = hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()
        with self._lock:
            task = self._inline.get(key)
        if task is None:
            with _BUILD_LOCK:
                with self._lock:
                    task = self._inline.get(key)  # built by another thread while this one waited
                if task is None:
                    task = task_from_spec(spec)
            with self._lock:
                self._inline[key] = task
        with self._lock:
            return self._tasks.setdefault(task.id, task)

    def _from_path(self, path: str) -> Task:
        if not self.allow_paths:
            raise PermissionError("task paths are not accepted here; register the task or send it inline")
        with _BUILD_LOCK:
            task = Task.load(path)
        return self.register(task)


def task_from_spec(spec: Task | str | Path | Mapping[str, Any]) -> Task:
    """A Task from a path, a ``Task.to_dict()`` or an exported task dict."""
    if isinstance(spec, Task):
        return spec
    if isinstance(spec, (str, Path)):
        return Task.load(spec)
    data = dict(spec)
    if "config_json" in data and "config" not in data:
        data["config"] = json.loads(data["config_json"] or "{}")
    if "reference_source" not in data:
        if data.get("path"):
            return Task.load(Path(data["path"]).parent if Path(data["path"]).name == "reference.py" else data["path"])
        raise ValueError("a task needs reference_source (and config) or a path")
    return Task.from_dict(
        {"reference_source": data["reference_source"], "config": data.get("config") or {}, "path": data.get("path")}
    )


def completion_text(completion: Any) -> str:
    """The text of a completion: a string, a chat message, or a list of
    messages (the last assistant message wins); reasoning is removed."""
    if isinstance(completion, Mapping):
        completion = completion.get("content", "")
    elif isinstance(completion, (list, tuple)):
        texts = [
            m.get("content", "")
            for m in completion
            if isinstance(m, Mapping) and m.get("role", "assistant") == "assistant"
        ]
        completion = texts[-1] if texts else ""
    if not isinstance(completion, str):
        raise TypeError(f"completion must be text or chat messages, got {type(completion).__name__}")
    answer, _ = split_thinking(completion)
    return answer


class LocalScorer:
    """Scores completions with an in-process :class:`~kernelsmith.evaluator.Evaluator`
    (whose workers are sandboxed processes).

    ``remeasure_parent``: when a request gives neither the parent's runtime
    nor its speedup, evaluate the parent once (cached per task and source)
    and use its runtime.
    """

    def __init__(
        self,
        evaluator: Any = None,
        config: Optional[RewardConfig] = None,
        tasks: Optional[TaskRegistry] = None,
        remeasure_parent: bool = True,
        trials: Optional[int] = None,
    ) -> None:
        if evaluator is None:
            evaluator = Evaluator()
            self._own_evaluator = True
        else:
            self._own_evaluator = False
        self.evaluator = evaluator
        self.config = config or RewardConfig()
        self.tasks = tasks or TaskRegistry()
        self.remeasure_parent = remeasure_parent
        self.trials = trials
        self._parent_cache: dict[str, Optional[float]] = {}
        self._cache_lock = threading.Lock()

    # -- one request ------------------------------------------------------
    def prepare(self, item: Mapping[str, Any]) -> tuple[Task, Optional[str], Optional[str]]:
        """(task, candidate source or None, edit error or None) -- no evaluation."""
        task = self.tasks.resolve(item)
        if item.get("source") is not None:
            return task, str(item["source"]), None
        if item.get("parent_source") is None or item.get("completion") is None:
            raise ValueError("a scoring request needs 'source', or 'completion' and 'parent_source'")
        edit = apply_response(
            str(item["parent_source"]), completion_text(item["completion"]), mode=str(item.get("edit_mode") or "auto")
        )
        if not edit.ok:
            return task, None, edit.error or "the completion could not be applied to the parent"
        return task, edit.source, None

    def evaluate(self, item: Mapping[str, Any]) -> tuple[Optional[EvalResult], Optional[str]]:
        task, source, error = self.prepare(item)
        if source is None:
            return None, error
        return self.evaluator.evaluate(task, source, self._trials(item)), None

    def score(self, item: Mapping[str, Any], config: Optional[RewardConfig] = None) -> Reward:
        task, source, error = self.prepare(item)
        if source is None:
            return compute_reward(None, config=config or self.config, edit_error=error)
        result = self.evaluator.evaluate(task, source, self._trials(item))
        return self._reward(task, item, result, config)

    def score_many(self, items: Sequence[Mapping[str, Any]], config: Optional[RewardConfig] = None) -> list[Reward]:
        """Score a batch concurrently over the evaluator's worker pool
        (``Evaluator.evaluate_many``); results in input order. A request that
        is malformed gets the edit-failure penalty, not an exception."""
        config = config or self.config
        prepared: list[tuple[Optional[Task], Optional[str], Optional[str]]] = []
        for item in items:
            try:
                prepared.append(self.prepare(item))
            except (ValueError, KeyError, TypeError, PermissionError) as exc:
                prepared.append((None, None, f"bad request: {exc}"))
        # evaluate_many takes one trial count: one call per distinct count, run side by side.
        by_trials: dict[Optional[int], list[int]] = {}
        for index, (item, (_, source, _)) in enumerate(zip(items, prepared)):
            if source is not None:
                by_trials.setdefault(self._trials(item), []).append(index)
        results: dict[int, EvalResult] = {}

        def run(group: tuple[Optional[int], list[int]]) -> None:
            trials, indices = group
            pairs = [(prepared[i][0], prepared[i][1]) for i in indices]
            results.update(zip(indices, self.evaluator.evaluate_many(pairs, trials)))

        run_parallel(run, list(by_trials.items()), len(by_trials))
        shared: dict[int, tuple[EvalResult, Optional[float]]] = {}
        notes: dict[int, str] = {}  # why a completion kept its own timing
        if config.group == "shared":
            shared = self._shared_timing(items, prepared, results, notes)
        rewards = []
        for index, (item, (task, _, error)) in enumerate(zip(items, prepared)):
            if index not in results:
                rewards.append(compute_reward(None, config=config, edit_error=error))
            elif index in shared:
                result, parent_rt = shared[index]
                reward = compute_reward(result, parent_rt, config, parent_speedup=_number(item.get("parent_speedup")))
                reward.detail = (
                    reward.detail + "; " if reward.detail else ""
                ) + "timed head to head with its group and the parent against one reference"
                rewards.append(reward)
            else:
                assert task is not None
                reward = self._reward(task, item, results[index], config)
                if index in notes:
                    reward.detail = (reward.detail + "; " if reward.detail else "") + notes[index]
                rewards.append(reward)
        return rewards

    def _shared_timing(
        self, items: Sequence[Mapping[str, Any]], prepared: list, results: dict[int, EvalResult], notes: dict[int, str]
    ) -> dict[int, tuple[EvalResult, Optional[float]]]:
        """``group="shared"``: re-time each group (same task, same parent) of
        correct, reliably timed completions head to head in one worker with
        the parent, against one reference (``Evaluator.confirm_best``). A
        completion whose own timing was unreliable is re-timed too; its
        result keeps that flag.
        Returns index -> (result with the head-to-head times, the parent's
        runtime from the same worker or None)."""
        confirm = getattr(self.evaluator, "confirm_best", None)
        if confirm is None:
            raise ValueError("group='shared' needs an evaluator with confirm_best (the local Evaluator)")
        groups: dict[tuple[str, str], list[int]] = {}
        for index, result in results.items():
            task, source, _ = prepared[index]
            if task is None or source is None or not result.correct or result.hacked or not result.runtime_ms:
                continue
            parent = str(items[index].get("parent_source") or "")
            groups.setdefault((task.id, parent), []).append(index)
        out: dict[int, tuple[EvalResult, Optional[float]]] = {}

        def run(key_indices: tuple[tuple[str, str], list[int]]) -> None:
            (_, parent), indices = key_indices
            task = prepared[indices[0]][0]
            sources = [prepared[i][1] for i in indices] + ([parent] if parent else [])
            if len(sources) < 2:
                return
            # a group's ranking needs the head-to-head figures only, not the
            # winner's alone re-timing that a run's best gets
            confirmed = confirm(task, sources, alone=False)
            entries = {int(e["index"]): e for e in confirmed.get("finalists", [])}
            parent_entry = entries.get(len(indices)) if parent else None
            parent_rt = (
                _number((parent_entry or {}).get("runtime_ms"))
                if parent_entry and parent_entry.get("correct") and parent_entry.get("timing_reliable") is not False
                else None
            )
            if parent and parent_rt is None:
                # the parent failed there or its re-timing was unreliable: the
                # group keeps its own evaluations' timings
                for index in indices:
                    notes[index] = "kept its own timing: the parent's head-to-head re-timing failed or was unreliable"
                return
            for pos, index in enumerate(indices):
                e = entries.get(pos)
                if e and e.get("timing_reliable") is False:
                    notes[index] = (
                        "kept its own timing: its head-to-head re-timing was unreliable ("
                        + "; ".join(e.get("unreliable_reasons") or [])
                        + ")"
                    )
                if (
                    not e
                    or not e.get("correct")
                    or e.get("hacked")
                    or not _number(e.get("runtime_ms"))
                    or e.get("suspicious")
                    or e.get("timing_reliable") is False
                ):
                    continue  # keeps its own evaluation's timing
                result = EvalResult.from_dict(results[index].to_dict())
                result.runtime_ms, result.ref_runtime_ms = float(e["runtime_ms"]), _number(e.get("ref_runtime_ms"))
                result.speedup = _number(e.get("speedup"))
                result.speedup_ci_low, result.speedup_ci_high = (
                    _number(e.get("speedup_ci_low")),
                    _number(e.get("speedup_ci_high")),
                )
                out[index] = (result, parent_rt if parent else _number(items[index].get("parent_runtime_ms")))

        run_parallel(run, list(groups.items()), max(1, len(groups)))
        return out

    # -- parent -----------------------------------------------------------
    def _reward(
        self, task: Task, item: Mapping[str, Any], result: EvalResult, config: Optional[RewardConfig]
    ) -> Reward:
        parent_rt = _number(item.get("parent_runtime_ms"))
        parent_sp = _number(item.get("parent_speedup"))
        if (
            parent_rt is None
            and parent_sp is None
            and self.remeasure_parent
            and result.correct
            and item.get("parent_source")
        ):
            parent_rt = self.parent_runtime(task, str(item["parent_source"]), item)
        return compute_reward(result, parent_rt, config or self.config, parent_speedup=parent_sp)

    def parent_runtime(self, task: Task, parent_source: str, item: Mapping[str, Any] | None = None) -> Optional[float]:
        key = task.id + ":" + hashlib.sha256(parent_source.encode()).hexdigest()
        with self._cache_lock:
            if key in self._parent_cache:
                return self._parent_cache[key]
        result = self.evaluator.evaluate(task, parent_source, self._trials(item or {}))
        runtime = result.runtime_ms if result.correct and result.runtime_ms else None
        with self._cache_lock:
            self._parent_cache[key] = runtime
        return runtime

    def _trials(self, item: Mapping[str, Any]) -> Optional[int]:
        trials = item.get("trials", self.trials)
        return int(trials) if trials is not None else None

    def close(self) -> None:
        if self._own_evaluator:
            self.evaluator.close()

    def __enter__(self) -> "LocalScorer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value > 0 else None


def item_from_verl(solution_str: Any, ground_truth: Any, extra_info: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    """A scoring request from a verl row's reward inputs (see kernelsmith.export.rl)."""
    truth: dict[str, Any] = {}
    if isinstance(ground_truth, str) and ground_truth.strip().startswith("{"):
        truth = json.loads(ground_truth)
    elif isinstance(ground_truth, Mapping):
        truth = dict(ground_truth)
    extra = dict(extra_info or {})
    parent = dict(extra.get("parent") or {})
    item: dict[str, Any] = {
        "completion": solution_str,
        "parent_source": parent.get("source") or truth.get("parent_source"),
        "parent_runtime_ms": parent.get("runtime_ms") or truth.get("parent_runtime_ms"),
        "parent_speedup": parent.get("speedup") or truth.get("parent_speedup"),
        "edit_mode": extra.get("edit_mode") or truth.get("edit_mode") or "auto",
    }
    # An OpenRLHF label (export rl --format openrlhf) carries the task itself.
    task = extra.get("task") or truth.get("task")
    if task:
        item["task"] = task
    else:
        item["task_id"] = truth.get("task_id")
    return item


def run_parallel(fn: Any, items: Sequence[Any], workers: int) -> list[Any]:
    with concurrent.futures.ThreadPoolExecutor(max(1, workers)) as pool:
        return list(pool.map(fn, items))

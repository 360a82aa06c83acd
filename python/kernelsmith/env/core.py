"""The evolution step as a multi-turn environment (docs/rl_environment.md).

An episode starts from a program of a task -- the reference itself (a
translation episode) or a parent from a run's archive -- with the same prompt
the evolve loop builds for it. Each turn the policy answers; the answer is
applied with the loop's edit rules (:func:`kernelsmith.edit.apply_response`),
the program is evaluated by the evaluator (sandboxed workers, correctness,
hack guards, timing), and the turn gets a reward and the next observation:
the structured feedback of that evaluation, rendered for the next turn.

Per-turn reward (``EnvConfig``; the failure penalties, shaping, clipping and
confidence-interval rule are those of :class:`~kernelsmith.rewards.RewardConfig`)::

    r_t = penalty(status)                                         failed turn
    r_t = bonus + w_prev * shape(s_prev) + w_ref * shape(s_ref)   correct turn

``s_prev`` is the speedup over the episode's previous program (the last
correct one; at the first turn the start program, or the reference), ``s_ref``
the speedup over the reference, each paid under the evaluator's confidence
interval. A timing the evaluator marks unreliable (``timing_reliable`` False)
or suspicious (below the hardware floor) is paid as at most 1 on both terms:
no speedup reward. Returns are discounted: ``G_t = sum_k gamma^(k-t) r_k``.

The environment knows no trainer; adapters live in their own modules
(:mod:`.trl_rollout`, :mod:`.verl_agent`, :mod:`.verifiers_env`).
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from ..config import ConfigError
from ..edit import MODES as EDIT_MODES
from ..edit import EditResult, apply_response
from ..feedback import Feedback, render_feedback
from ..program_record import ProgramRecord
from ..prompts import PromptBuilder, PromptConfig
from ..result import EvalResult
from ..rewards.core import RewardConfig, apply_ci, compute_reward, shape, speedup_interval
from ..task import Task
from ..evolve.session import reference_as_seed, HISTORY_PER_PROMPT
from ..rewards.scorer import task_from_spec, completion_text
from ..export.steps import load_run
from ..evolve.loop import history_entry
from ..evaluator import Evaluator

__all__ = ["EnvConfig", "Episode", "EpisodeStart", "KernelEnv", "StepResult", "Turn", "discounted_returns"]

REFERENCE_NOTE = "the PyTorch reference; no kernel yet"


def _default_reward() -> RewardConfig:
    # Speedups over the previous program are ratios of speedups over the
    # reference (each measured next to the reference in its own evaluation).
    return RewardConfig(baseline="relative", correct_bonus=0.3)


@dataclass
class EnvConfig:
    #: turns per episode (the policy's answers)
    max_turns: int = 3
    #: discount of the returns: G_t = sum_k gamma^(k-t) r_k (Kevin uses 0.4)
    gamma: float = 0.4
    #: weight of the speedup over the previous program in a correct turn's reward
    w_prev: float = 1.0
    #: weight of the speedup over the reference in a correct turn's reward
    w_ref: float = 1.0
    #: penalties, shaping, clipping, CI rule and the correctness bonus
    reward: RewardConfig = field(default_factory=_default_reward)
    #: how an answer is applied: diff (SEARCH/REPLACE), full (a fenced program) or auto
    edit_mode: str = "auto"
    #: the first prompt's settings (the evolve loop's PromptConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    #: the request mode of the first prompt (explore | exploit | weighted | repair)
    mode: str = "weighted"
    #: end the episode early once a turn reaches this speedup over the reference (reliably timed)
    stop_speedup: Optional[float] = None
    #: correctness trials per evaluation; None: the task's own
    trials: Optional[int] = None
    #: feedback turns show the program the next answer edits
    show_program: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.reward, Mapping):
            self.reward = RewardConfig.from_dict(self.reward)
        if isinstance(self.prompt, Mapping):
            self.prompt = PromptConfig(**self.prompt)
        if int(self.max_turns) < 1:
            raise ConfigError(f"max_turns must be >= 1, got {self.max_turns}")
        if not 0.0 <= float(self.gamma) <= 1.0:
            raise ConfigError(f"gamma must be in [0, 1], got {self.gamma}")
        if self.edit_mode not in EDIT_MODES:
            raise ConfigError(f"edit_mode must be one of {', '.join(EDIT_MODES)}, got '{self.edit_mode}'")
        if self.mode not in ("explore", "exploit", "weighted", "repair"):
            raise ConfigError(f"mode must be explore, exploit, weighted or repair, got '{self.mode}'")
        if self.trials is not None and int(self.trials) < 1:
            raise ConfigError(f"trials must be >= 1, got {self.trials}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class EpisodeStart:
    """Where an episode starts: a task and the program the first answer edits.

    ``source`` None: the reference itself, renamed ``ModelNew`` inside an
    EVOLVE block (a translation episode, as ``kernelsmith evolve`` starts a
    task without a seed). ``metrics`` are the start program's (its
    ``speedup`` over the reference is the first turn's baseline).
    """

    task: Task
    source: Optional[str] = None
    metrics: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    #: other programs shown as "Top programs" in the first prompt, as the loop does
    top_programs: list[dict[str, Any]] = field(default_factory=list)
    #: earlier attempts shown as "Previous attempts" (the loop's history entries)
    history: list[dict[str, Any]] = field(default_factory=list)
    #: the start program's id in its run (shown in the prompt; None: 0)
    program_id: Optional[int] = None

    @property
    def from_reference(self) -> bool:
        return self.source is None

    def program_source(self) -> str:
        if self.source is not None:
            return self.source

        return reference_as_seed(self.task.reference_source)

    def baseline_speedup(self) -> Optional[float]:
        """The start program's speedup over the reference (the reference: 1)."""
        if self.source is None:
            return 1.0
        value = self.metrics.get("speedup")
        return float(value) if isinstance(value, (int, float)) and value > 0 else None

    @classmethod
    def of(cls, spec: Union["EpisodeStart", Task, str, Path, Mapping[str, Any]]) -> "EpisodeStart":
        """A start from a Task, a task path or dict (the reference as start),
        or an EpisodeStart."""
        if isinstance(spec, EpisodeStart):
            return spec

        return cls(task=task_from_spec(spec))

    @classmethod
    def from_seed(cls, task: Union[Task, str, Path]) -> "EpisodeStart":
        """The task's own seed program as start (its speedup unknown until evaluated)."""
        task = cls.of(task).task
        if not task.seed_source:
            raise ValueError(f"task {task.name} has no seed.py")
        return cls(task=task, source=task.seed_source, metrics={}, name="seed")

    @classmethod
    def from_run(
        cls, run_dir: Union[str, Path], program: Union[str, int] = "best", top_programs: int = 3
    ) -> "EpisodeStart":
        """A parent from a run's archive (its trajectory): ``program`` "best"
        (the fastest reliably timed correct program), "seed", or a program id."""
        run = load_run(run_dir)
        task = task_from_spec(run.task.to_dict())
        correct = [
            p
            for p in run.programs.values()
            if p.status == "correct"
            and not p.is_reference
            and not p.metrics.get("unreliable")
            and not p.metrics.get("suspicious")
        ]
        if program == "best":
            if not correct:
                raise ValueError(f"{run_dir}: no reliably timed correct program to start from")
            chosen = max(correct, key=lambda p: float(p.metrics.get("speedup") or 0.0))
        elif program == "seed":
            if not run.seeds:
                raise ValueError(f"{run_dir}: the run has no seed")
            chosen = run.seeds[0]
        else:
            if int(program) not in run.programs:
                raise ValueError(f"{run_dir}: no program {program}; ids: {sorted(run.programs)[:20]}")
            chosen = run.programs[int(program)]
        if chosen.is_reference:
            return cls(task=task, name=f"{Path(run_dir).name}:reference")
        tops = sorted((p for p in correct if p.id != chosen.id), key=lambda p: -float(p.metrics.get("speedup") or 0.0))[
            :top_programs
        ]
        top = [{"id": p.id, "source": p.source, "metrics": dict(p.metrics), "status": p.status} for p in tops]
        # The run's last attempts, as the loop shows an island's recent history.
        history = [history_entry(s.record, s.record.child) for s in run.steps if s.status != "llm-error"][
            -HISTORY_PER_PROMPT:
        ]
        return cls(
            task=task,
            source=chosen.source,
            metrics=dict(chosen.metrics),
            name=f"{Path(run_dir).name}:{chosen.id}",
            top_programs=top,
            history=history,
            program_id=chosen.id,
        )


@dataclass
class Turn:
    """One answer of the policy and what came of it."""

    index: int
    response: str
    edit: Optional[EditResult]
    result: Optional[EvalResult]
    reward: float
    status: str
    info: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # the program evaluated ("" when the edit failed)
    # the program the turn tells, as the loop tells a step's child (status,
    # metrics computed once, compact feedback): the evaluated program, or
    # after a failed edit the model's text (a syntax error only) or the
    # program unchanged; the recorder adds its id and the key of the whole result
    program: Optional[ProgramRecord] = None


@dataclass
class StepResult:
    """What ``step`` returns: the next observation (the feedback message;
    "" once the episode is done), the turn's reward, whether the episode
    ended, the evaluator's full result (None when the answer could not be
    applied) and the reward's terms in ``info``."""

    observation: str
    reward: float
    done: bool
    result: Optional[EvalResult]
    info: dict[str, Any]
    messages: list[dict[str, str]]  # the whole conversation, the observation last

    def __iter__(self):  # obs, reward, done, result = env.step(answer)
        return iter((self.observation, self.reward, self.done, self.result))


class Episode:
    """One episode's state: the conversation, the program the next answer
    edits, the baseline of the speedup over the previous program, the turns."""

    _ids = itertools.count(1)

    def __init__(
        self, start: EpisodeStart, messages: list[dict[str, str]], prompt_meta: dict[str, Any], max_turns: int
    ) -> None:
        self.id = next(Episode._ids)
        self.start = start
        self.task = start.task
        self.messages = messages
        self.prompt_meta = prompt_meta
        self.max_turns = max_turns
        self.current_source = start.program_source()  # what the next answer edits
        self.current_id: Optional[int] = None  # its id in the recorded run
        self.current_metrics: dict[str, Any] = dict(start.metrics) if start.source else {"score": 0.0}
        self.baseline_speedup = start.baseline_speedup()  # last correct program's speedup over the reference
        self.baseline_runtime_ms: Optional[float] = start.metrics.get("runtime_ms") if start.source else None
        self.turns: list[Turn] = []
        self.done = False
        self.record: Any = None  # the recorder's handle

    @property
    def observation(self) -> list[dict[str, str]]:
        return [dict(m) for m in self.messages]

    @property
    def rewards(self) -> list[float]:
        return [t.reward for t in self.turns]

    def returns(self, gamma: float) -> list[float]:
        return discounted_returns(self.rewards, gamma)


def discounted_returns(rewards: Sequence[float], gamma: float) -> list[float]:
    """G_t = r_t + gamma * G_{t+1}: the return of every turn."""
    out: list[float] = []
    running = 0.0
    for r in reversed(list(rewards)):
        running = float(r) + gamma * running
        out.append(running)
    return out[::-1]


class KernelEnv:
    """An environment over one task or a set of tasks.

    Gym-like, one episode at a time: ``obs = env.reset()`` (the first
    prompt's messages), ``obs, reward, done, result = env.step(answer)``.
    Batched: ``ep = env.new_episode()`` for as many episodes as wanted, then
    ``env.step_many([(ep, answer), ...])`` evaluates all their programs at
    once on the evaluator's pool (``await env.step_async(ep, answer)`` from
    asyncio code). Episodes share the evaluator, the prompt builders and the
    recorder.

    ``tasks``: a Task, a task path, an :class:`EpisodeStart`, or a list of
    them. ``evaluator``: an :class:`~kernelsmith.evaluator.Evaluator` (or
    anything with ``evaluate_many``, ``evaluate_async`` and ``backend_for``);
    None builds a pool evaluator that :meth:`close` closes. ``record_dir``:
    where episodes are recorded as run directories (one per task), in the
    evolve loop's trajectory format, so ``kernelsmith export`` reads them.
    """

    def __init__(
        self,
        tasks: Any,
        evaluator: Any = None,
        config: Optional[EnvConfig] = None,
        *,
        record_dir: Union[str, Path, None] = None,
        model: str = "policy",
    ) -> None:
        self.config = config or EnvConfig()
        items = tasks if isinstance(tasks, (list, tuple)) else [tasks]
        self.starts = [EpisodeStart.of(t) for t in items]
        self._own_evaluator = evaluator is None
        if evaluator is None:
            evaluator = Evaluator()
        self.evaluator = evaluator
        self.model = model
        self._builders: dict[str, PromptBuilder] = {}
        self._lock = threading.Lock()
        self._cursor = 0
        self.recorder = None
        if record_dir is not None:
            from .record import EpisodeRecorder  # lazy: cycle env.core -> env.record -> env.core

            self.recorder = EpisodeRecorder(record_dir, self.config)
        self.episode: Optional[Episode] = None

    # -- starts ---------------------------------------------------------
    def _start(self, which: Any) -> EpisodeStart:
        if which is None:
            if not self.starts:
                raise ValueError("this environment has no tasks: pass a task or an EpisodeStart")
            with self._lock:
                start = self.starts[self._cursor % len(self.starts)]
                self._cursor += 1
            return start
        if isinstance(which, int):
            return self.starts[which]
        if isinstance(which, str):
            for start in self.starts:
                if which in (start.task.id, start.task.name, start.name):
                    return start
            raise KeyError(
                f"no task or start named '{which}'; known: {', '.join(s.name or s.task.name for s in self.starts)}"
            )
        return EpisodeStart.of(which)

    def builder(self, task: Task) -> PromptBuilder:
        """The evolve loop's prompt builder for ``task`` (cached per task)."""
        with self._lock:
            builder = self._builders.get(task.id)
        if builder is None:
            backend = self.evaluator.backend_for(task)
            hardware = backend.hardware_info()
            builder = PromptBuilder(
                self.config.prompt,
                reference_source=task.reference_source,
                backend=backend.name,
                backend_tips=backend.prompt_tips(hardware),
                hardware=hardware,
                task_name=task.name,
                task_description=task.config.description or "",
            )
            with self._lock:
                self._builders.setdefault(task.id, builder)
        return builder

    def first_prompt(self, start: EpisodeStart) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """The prompt the evolve loop builds for a request whose parent is the start program."""
        current = ProgramRecord.unevaluated(
            start.program_source(),
            "correct",
            Feedback() if start.source else Feedback(note=REFERENCE_NOTE),
            parent_id=-1,
            island=0,
            iteration=0,
            metrics=dict(start.metrics) if start.source else None,
        )
        current.id = start.program_id if start.program_id is not None else 0
        request = SimpleNamespace(
            island=0, parent=current.to_child(), inspirations=[], mode=self.config.mode, iteration=1
        )
        prompt = self.builder(start.task).build(request, history=start.history, top_programs=start.top_programs)
        return prompt.messages, prompt.meta

    # -- episodes -------------------------------------------------------
    def new_episode(self, task: Any = None, messages: Optional[list[dict[str, str]]] = None) -> Episode:
        """A new episode on ``task`` (an index, a task id or name, a Task or
        EpisodeStart; None: the next start in turn). ``messages``: the first
        prompt when the trainer already has it (e.g. an exported RL row's
        prompt, built by the loop); by default it is built here."""
        start = self._start(task)
        if messages is not None:
            messages, meta = [dict(m) for m in messages], {"given": True}
        else:
            messages, meta = self.first_prompt(start)
        episode = Episode(start, messages, meta, self.config.max_turns)
        if self.recorder is not None:
            self.recorder.begin(episode)
        return episode

    def reset(self, task: Any = None) -> list[dict[str, str]]:
        """Start the environment's own episode; returns its first prompt (messages)."""
        self.episode = self.new_episode(task)
        return self.episode.observation

    def step(self, response: str) -> StepResult:
        """One turn of the environment's own episode (see :meth:`reset`)."""
        if self.episode is None:
            raise RuntimeError("call reset() before step()")
        return self.step_many([(self.episode, response)])[0]

    # -- turns ----------------------------------------------------------
    def _prepare(self, episode: Episode, response: Any) -> tuple[EditResult, str]:
        if episode.done:
            raise RuntimeError(f"episode {episode.id} is done ({len(episode.turns)} turns); start a new one")

        text = completion_text(response)
        edit = apply_response(episode.current_source, text, mode=self.config.edit_mode)
        return edit, text

    def step_many(self, pairs: Iterable[tuple[Episode, Any]]) -> list[StepResult]:
        """One turn of each episode; every program is evaluated at once on the pool."""
        pairs = list(pairs)
        if len({id(ep) for ep, _ in pairs}) != len(pairs):
            raise ValueError("an episode appears twice in one step_many call")
        prepared = [self._prepare(ep, resp) for ep, resp in pairs]
        todo = [(i, ep.task, edit.source) for i, ((ep, _), (edit, _)) in enumerate(zip(pairs, prepared)) if edit.ok]
        results: dict[int, EvalResult] = {}
        if todo:
            evaluated = self.evaluator.evaluate_many([(task, src) for _, task, src in todo], trials=self.config.trials)
            results = {i: r for (i, _, _), r in zip(todo, evaluated)}
        return [
            self._finish(ep, text, edit, results.get(i))
            for i, ((ep, _), (edit, text)) in enumerate(zip(pairs, prepared))
        ]

    async def step_async(self, episode: Episode, response: Any) -> StepResult:
        """One turn of one episode from asyncio code; concurrent calls share the pool."""
        edit, text = self._prepare(episode, response)
        result = None
        if edit.ok:
            result = await self.evaluator.evaluate_async(episode.task, edit.source, self.config.trials)
        return self._finish(episode, text, edit, result)

    # -- reward ---------------------------------------------------------
    def turn_reward(
        self, episode: Episode, edit: EditResult, result: Optional[EvalResult]
    ) -> tuple[float, str, dict[str, Any]]:
        """(reward, status, terms) of one turn; see the module docstring."""
        cfg = self.config.reward
        if not edit.ok or result is None:
            base = compute_reward(None, config=cfg, edit_error=edit.error or "no program")
            return base.reward, base.status, {"penalty": base.reward, "edit_error": edit.error}
        plain = dataclasses.replace(cfg, correct_bonus=0.0)
        baseline = episode.baseline_speedup
        if baseline is None and not episode.baseline_runtime_ms:
            baseline = 1.0  # a start never timed (e.g. a task's seed): measured against the reference
        base = compute_reward(
            result, parent_runtime_ms=episode.baseline_runtime_ms, config=plain, parent_speedup=baseline
        )
        if base.status != "correct":
            if base.status == "untimed":
                return cfg.untimed + cfg.correct_bonus, "untimed", {"bonus": cfg.correct_bonus}
            return base.reward, base.status, {"penalty": base.reward}
        reliable = result.timing_reliable is not False and not result.suspicious
        s_prev = float(base.speedup or 0.0)
        raw_ref = float(result.speedup or 0.0)
        s_ref = apply_ci(raw_ref, speedup_interval(result, raw_ref), cfg.ci)
        if not reliable:
            # No speedup reward for a timing the evaluator does not trust as fast.
            s_prev, s_ref = min(s_prev, 1.0), min(s_ref, 1.0)
        terms = {
            "bonus": cfg.correct_bonus,
            "speedup_prev": s_prev,
            "speedup_ref": s_ref,
            "reliable": reliable,
            "prev_term": self.config.w_prev * shape(s_prev, cfg),
            "ref_term": self.config.w_ref * shape(s_ref, cfg),
        }
        reward = cfg.correct_bonus + terms["prev_term"] + terms["ref_term"]
        return reward, "correct", terms

    def _finish(self, episode: Episode, text: str, edit: EditResult, result: Optional[EvalResult]) -> StepResult:
        reward, status, terms = self.turn_reward(episode, edit, result)
        index = len(episode.turns)
        parent_id, parent_metrics = episode.current_id, dict(episode.current_metrics)
        turn = Turn(
            index=index,
            response=text,
            edit=edit,
            result=result,
            reward=reward,
            status=status,
            info=terms,
            source=edit.source if edit.ok else "",
            program=self._program(episode, edit, result, parent_id, index),
        )
        prompt_before = episode.observation
        episode.turns.append(turn)
        # What the next answer edits: this turn's program (a repair when it
        # failed), or the previous one when the answer could not be applied
        # (the model's text when it only failed to parse, as the loop does).
        if edit.ok:
            episode.current_source = edit.source
            episode.current_metrics = dict(turn.program.metrics)
        elif edit.error_kind == "syntax":
            episode.current_source = edit.source
            episode.current_metrics = {"score": 0.0}
        if status == "correct" and result is not None and terms.get("reliable"):
            episode.baseline_speedup = float(result.speedup) if result.speedup else episode.baseline_speedup
            episode.baseline_runtime_ms = result.runtime_ms or episode.baseline_runtime_ms
        reached = (
            self.config.stop_speedup is not None
            and status == "correct"
            and terms.get("reliable")
            and float(result.speedup or 0.0) >= self.config.stop_speedup
        )
        episode.done = len(episode.turns) >= episode.max_turns or bool(reached)
        observation = "" if episode.done else self.feedback_message(episode, turn)
        episode.messages = episode.messages + [{"role": "assistant", "content": text}]
        if observation:
            episode.messages.append({"role": "user", "content": observation})
        info = {"status": status, "turn": index, "episode": episode.id, **terms}
        if episode.done:
            info["returns"] = episode.returns(self.config.gamma)
            info["stop"] = "stop_speedup" if reached else "max_turns"
        if self.recorder is not None:
            child_id = self.recorder.turn(
                episode,
                turn,
                parent_id=parent_id,
                parent_metrics=parent_metrics,
                prompt=prompt_before,
                model=self.model,
            )
            if edit.ok or edit.error_kind == "syntax":
                episode.current_id = child_id
        return StepResult(
            observation=observation,
            reward=reward,
            done=episode.done,
            result=result,
            info=info,
            messages=episode.observation,
        )

    @staticmethod
    def _program(
        episode: Episode, edit: EditResult, result: Optional[EvalResult], parent_id: Optional[int], index: int
    ) -> ProgramRecord:
        """The turn's program, its metrics computed here once: the evaluated
        one, or after a failed edit the model's text when it only failed to
        parse, else the program unchanged."""
        where = dict(parent_id=parent_id if parent_id is not None else -1, island=0, iteration=index + 1)
        if result is not None:
            return ProgramRecord.evaluated(edit.source, result, eval_key=None, **where)
        feedback = Feedback(category="edit", edit_error=edit.error, compiled=False)
        source = edit.source if edit.error_kind == "syntax" else episode.current_source
        return ProgramRecord.unevaluated(source, "edit-failed", feedback, **where)

    def feedback_message(self, episode: Episode, turn: Turn) -> str:
        """The next turn's user message: the evaluation's structured feedback
        (the loop's renderer), then the program the next answer edits."""
        cfg = self.config
        if turn.result is None:
            feedback = Feedback(
                category="edit", edit_error=turn.edit.error if turn.edit else "no program", compiled=False
            )
        else:
            feedback = Feedback.of(turn.result)
        lines = [
            f"## Result of your answer (turn {turn.index + 1} of {episode.max_turns})",
            render_feedback(feedback, cfg.prompt.max_log_chars),
        ]
        if turn.status == "correct":
            s_ref = turn.info.get("speedup_ref")
            lines.append("")
            lines.append(
                f"Correct. Speedup over the reference as paid: {s_ref:.3g}x"
                + ("" if turn.info.get("reliable") else " (timing not reliable: paid at most 1x)")
                + ". Make it faster."
            )
        elif turn.status == "untimed":
            lines.append("")
            lines.append("Correct (not timed). Make it faster.")
        elif turn.status == "edit-failed":
            lines.append("")
            lines.append("Your answer could not be applied; the program below is unchanged. Fix the answer's format.")
        else:
            lines.append("")
            lines.append("Fix the program below so that it compiles and matches the reference, then make it fast.")
        if cfg.show_program:
            lines += [
                "",
                "## Current program",
                "Your next answer edits this program:",
                "```python",
                episode.current_source.rstrip("\n"),
                "```",
            ]
        lines += ["", "Answer in the same format as before."]
        return "\n".join(lines) + "\n"

    # -- lifetime -------------------------------------------------------
    def close(self) -> None:
        if self._own_evaluator:
            self.evaluator.close()

    def __enter__(self) -> "KernelEnv":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

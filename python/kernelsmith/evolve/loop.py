"""The evolution loop: ask -> prompt -> propose -> edit -> dedupe -> evaluate -> tell.

Steady state, asyncio: up to ``proposal_concurrency`` steps are in flight, and
at most ``eval_concurrency`` of them evaluate at once. Results are *applied*
(recorded, told to the engine) strictly in the order the requests were asked.
That costs a little head-of-line waiting but makes the engine see the same
sequence of asks and tells whatever the timing, so a run is deterministic for
a seed (given deterministic proposals) and a resumed run continues exactly as
an uninterrupted one would.

Resume: every ``checkpoint_every`` applied steps the engine is saved together
with the loop's counters. Steps applied after the last checkpoint are still in
``trajectory.jsonl`` (each is appended before it is told), so on resume they
are replayed into the engine from the record instead of being proposed and
evaluated again: nothing finished is lost or evaluated twice.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..engine import normalized_hash
from ..feedback import Feedback, clip
from ..program_record import ProgramRecord, source_key
from ..result import EvalResult
from ..trajectory import StepRecord
from .best import BestFigure, best_figure, step_figure
from .config import EvolveConfig
from .rundir import RunDir, atomic_write_text
from ..task import TaskError
from ..evaluator.finalists import reliable as finalist_reliable
from ..proposers.base import Proposal, ProposerExhausted
from ..edit import apply_response
from ..engine import Program
from ..llm import Usage
from ..llm.types import BudgetExceeded, LLMError

CHECKPOINT_KEEP = 2
#: status of a step whose LLM request failed (after retries): no program,
#: nothing told to the engine, never shown in a prompt
LLM_ERROR = "llm-error"


@dataclass
class StepOutcome:
    """What one step produced, before it is applied."""

    request: Any
    record: StepRecord
    child: ProgramRecord | None  # the program to tell, None when nothing to tell
    replayed: bool = False
    stop_reason: str | None = None
    stop_detail: str = ""


@dataclass
class RunSummary:
    run_dir: str
    task_id: str
    steps: int
    stop_reason: str
    best_speedup: float | None
    best_program_id: int | None
    correct_steps: int
    status_counts: dict[str, int]
    usage: dict[str, Any]
    wall_time_s: float  # every part of the run, resumed ones included
    archive: dict[str, Any] = field(default_factory=dict)
    # the finalists' head-to-head re-timing that chose the best (see
    # Evolution.confirm_best); {} when none ran
    best_confirmation: dict[str, Any] = field(default_factory=dict)
    stop_detail: str = ""  # why, in words, when the reason alone does not say (LLM failures)
    parts: int = 1  # sessions the run took (1 + resumes)
    # the run's one best number (evolve/best.py: BestFigure.to_dict): the
    # confirmed head-to-head figure with its CI and verdict, else the
    # per-step one, labelled; what the summary, best_program.py and the
    # report show
    best: dict[str, Any] = field(default_factory=dict)
    # proposal steps applied (``steps`` counts the seed's record too: the
    # seed is step 0, proposal steps are 1..proposal_steps)
    proposal_steps: int = 0

    @property
    def failed(self) -> bool:
        """Stopped by a fault (the LLM endpoint, the task's reference), not by
        finishing or a limit."""
        return self.stop_reason.startswith("llm-") or self.stop_reason == "harness-error"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Evolution:
    """One run. Collaborators are passed in so tests and notebooks can swap
    any of them (a scripted proposer, an in-process evaluator for trusted
    seeds, ...)."""

    def __init__(
        self,
        *,
        task: Any,
        config: EvolveConfig,
        engine: Any,
        proposer: Any,
        evaluator: Any,
        prompt_builder: Any,
        run_dir: RunDir,
        backend: Any = None,
        usage_meter: Any = None,
        progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.task = task
        self.config = config
        self.engine = engine
        self.proposer = proposer
        self.evaluator = evaluator
        self.prompt_builder = prompt_builder
        self.run_dir = run_dir
        self.backend = backend
        self.usage_meter = usage_meter
        self.progress = progress
        self.steps_applied = 0
        self.asks_issued = 0
        self.status_counts: collections.Counter[str] = collections.Counter()
        self.best_speedup: float | None = None
        self.best_program_id: int | None = None
        self.history: list[dict[str, Any]] = []  # compact per-step summaries for prompts
        self._replay: dict[int, StepRecord] = {}
        self._claims: dict[int, int] = {}  # normalized code hash -> ask order of the step evaluating it
        self._ask_order: dict[int, int] = {}  # request id -> position in the ask sequence
        self._ask_counter = 0
        # The evaluator's own pool decides how many run at once (one per GPU);
        # an explicit eval_concurrency caps it further.
        slots = config.eval_concurrency or getattr(evaluator, "workers", None) or config.proposal_concurrency
        self._eval_slots = asyncio.Semaphore(slots)
        self._stop = asyncio.Event()
        self._stop_reason: str | None = None
        self._stop_detail = ""
        self._started = time.monotonic()
        # correct programs by id: (per-step speedup, source, trusted), for the finalists
        self._correct: dict[int, tuple[float, str, bool]] = {}
        self.best_confirmation: dict[str, Any] = {}
        # correct programs by id: their per-step figure (step, CI, verdict)
        self._figures: dict[int, BestFigure] = {}
        self.seeds_applied = 0
        self._wall_before = 0.0  # wall time of the parts before a resume
        self.parts = 1
        self.llm_failures_in_a_row = 0
        # proposal steps applied by this part of the run (this process), and
        # how many of them the proposer failed: a part whose every proposal
        # failed ends as a fault (``llm-all-failed``), not as a finished run
        self.part_proposals = 0
        self.part_llm_errors = 0
        self._last_llm_error = ""
        # sha256 of a source -> (key, logged EvalResult) in evaluations.jsonl
        self._evaluated: dict[str, tuple[str, dict[str, Any]]] | None = None
        self._proposed: dict[int, dict[str, Any]] = {}  # request id -> logged prompt and answer (resume)
        # Whether an evaluation has run the task's reference (a correctness
        # trial got that far). A run without a seed program starts before
        # anything has; a harness fault until then is a failed start
        # (session.evolve), not a run to resume.
        self.reference_ran = False

    # ------------------------------------------------------------------ seed
    async def seed(self, sources: list[tuple[str, str]]) -> None:
        """Evaluate the initial programs (name, source) and add them."""
        for name, source in sources:
            result, key = await self._evaluate(source)
            if getattr(result, "category", "") == "harness":
                # The task's reference (or the machine) failed before anything
                # ran: a failed start, not a run. Nothing is checkpointed, so
                # the run directory is removed and a re-run is not blocked.
                raise TaskError(
                    f"{getattr(self.task, 'name', 'the task')}: the {name} program could not be "
                    f"evaluated: {one_line(getattr(result, 'error', ''))}"
                )
            self.reference_ran = self.reference_ran or _reference_ran(result)
            child = ProgramRecord.evaluated(source, result, parent_id=-1, island=-1, iteration=0, eval_key=key)
            ids = self.engine.add_seed(self._make_program(child))
            child.id = ids[0]
            record = StepRecord(
                kind="seed",
                step=self.steps_applied,
                name=name,
                child_id=ids[0],
                copy_ids=list(ids),
                child_source=source,
                status=child.status,
                metrics=child.metrics,
                eval_key=key,
                child=child,
                time=time.time(),
            )
            self.run_dir.append_step(record)
            self._after_apply(record, child)
        self.checkpoint()

    def seed_reference(self, source: str) -> None:
        """Start from the reference itself (no kernel yet): the first children
        are translation steps. Not evaluated: it is the baseline, score 0."""
        child = ProgramRecord.unevaluated(
            source,
            "correct",
            Feedback(note="the PyTorch reference; no kernel yet"),
            parent_id=-1,
            island=-1,
            iteration=0,
        )
        ids = self.engine.add_seed(self._make_program(child))
        record = StepRecord(
            kind="seed",
            step=self.steps_applied,
            name="reference",
            child_id=ids[0],
            copy_ids=list(ids),
            child_source=source,
            status="reference",
            metrics=child.metrics,
            eval_key=None,
            time=time.time(),
        )
        self.run_dir.append_step(record)
        self._after_apply(record, None)
        self.checkpoint()

    # ------------------------------------------------------------------ run
    async def run(self) -> RunSummary:
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGINT, self.request_stop, "interrupted")
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
            pass
        pending: collections.deque[asyncio.Task[StepOutcome]] = collections.deque()
        try:
            # After a resume the engine re-issues the requests that were in
            # flight at the checkpoint, in order, from its first asks.
            for _ in self.engine.pending_requests():
                request = self.engine.ask()
                if (
                    int(request.id) not in self._replay
                    and self.steps_applied - self.seeds_applied + len(pending) >= self.config.iterations
                ):
                    # `--resume --iterations N` asked for fewer steps than
                    # were in flight when the run stopped: the rest are
                    # dropped, not run (N more steps means N, issue 31).
                    # Those already applied (replayed) come first, in ask order.
                    self.engine.cancel(int(request.id))
                    self.asks_issued -= 1
                    continue
                pending.append(asyncio.ensure_future(self._step(request)))
            while True:
                while (
                    not self._stop.is_set()
                    and len(pending) < self.config.proposal_concurrency
                    and self.asks_issued < self.config.iterations
                ):
                    request = self.engine.ask()
                    self.asks_issued += 1
                    pending.append(asyncio.ensure_future(self._step(request)))
                if not pending:
                    break
                stop_wait = asyncio.ensure_future(self._stop.wait())
                done, _ = await asyncio.wait({pending[0], stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                stop_wait.cancel()
                if pending[0] not in done:
                    break  # stop requested while the head step was running
                outcome = pending.popleft().result()
                if outcome.stop_reason:
                    # Not applied: its request stays open in the checkpoint
                    # and is asked again when the run is resumed.
                    self.request_stop(outcome.stop_reason, outcome.stop_detail)
                    break
                self._apply(outcome)
                if self.steps_applied % self.config.checkpoint_every == 0:
                    self.checkpoint()
                if self.llm_failures_in_a_row >= self.config.max_llm_failures:
                    self.request_stop(
                        "llm-failures",
                        (
                            f"{self.llm_failures_in_a_row} LLM requests in a row failed (max_llm_failures "
                            f"{self.config.max_llm_failures}); last: {outcome.record.proposal_error}"
                        ),
                    )
                reason = self._engine_stop_reason()
                if reason:
                    self.request_stop(reason)
        finally:
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
            try:
                loop.remove_signal_handler(signal.SIGINT)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
        if self._stop_reason is None:
            self._stop_reason = "iterations"
        self._all_proposals_failed()
        self.checkpoint()
        if self._stop_reason == "interrupted":
            # Ctrl-C means now: the finalists' re-timing (tens of seconds)
            # waits for the resume, whose end runs it
            self.best_confirmation = {"skipped": "interrupted before the finalists' head-to-head re-timing"}
        else:
            await self.confirm_best()
        return self.finish()

    def _note_correct(self, child: ProgramRecord) -> None:
        metrics = child.metrics
        if child.id is None or not child.source or metrics.get("suspicious"):
            return
        self._correct[child.id] = (
            float(metrics.get("speedup", metrics.get("score", 0.0)) or 0.0),
            child.source,
            not metrics.get("unreliable"),
        )

    async def confirm_best(self) -> None:
        """The honest best: the ``finalists`` fastest correct programs (by
        per-step speedup, reliable or not) re-timed head to head in one
        worker under a step's timing rules (Evaluator.confirm_best); the
        fastest whose re-timing was reliable is the run's best, with the
        speedup measured there. Per-step speedups were each taken against
        their own reference measurement, at other moments."""
        confirm = getattr(self.evaluator, "confirm_best", None)
        if confirm is None or self.config.finalists < 1 or not self._correct:
            return
        ranked = sorted(self._correct.items(), key=lambda kv: -kv[1][0])[: self.config.finalists]
        ids = [pid for pid, _ in ranked]
        if self.progress is not None:
            self.progress({**self.snapshot(), "finalists": len(ranked)})
        try:
            outcome = await asyncio.to_thread(confirm, self.task, [entry[1] for _, entry in ranked])
        except Exception as exc:  # noqa: BLE001 - the run's work is done; keep the per-step best and say why
            self.best_confirmation = {"error": f"{type(exc).__name__}: {exc}"}
            return
        rows = []
        for entry in outcome.get("finalists", []):
            pid = ids[int(entry["index"])]
            rows.append(
                {
                    **entry,
                    "program_id": pid,
                    "step_speedup": self._correct[pid][0],
                    "step_timing_reliable": self._correct[pid][2],
                }
            )
        # a finalist whose re-timing the gate judged unreliable (contention,
        # drift, a reference that moved with it, or its alone re-timing)
        # claims nothing: the per-step best (reliable timings only) stays
        winners = [r for r in rows if finalist_reliable(r)]
        self.best_confirmation = {"finalists": rows, "head_to_head": outcome.get("head_to_head", {})}
        if not winners:
            self.best_confirmation["note"] = "no finalist's re-timing was reliable" + (
                "; the per-step best is kept" if self.best_program_id is not None else "; no best"
            )
            return
        best = max(winners, key=lambda r: r["speedup"])
        self.best_speedup, self.best_program_id = float(best["speedup"]), int(best["program_id"])
        self.best_confirmation["best_program_id"] = self.best_program_id

    def _all_proposals_failed(self) -> None:
        """A part that ran proposals and got none (each an LLM fault: a
        malformed answer, a dropped connection, a proposer that cannot
        propose) did not do what was asked, however it stopped: a fault,
        not a finished run. Fewer failures than ``max_llm_failures`` in a row
        would otherwise end as ``iterations`` with exit code 0."""
        if self.part_proposals == 0 or self.part_llm_errors < self.part_proposals:
            return
        if self._stop_reason in ("interrupted", "budget", "harness-error") or self._stop_reason.startswith("llm-"):
            return  # already its own reason (a fault, or the user's or the budget's stop)
        self._stop_reason = "llm-all-failed"
        where = "of this run" if self.parts == 1 else "since the resume"
        self._stop_detail = f"all {self.part_proposals} proposal(s) {where} failed; last: {self._last_llm_error}"

    def request_stop(self, reason: str, detail: str = "") -> None:
        if self._stop_reason is None:
            self._stop_reason = reason
            self._stop_detail = detail
        self._stop.set()

    # ----------------------------------------------------------------- steps
    async def _step(self, request: Any) -> StepOutcome:
        if int(request.id) not in self._ask_order:
            self._ask_order[int(request.id)] = self._ask_counter
            self._ask_counter += 1
        recorded = self._replay.pop(int(request.id), None)
        if recorded is not None:
            if recorded.child_source and not recorded.duplicate:
                # It claimed its code when it first ran; claim it again so a
                # later step with the same code is a duplicate, as it was then.
                self._claims.setdefault(normalized_hash(recorded.child_source), self._ask_order[int(request.id)])
            return StepOutcome(request, recorded, recorded.child, replayed=True)
        # The prompt is built when the step starts, from what was applied
        # before it: deterministic in the ask/tell sequence. A request that was
        # in flight at a crash (asked again on resume) started before the
        # checkpoint's state, so its logged prompt and answer are reused.
        logged = self._proposed.pop(int(request.id), None)
        if logged is not None:
            messages, prompt_meta = logged["prompt"], logged["prompt_meta"]
        else:
            messages, prompt_meta = self.prompt_builder(request, self)
        record = StepRecord(
            kind="step",
            request_id=int(request.id),
            iteration=int(request.iteration),
            island=int(request.island),
            mode=str(request.mode),
            parent_id=int(request.parent.id) if request.parent is not None else -1,
            parent_metrics=dict(request.parent.metrics) if request.parent is not None else {},
            inspiration_ids=[int(p.id) for p in request.inspirations],
            prompt=messages,
            prompt_meta=prompt_meta,
        )
        if logged is not None:
            proposal = Proposal.from_dict(logged["proposal"])
            self._charge(proposal.model, proposal.usage, proposal.latency_s)
        else:
            try:
                proposal = await self.proposer.propose(request, messages)
            except Exception as exc:  # noqa: BLE001 - classified below
                stop = _stop_reason_for(exc)
                if stop:
                    return StepOutcome(request, record, None, stop_reason=stop, stop_detail=str(exc))
                raise
            if not getattr(proposal, "error", None):
                # Logged before evaluation: a crash before this step is applied
                # does not cost the answer (or its tokens) again.
                self.run_dir.append_proposal(
                    {
                        "request_id": int(request.id),
                        "prompt": messages,
                        "prompt_meta": prompt_meta,
                        "proposal": _to_dict(proposal),
                    }
                )
        if getattr(proposal, "error", None):
            # The model never answered: nothing to tell the engine and nothing
            # a later prompt should show as if the model had written it.
            info = getattr(proposal, "error_info", None) or {"kind": "other", "message": proposal.error}
            record.raw_response, record.model = None, getattr(proposal, "model", None)
            record.proposal_error, record.llm_error = proposal.error, info
            record.latency_s, record.status = getattr(proposal, "latency_s", None), LLM_ERROR
            return StepOutcome(request, record, None)
        record.raw_response = proposal.text
        record.reasoning = getattr(proposal, "reasoning", None)
        record.model = getattr(proposal, "model", None)
        record.usage = _to_dict(getattr(proposal, "usage", None)) or {}
        record.latency_s = getattr(proposal, "latency_s", None)

        parent_source = request.parent.source if request.parent is not None else ""
        edit = apply_response(parent_source, proposal.text or "", mode=self.config.edit_mode)
        record.edit = edit
        if not edit.ok:
            feedback = Feedback(category="edit", edit_error=edit.error, compiled=False)
            # The program a repair starts from: the model's text when it only
            # failed to parse (it already keeps the EVOLVE-block rules), else
            # the parent unchanged, never a rule-breaking or partial text, so
            # a repair's edits are checked against a valid program.
            failed_source = edit.source if edit.error_kind == "syntax" else parent_source
            return StepOutcome(request, record, self._failed_child(request, "edit-failed", feedback, failed_source))
        source = edit.source
        record.child_source = source
        # Skip evaluation when the code is known, or when an earlier-asked
        # step in flight has the same code: that one is told first, so this
        # one is a duplicate at apply time either way.
        key = normalized_hash(source)
        order = self._ask_order[int(request.id)]
        claimant = self._claims.setdefault(key, order)
        if self.engine.seen(source) or claimant < order:
            record.duplicate = True
            return StepOutcome(request, record, None)
        # The claim lasts until this step is applied (told), when seen() takes over.
        async with self._eval_slots:
            result, key = await self._evaluate(source)
        self.reference_ran = self.reference_ran or _reference_ran(result)
        if getattr(result, "category", "") == "harness":
            # the task's reference (or the machine) failed: nothing to tell
            # the model or the archive; the run stops and says why, and
            # the request stays open for a resume once the task is fixed
            return StepOutcome(
                request, record, None, stop_reason="harness-error", stop_detail=getattr(result, "error", "")
            )
        record.eval_key = key
        child = ProgramRecord.evaluated(
            source,
            result,
            parent_id=int(record.parent_id),
            island=int(record.island),
            iteration=int(record.iteration),
            eval_key=key,
        )
        return StepOutcome(request, record, child)

    async def _evaluate(self, source: str) -> tuple[Any, str | None]:
        """The result of ``source`` and its key in ``evaluations.jsonl``
        (None for a harness fault, which is not logged)."""
        sha = source_key(source)
        if self._evaluated is None:
            self._evaluated = {
                r["sha256"]: (str(r.get("key") or r["sha256"]), r["eval"])
                for r in self.run_dir.read_evaluations()
                if "sha256" in r
            }
        done = self._evaluated.get(sha)
        if done is not None:  # evaluated before a crash, its step not yet recorded then
            return EvalResult.from_dict(done[1]), done[0]
        result = await self.evaluator.evaluate_async(self.task, source)
        if getattr(result, "category", "") == "harness":  # a harness fault is evaluated again after a fix
            return result, None
        return result, self.run_dir.append_evaluation(sha, _to_dict(result))

    def _failed_child(self, request: Any, status: str, feedback: Feedback, source: str) -> ProgramRecord:
        return ProgramRecord.unevaluated(
            source,
            status,
            feedback,
            parent_id=int(request.parent.id) if request.parent is not None else -1,
            island=int(request.island),
            iteration=int(request.iteration),
        )

    # ----------------------------------------------------------------- apply
    def _apply(self, outcome: StepOutcome) -> None:
        record, child = outcome.record, outcome.child
        order = self._ask_order.pop(int(outcome.request.id), None)
        if record.child_source:
            key = normalized_hash(record.child_source)
            if self._claims.get(key) == order:
                del self._claims[key]
        if not outcome.replayed:
            # A program identical to one already told (e.g. by a sibling step
            # that finished first) is a duplicate: checked here, in ask order,
            # so the verdict does not depend on timing.
            if child is not None and child.status != "edit-failed" and self.engine.seen(child.source):
                record.duplicate = True
                child = None
            if child is not None:
                # Recorded before the tell (write-ahead), so ask the engine
                # which id the tell will give.
                child.id = int(self.engine.next_program_id())
                record.child_id, record.status, record.metrics = child.id, child.status, child.metrics
            else:
                record.child_id = None
                record.status = record.status or ("duplicate" if record.duplicate else "skipped")
            record.step = self.steps_applied
            record.time = time.time()
            record.child = child
            self.run_dir.append_step(record)
        if child is not None:
            told = self.engine.tell(self._make_program(child, program_id=-1), request_id=int(outcome.request.id))
            if told.id != child.id:
                raise RuntimeError(
                    f"engine gave program id {told.id}, the trajectory recorded {child.id}: "
                    "the run directory does not match this engine state"
                )
        else:
            self.engine.cancel(int(outcome.request.id))
        self._after_apply(record, child)

    def _after_apply(self, record: StepRecord, child: ProgramRecord | None) -> None:
        self.steps_applied += 1
        status = record.status or (child.status if child is not None else None) or "skipped"
        self.status_counts[status] += 1
        if record.kind == "seed":
            self.seeds_applied += 1
        if child is not None and child.status == "correct":
            self._note_correct(child)
            self._note_figure(record, child)
            speedup = child.metrics.get("score", 0.0)
            reliable = not child.metrics.get("unreliable")
            if reliable and (self.best_speedup is None or speedup > self.best_speedup):
                self.best_speedup, self.best_program_id = speedup, child.id
                self._write_best("the run goes on")
        if status == LLM_ERROR:
            self.llm_failures_in_a_row += 1
        else:
            self.llm_failures_in_a_row = 0
        if record.kind == "step":
            self.part_proposals += 1
            if status == LLM_ERROR:
                self.part_llm_errors += 1
                self._last_llm_error = record.proposal_error or ""
        self._remember(record, child)
        if self.progress is not None:
            self.progress(self.snapshot())

    def _note_figure(self, record: StepRecord, child: ProgramRecord) -> None:
        """The program's per-step figure, from its feedback (the speedup's
        CI and verdict, as the whole result has them)."""
        if child.id is not None:
            metrics = child.metrics
            self._figures[child.id] = step_figure(
                record.step, child.id, child.feedback, metrics.get("speedup", metrics.get("score"))
            )

    def best(self) -> BestFigure:
        """The run's one best number (evolve/best.py)."""
        per_step = self._figures.get(self.best_program_id) if self.best_program_id is not None else None
        if per_step is None and self.best_program_id is not None:
            per_step = BestFigure(speedup=self.best_speedup, program_id=self.best_program_id)
        return best_figure(self.best_confirmation, per_step)

    def _write_best(self, note: str = "") -> None:
        """``best_program.py``: the best program under a header with its figure."""
        entry = self._correct.get(self.best_program_id) if self.best_program_id is not None else None
        if entry is None:
            return
        figure = self.best()
        if note and not figure.confirmed:
            figure.note = note
        self.run_dir.write_best(figure.header() + entry[1])

    def _remember(self, record: StepRecord, child: ProgramRecord | None) -> None:
        """Keep a step for later prompts' history; a failed LLM request is not
        the model's attempt, so prompts never see it."""
        if record.status != LLM_ERROR:
            self.history.append(history_entry(record, child))

    def _engine_stop_reason(self) -> str | None:
        """Target score and patience are the engine's (engine.target_score, engine.patience)."""
        return self.engine.should_stop()

    def _make_program(self, child: ProgramRecord, program_id: int | None = None) -> Any:
        """The engine's Program for ``child`` (its island left to the engine when -1)."""
        data = child.to_child()
        if program_id is not None:
            data["id"] = program_id
        if data["island"] < 0:
            del data["island"]
        return Program.from_dict(data)

    # ------------------------------------------------------------ checkpoint
    def checkpoint(self) -> None:
        """Save the engine and the loop counters as one new checkpoint folder,
        then point ``LATEST`` at it; older folders are pruned afterwards, so a
        crash at any point leaves a complete checkpoint to resume from."""
        root = self.run_dir.checkpoint_dir
        root.mkdir(parents=True, exist_ok=True)
        name = f"step-{self.steps_applied:06d}"
        target = root / name
        if target.exists():
            shutil.rmtree(target)
        self.engine.save(str(target / "engine"))
        atomic_write_text(target / "run_state.json", json.dumps(self.state(), indent=2))
        atomic_write_text(root / "LATEST", name + "\n")
        # Answers of applied steps are in the trajectory: the log keeps only
        # those of requests still open, so it stays small.
        self.run_dir.keep_proposals({int(r.id) for r in self.engine.pending_requests()})
        keep = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-"))
        for old in keep[:-CHECKPOINT_KEEP]:
            if old.name != name:
                shutil.rmtree(old, ignore_errors=True)

    def state(self) -> dict[str, Any]:
        return {
            "steps_applied": self.steps_applied,
            "asks_issued": self.asks_issued,
            "best_speedup": self.best_speedup,
            "best_program_id": self.best_program_id,
            "status_counts": dict(self.status_counts),
            "llm_failures_in_a_row": self.llm_failures_in_a_row,
            "wall_time_s": self._elapsed(),
            "saved_at": time.time(),
            "parts": self.parts,
        }

    def _elapsed(self) -> float:
        return self._wall_before + time.monotonic() - self._started

    def restore(self, state: dict[str, Any], trajectory: list[StepRecord]) -> None:
        """Counters from a checkpoint, then the steps recorded after it are
        queued for replay (keyed by request id)."""
        self.steps_applied = int(state["steps_applied"])
        self.asks_issued = int(state["asks_issued"])
        self.best_speedup = state.get("best_speedup")
        self.best_program_id = state.get("best_program_id")
        self.status_counts = collections.Counter(state.get("status_counts", {}))
        self.llm_failures_in_a_row = int(state.get("llm_failures_in_a_row", 0))
        self.parts = int(state.get("parts", 1)) + 1
        # The killed part ran on after its checkpoint until its last record.
        after = [
            float(r.time)
            for r in trajectory
            if _applied_at(r) >= self.steps_applied and isinstance(r.time, (int, float))
        ]
        saved_at = float(state.get("saved_at") or 0.0)
        self._wall_before = float(state.get("wall_time_s", 0.0)) + max(0.0, max(after, default=saved_at) - saved_at)
        if self.usage_meter is not None:
            # Spend is rebuilt from the recorded steps, not from the meter's
            # snapshot: the snapshot also holds answers that were in flight
            # and are asked again after the resume.
            self.usage_meter.load_totals({})
        for record in trajectory:
            if _applied_at(record) < self.steps_applied:
                self._remember(record, record.child)
                self.seeds_applied += record.kind == "seed"
                child = record.child
                if child is not None and child.status == "correct":
                    self._note_correct(child)
                    self._note_figure(record, child)
            elif record.kind == "step":
                self._replay[int(record.request_id)] = record
            self._charge(record.model, record.usage, record.latency_s)
        recorded = {int(r.request_id) for r in trajectory if r.kind == "step"}
        self._proposed = {
            int(r["request_id"]): r for r in self.run_dir.read_proposals() if int(r["request_id"]) not in recorded
        }

    def _charge(self, model: str | None, usage: dict[str, Any] | None, latency_s: float | None) -> None:
        """Count the tokens of an answer that did not go through the client now."""
        if self.usage_meter is not None and model and usage:
            self.usage_meter.record(model, Usage.from_dict(usage), latency_s=float(latency_s or 0.0))

    # ---------------------------------------------------------------- finish
    def snapshot(self) -> dict[str, Any]:
        usage = self.usage_meter.summary() if self.usage_meter is not None else {}
        return {
            "steps": self.steps_applied,
            "asks": self.asks_issued,
            "iterations": self.config.iterations,
            "proposal_steps": self.steps_applied - self.seeds_applied,
            "best_speedup": self.best_speedup,
            "status_counts": dict(self.status_counts),
            "usage": usage,
            "best_unreliable": max((s for s, _src, ok in self._correct.values() if not ok), default=None),
        }

    def finish(self) -> RunSummary:
        best = self.best()
        self._write_best()
        summary = RunSummary(
            run_dir=str(self.run_dir.path),
            task_id=str(getattr(self.task, "id", "")),
            steps=self.steps_applied,
            stop_reason=self._stop_reason or "iterations",
            best_speedup=self.best_speedup,
            best_program_id=self.best_program_id,
            correct_steps=self.status_counts.get("correct", 0),
            status_counts=dict(self.status_counts),
            usage=self.usage_meter.summary() if self.usage_meter is not None else {},
            wall_time_s=self._elapsed(),
            archive=dict(self.engine.stats()),
            best_confirmation=self.best_confirmation,
            stop_detail=self._stop_detail,
            parts=self.parts,
            best=best.to_dict(),
            proposal_steps=self.steps_applied - self.seeds_applied,
        )
        self.run_dir.write_summary(summary.to_dict())
        return summary


def history_entry(record: StepRecord, child: ProgramRecord | dict[str, Any] | None) -> dict[str, Any]:
    """A step as the prompt's history shows it (the full record stays in the
    trajectory): ids, status, metrics and a short outcome."""
    feedback = ProgramRecord.of(child).feedback if child is not None else Feedback()
    compact = Feedback(
        category=feedback.category,
        compiled=feedback.compiled,
        correct=feedback.correct,
        hacked=feedback.hacked,
        hack_reasons=feedback.hack_reasons,
        edit_error=feedback.edit_error,
        error=clip(feedback.error, 400, keep="tail"),
    ).to_dict()
    return {
        "id": record.child_id,
        "step": record.step,
        "iteration": record.iteration,
        "island": record.island,
        "parent_id": record.parent_id,
        "status": record.status,
        "metrics": record.metrics or {},
        "feedback": compact,
    }


def _applied_at(record: StepRecord) -> int:
    """The record's place in the applied order (-1 when it has none)."""
    return int(record.step) if record.step is not None else -1


def latest_checkpoint(run_dir: RunDir) -> Path | None:
    pointer = run_dir.checkpoint_dir / "LATEST"
    if not pointer.exists():
        return None
    target = run_dir.checkpoint_dir / pointer.read_text().strip()
    return target if target.is_dir() else None


def _reference_ran(result: Any) -> bool:
    """Whether the evaluation ran the task's reference: a correctness trial
    counts only once the reference's output for it was computed."""
    return int((getattr(result, "correctness", None) or {}).get("trials") or 0) > 0


def one_line(text: str) -> str:
    """``text`` on one line (an error inside a one-line CLI message)."""
    return " ".join(str(text).split())


def _stop_reason_for(exc: BaseException) -> str | None:
    """Exceptions from a proposer that end the run cleanly (with a checkpoint)."""
    if isinstance(exc, BudgetExceeded):
        return "budget"
    if isinstance(exc, LLMError) and exc.fatal:
        return f"llm-{exc.kind}"  # llm-auth, llm-quota, llm-not-found
    if isinstance(exc, ProposerExhausted):
        return "replay-exhausted"
    return None


def _to_dict(value: Any) -> Any:
    if value is None:
        return None
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    return value

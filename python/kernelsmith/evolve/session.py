"""Assembles a run from a task and a config: engine, proposer, evaluator,
prompt builder and run directory; also resumes a stopped run."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import tempfile
from pathlib import Path
from typing import Any, Callable

from ..config import ConfigError
from ..evaluator import phases
from ..hardware import HardwareInfo
from ..trajectory import EvalStore, StepRecord
from .config import EvolveConfig, load_evolve_config
from .loop import Evolution, RunSummary, latest_checkpoint, one_line
from .rundir import RunDir, RunDirError, RunExistsError, iter_trajectory
from ..proposers import MutationProposer, ReplayProposer, LLMProposer
from ..llm import BudgetExceeded, build_client
from ..engine import Engine, EngineConfig
from ..prompts import PromptBuilder
from ..task import Task, TaskError
from ..inplace import load_inplace, is_inplace, InplaceEvaluator, write_task_copy, TEMPLATE_DIR, finish_run
from ..evaluator import make_evaluator
from ..evaluator.probes import warning
from ..kernelbenchx import is_task_file as is_kernelbenchx, write_task_dir

log = logging.getLogger("kernelsmith.evolve")

#: what a run says while it starts, before its first step (told to
#: evaluator/phases.py's listeners: the CLI shows each at once)
STARTING_POOL = "starting the evaluation pool"
EVALUATING_SEED = "evaluating the seed"

HISTORY_PER_PROMPT = 16


def reference_as_seed(reference_source: str) -> str:
    """The reference module renamed to ``ModelNew``, inside an EVOLVE block:
    the starting point of a translation step when a task has no seed."""
    body = re.sub(r"\bclass\s+Model\s*\(", "class ModelNew(", reference_source, count=1)
    return "# EVOLVE-BLOCK-START\n" + body.rstrip("\n") + "\n# EVOLVE-BLOCK-END\n"


def make_prompt_fn(
    builder: Any, engine: Any
) -> Callable[[Any, Evolution], tuple[list[dict[str, str]], dict[str, Any]]]:
    """Prompt of a request: its parent and inspirations, the island's recent
    attempts and its top programs (all as applied before the request began)."""

    def build(request: Any, evolution: Evolution) -> tuple[list[dict[str, str]], dict[str, Any]]:
        island = int(request.island)
        history = [h for h in evolution.history if h.get("island") == island][-HISTORY_PER_PROMPT:]
        top = [p for p in engine.elites(4, island) if p.id != request.parent.id]
        prompt = builder.build(request, history=history, top_programs=top)
        return prompt.messages, prompt.meta

    return build


def make_proposer(config: EvolveConfig, engine: Any, run_seed: int) -> tuple[Any, Any]:
    """(proposer, usage meter or None) for ``config.model``."""
    kind, _, arg = config.model.partition(":")
    if kind == "mutate":
        return MutationProposer(seed=run_seed, seen=engine.seen), None
    if kind == "replay":
        if not arg:
            raise ConfigError("model 'replay' needs a run directory: replay:RUN_DIR")
        try:
            return ReplayProposer(arg), None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"model {config.model}: {exc}") from exc

    try:
        client = build_client(config.llm_config())
    except (ValueError, ImportError) as exc:  # no key, bad spec, SDK missing: before any work starts
        raise ConfigError(str(exc)) from exc
    return LLMProposer(client, propagate=(BudgetExceeded,)), getattr(client, "meter", None)


def _check_start(proposer: Any, task: Any, config: EvolveConfig) -> None:
    """A proposer that cannot change the run's first program (the offline
    mutator with no ``# tune:`` value to move) would fail every step: bad
    input, refused before the run directory is written."""
    check = getattr(proposer, "cannot_start_from", None)
    if check is None:
        return
    start = task.seed_source or reference_as_seed(task.reference_source)
    problem = check(start)
    if problem:
        what = "its seed program" if task.seed_source else "the task has no seed program (seed.py), and its reference"
        raise ConfigError(
            f"model {config.model}: {what} cannot be tuned: {problem}; or let a model write "
            "the kernels: --model openai:NAME (see docs/evolve.md)"
        )


def _measured_hardware(records: list[StepRecord], evaluations: EvalStore) -> HardwareInfo | None:
    """The hardware the seed's evaluation ran on (read through its key)."""
    for record in records:
        evaluation = evaluations.of(record) if record.kind == "seed" else None
        hardware = evaluation.hardware if evaluation is not None else None
        if hardware:
            return HardwareInfo.from_dict(hardware)
    return None


def _config_snapshot(config: EvolveConfig, task: Any, task_path: str) -> dict[str, Any]:
    return {"task": {"path": str(task_path), "id": task.id, "name": task.name}, "config": dataclasses.asdict(config)}


def _task_files(task_path: Path) -> list[Path]:
    if task_path.is_dir():
        return [p for p in (task_path / n for n in ("reference.py", "seed.py", "task.yaml")) if p.exists()]
    return [task_path]


def load_checkpoint(run_dir: RunDir) -> tuple[Any, dict[str, Any], Path] | None:
    """(engine, loop state, folder) of the newest checkpoint that reads back.

    ``LATEST`` first, then every other ``step-*`` folder, newest first: a
    checkpoint damaged on disk costs the steps since the one before it, and
    those are replayed from the trajectory. None when the run has no
    checkpoint at all; :class:`RunDirError` when it has some and none reads.
    """
    root = run_dir.checkpoint_dir
    candidates: list[Path] = []
    latest = latest_checkpoint(run_dir)
    if latest is not None:
        candidates.append(latest)
    if root.is_dir():
        candidates += sorted(
            (p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-") and p != latest), reverse=True
        )
    problems = []
    for folder in candidates:
        try:
            state = json.loads((folder / "run_state.json").read_text())
            engine = Engine.load(folder / "engine")
        except Exception as exc:  # noqa: BLE001 -- any unreadable checkpoint: try the one before
            problems.append(f"{folder.name}: {type(exc).__name__}: {exc}")
            log.warning("%s: checkpoint %s is unreadable (%s); trying an older one", run_dir.path, folder.name, exc)
            continue
        return engine, state, folder
    if problems:
        raise RunDirError(
            f"{run_dir.path}: no checkpoint reads back ({'; '.join(problems)}); "
            "the run cannot be resumed, start a new one with --out"
        )
    return None


async def evolve(
    task_path: str | Path | None,
    config: EvolveConfig | None = None,
    out: str | Path | None = None,
    *,
    resume: str | Path | None = None,
    extend: int | None = None,
    evaluator: Any = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    executor: str = "local",
    refuse_futile: bool = False,
    on_interrupt: Callable[[RunSummary], None] | None = None,
) -> RunSummary:
    """Run (or resume) an evolution; returns its summary.

    Fresh run: ``task_path`` and ``out`` (a new directory). Resume: ``resume``
    is the run directory; task and config come from its snapshot. A config
    passed in overrides only ``iterations`` (the run's total); ``extend=N``
    instead asks for N proposal steps more than the trajectory holds (what
    ``--resume DIR --iterations N`` means). Either is written back to the
    snapshot, so a later plain resume keeps the new total.
    ``executor`` ("local" or "ray") picks the evaluator built when none is
    passed in: local worker processes, or one Ray task per candidate.
    ``refuse_futile``: a fresh run whose proposer cannot change its first
    program (the offline mutator, no ``# tune:`` value) is refused as bad
    input (:class:`ConfigError`) instead of running steps that all fail and
    stopping as ``llm-all-failed`` (the CLI refuses; a benchmark sweep keeps
    the failed run as that task's result).
    ``on_interrupt(summary)``: called as soon as a run stopped by Ctrl-C
    has saved its state, before the evaluator is closed, so the CLI can say
    at once what was kept. A run stopped by Ctrl-C (or cancelled) kills the
    evaluations in flight of an evaluator it made (``Evaluator.cancel``)
    instead of waiting for them: their steps are asked again on resume.

    Everything that can be checked (task, config, model and its key,
    backend) is checked before a fresh run writes its directory, and a run
    that fails before its first checkpoint removes what it wrote, so a
    failed start never blocks a re-run with the same ``out``. A task whose
    reference fails is a failed start (:class:`~kernelsmith.task.TaskError`,
    its directory removed) whether the seed's evaluation shows it or, with
    no seed.py, the first candidates' do.
    """
    snapshot: dict[str, Any] = {}
    if resume is not None:
        run_dir = RunDir(resume)
        if not run_dir.exists():
            what = "does not exist" if not run_dir.path.exists() else "is not a run directory (no config.yaml)"
            raise RunDirError(f"--resume {resume}: {what}; start a run with: kernelsmith evolve TASK --out DIR")
        snapshot = run_dir.load_config()
        saved = load_evolve_config(**snapshot["config"])
        if config is not None:
            saved = dataclasses.replace(saved, iterations=config.iterations)
        config = saved
        # The run's own copy of the task, so a moved or edited original
        # cannot change what a resumed run evaluates.
        copy = run_dir.path / "task"
        if (copy / "inplace.yaml").exists():  # an in-place task (docs/in_place.md)
            task = load_inplace(copy / "inplace.yaml")
        else:
            if not (copy / "reference.py").exists():
                copy = copy / Path(snapshot["task"]["path"]).name
            # The copy's folder is named "task": keep the original name, which
            # prompts show, so a resumed run sends the same prompts.
            task = Task.load(
                copy,
                backend=config.backend,
                trials=config.trials,
                name=snapshot["task"]["name"],
                policy=config.policy,
                min_coverage=config.min_coverage,
            )
    else:
        if task_path is None or out is None:
            raise ValueError("a fresh run needs a task path and an output directory")
        config = config or EvolveConfig()

        task = (
            load_inplace(task_path)
            if is_inplace(task_path)
            else Task.load(
                task_path,
                backend=config.backend,
                trials=config.trials,
                policy=config.policy,
                min_coverage=config.min_coverage,
            )
        )
        run_dir = RunDir(out)
        if run_dir.exists() and run_dir.started():
            raise RunExistsError(f"{out} already holds a run; continue it with --resume {out}, or choose another --out")

    loaded = load_checkpoint(run_dir) if resume is not None else None
    records = run_dir.read_steps() if loaded is not None else []
    if extend is not None:
        if extend < 0:
            raise ConfigError(f"iterations must be >= 0, got {extend}")
        done = sum(1 for r in records if r.kind == "step")
        config = dataclasses.replace(config, iterations=done + extend)
    if resume is not None and config.iterations != snapshot["config"].get("iterations"):
        run_dir.write_config({**snapshot, "config": dataclasses.asdict(config)})
    if loaded is not None:
        engine, state, _ = loaded
        if (
            state.get("asks_issued", 0) >= config.iterations
            and not engine.pending_requests()
            and not any(r.step is not None and r.step >= state.get("steps_applied", 0) for r in records)
        ):
            log.warning(
                "%s: the run has already made its %d steps; add more with --resume %s --iterations N",
                run_dir.path,
                config.iterations,
                run_dir.path,
            )
    else:
        engine = Engine(EngineConfig.from_dict(config.engine), seed=config.seed)

    own_evaluator = evaluator is None
    if own_evaluator:
        evaluator = make_evaluator(executor, config.eval_concurrency)
    inplace = getattr(task, "spec", None) is not None
    if inplace and not hasattr(evaluator, "inner"):
        evaluator = InplaceEvaluator(evaluator)
    proposer = None
    created = False
    stopped_by_user = False  # Ctrl-C: the evaluations in flight are killed, not waited for
    try:
        try:
            backend = evaluator.backend_for(task)
        except ValueError as exc:
            raise ConfigError(f"backend: {exc}") from exc
        missing = backend.unavailable_reason() if executor != "ray" else None  # Ray: the nodes' hardware
        if missing:
            raise ConfigError(f"backend {backend.name}: {missing}")
        # bad input (a model that cannot run, a mutator with nothing to
        # tune) is said before anything starts: one message, no progress line
        proposer, meter = make_proposer(config, engine, config.seed)
        if resume is None and refuse_futile:
            _check_start(proposer, task, config)
        workers = getattr(getattr(evaluator, "inner", evaluator), "workers", None)
        phases.report(f"{STARTING_POOL} (backend {backend.name}" + (f", {workers} workers)" if workers else ")"))
        if not inplace and hasattr(evaluator, "check_task"):  # a degenerate task said at its start (probes.py)
            degenerate = warning(await asyncio.to_thread(evaluator.check_task, task))
            if degenerate:
                log.warning("%s: %s (kernelsmith task check %s)", task.name, degenerate, task_path or task.path)
        if resume is None:
            # a KernelBench-X file needs its suite around it (shapes, contract):
            # the run keeps the task it read, as a task directory
            kbx = not inplace and is_kernelbenchx(Path(task_path))
            with tempfile.TemporaryDirectory() as made:
                files = (
                    _task_files(write_task_dir(task, made)) if kbx else [] if inplace else _task_files(Path(task_path))
                )
                run_dir.create(_config_snapshot(config, task, str(task_path)), files)
            if inplace:
                write_task_copy(run_dir.path, task)
            created = True
        evolution = Evolution(
            task=task,
            config=config,
            engine=engine,
            proposer=proposer,
            evaluator=evaluator,
            prompt_builder=None,
            run_dir=run_dir,
            backend=backend,
            usage_meter=meter,
            progress=progress,
        )
        if loaded is not None:
            evolution.restore(loaded[1], records)
        else:
            if resume is not None:  # stopped before the first checkpoint: start over
                run_dir.trajectory_path.write_text("")
            if task.seed_source:
                with phases.step(EVALUATING_SEED):  # the worker's stages shown inside it
                    await evolution.seed([("seed", task.seed_source)])
            else:
                evolution.seed_reference(reference_as_seed(task.reference_source))
            records = run_dir.read_steps()
        created = False  # checkpointed: from here on the run directory is worth keeping
        # Hardware as a worker saw it (on its GPU, or a Ray node) when the seed
        # was evaluated; asking the backend here would initialize the device
        # in the driver, which only needs it for the prompt.
        hardware = _measured_hardware(records, run_dir.evaluations()) or backend.hardware_info()
        prompt_config = config.prompt_config()
        if inplace and prompt_config.template_dir is None:
            prompt_config = dataclasses.replace(prompt_config, template_dir=str(TEMPLATE_DIR))
        builder = PromptBuilder(
            prompt_config,
            reference_source=task.spec.prompt_context() if inplace else task.reference_source,
            backend=backend.name,
            backend_tips=backend.prompt_tips(hardware),
            hardware=hardware,
            task_name=task.name,
        )
        evolution.prompt_builder = make_prompt_fn(builder, engine)
        summary = await evolution.run()
        stopped_by_user = summary.stop_reason == "interrupted"
        if on_interrupt is not None and stopped_by_user:
            on_interrupt(summary)
        if (
            resume is None
            and not task.seed_source
            and summary.stop_reason == "harness-error"
            and not evolution.reference_ran
        ):
            # With no seed.py the reference is the seed, not evaluated, so the
            # first candidates are the first to run it: a reference that fails
            # there is the same failed start as a seed that cannot be
            # evaluated. What this start wrote goes (its few steps were judged
            # against a reference that does not run), so the same command
            # works again once the task is fixed.
            run_dir.remove_run_files()
            raise TaskError(
                f"{task.name}: the task's reference could not be run (no seed.py, so the first "
                "candidate ran it): "
                f"{one_line(summary.stop_detail)} Nothing was kept in {run_dir.path}: run the same "
                "command again once the task is fixed"
            )
        if inplace:  # best.patch and summary.md (docs/in_place.md)
            await asyncio.to_thread(
                finish_run, run_dir.path, task, evaluator, summary.to_dict(), getattr(evaluator, "isolation", "auto")
            )
        return summary
    except BaseException as exc:
        # A failed start leaves nothing behind, so the same command works
        # again; a start the user interrupted (Ctrl-C during the seed's
        # evaluation) keeps its directory, which --resume starts over from
        # (the CLI says so) and which does not block a re-run either.
        interrupted = stopped_by_user = isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError))
        if created and not run_dir.started() and not interrupted:
            run_dir.remove_run_files()
        raise
    finally:
        if proposer is not None:
            await proposer.aclose()
        if own_evaluator:
            # Ctrl-C means now: the steps in flight are asked again on
            # resume, so their evaluations are killed (the pool's zygotes and
            # their children) instead of waited for; the state is saved
            cancel = getattr(getattr(evaluator, "inner", evaluator), "cancel", None)
            if stopped_by_user and cancel is not None:
                cancel()
            evaluator.close()


def evolve_sync(*args: Any, **kwargs: Any) -> RunSummary:
    """:func:`evolve` for scripts and notebooks. Inside a running event loop
    (Jupyter) the run gets its own loop on a helper thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(evolve(*args, **kwargs))
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ks-evolve") as pool:
        return pool.submit(asyncio.run, evolve(*args, **kwargs)).result()


def read_trajectory(run_dir: str | Path) -> list[dict[str, Any]]:
    """The trajectory's records as the JSON on disk (plain dicts), for a look
    from a notebook or a script; code reads them typed, through
    :func:`kernelsmith.trajectory.read_step_records` (:class:`StepRecord`)."""
    return list(iter_trajectory(Path(run_dir) / "trajectory.jsonl"))

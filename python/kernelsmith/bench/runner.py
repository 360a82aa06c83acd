"""Running a suite: the unified protocol (kernelsmith.evolve) on every task,
one run directory per task, resumable, then metrics, tables and plots.

Output folder::

    OUT/bench.json                 suite, label, config and the task list of this bench
    OUT/runs/<key>/                one evolve run directory per task (key: level1/19_ReLU)
    OUT/tasks/<key>/               task directories built for plain files given a --seeds program
    OUT/reference_timings.json     reference runtime per task id and hardware (see ReferenceCache)
    OUT/results.json               per-task results (TaskResult.to_dict)
    OUT/metrics.{md,csv,json}      metrics per level and overall
    OUT/tasks.{md,csv}             per-task table
    OUT/plots/*.png                best score against step, per-task curves, speedup distribution
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..evolve.config import EvolveConfig
from ..evolve.rundir import atomic_write_text
from .collect import collect_run
from .metrics import TaskResult, metrics_by_category, metrics_by_level
from .suite import SuiteTask, discover, seed_for
from .. import kernelbenchx
from ..task_shapes import HALF, with_half_shape
from ..evolve.session import evolve
from ..llm.redact import redact_obj
from ..evaluator import make_evaluator
from ..evolve.best import BestFigure
from . import tables, plots as figures


class ReferenceCache:
    """Reference runtimes keyed by task id and hardware name.

    The evaluator times the reference next to every candidate (paired timing
    under the same conditions is what makes a speedup honest), so the cache
    does not skip those measurements; it keeps, across benches and re-runs,
    the reference runtime of each task on each device: the per-task tables
    read it when a run has no timed candidate of its own, and a re-run that
    skips finished tasks does not need their trajectories re-read for it.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.entries: dict[str, dict[str, Any]] = {}
        if self.path.exists():
            self.entries = json.loads(self.path.read_text())

    @staticmethod
    def key(task_id: str, hardware: str) -> str:
        return f"{task_id}@{hardware}"

    def get(self, task_id: str, hardware: str) -> Optional[float]:
        entry = self.entries.get(self.key(task_id, hardware))
        return None if entry is None else float(entry["ref_runtime_ms"])

    def lookup_task(self, task_id: str) -> Optional[tuple[str, float]]:
        """(hardware, ms) of any entry for ``task_id`` (when a run has no hardware recorded)."""
        for entry in self.entries.values():
            if entry.get("task_id") == task_id:
                return entry["hardware"], float(entry["ref_runtime_ms"])
        return None

    def record(self, task_id: str, hardware: str, run_dir: str, ms: float, task: str = "") -> None:
        """Add one run's median reference runtime; the entry keeps the median over runs."""
        entry = self.entries.setdefault(
            self.key(task_id, hardware),
            {
                "task_id": task_id,
                "hardware": hardware,
                "task": task,
                "runs": {},
            },
        )
        entry["runs"][run_dir] = ms
        entry["ref_runtime_ms"] = statistics.median(entry["runs"].values())
        entry["updated"] = time.time()

    def save(self) -> None:
        atomic_write_text(self.path, json.dumps(self.entries, indent=2, sort_keys=True))


@dataclass
class BenchReport:
    out: str
    label: str
    results: list[TaskResult]
    metrics: dict[str, dict[str, Any]]
    files: dict[str, str] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)  # keys evolved (fresh or resumed) by this call
    skipped: list[str] = field(default_factory=list)  # keys already finished
    interrupted: bool = False

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        return data


def _run_state(run_dir: Path, iterations: int) -> str:
    """'new', 'finished' or 'resume' for a task's run directory."""
    if not (run_dir / "config.yaml").exists():
        return "new"
    summary_path = run_dir / "summary.json"
    if not summary_path.exists():
        return "resume"
    summary = json.loads(summary_path.read_text())
    if summary.get("stop_reason") == "interrupted":
        return "resume"
    if summary.get("stop_reason") == "iterations":
        import yaml

        recorded = (yaml.safe_load((run_dir / "config.yaml").read_text()) or {}).get("config", {}).get("iterations", 0)
        if int(recorded) < iterations:
            return "resume"  # asked for more iterations than the run had: extend it
    return "finished"


def _task_source(task: SuiteTask, out: Path, seeds_dir: str | Path | None, timing_shapes: str = "auto") -> Path:
    """The path evolve loads: the task itself, or for a plain file with a
    seed program or a second timing shape (``timing_shapes="auto"``:
    :mod:`kernelsmith.task_shapes`, where the module allows one), a task
    directory made from them."""
    seed = seed_for(task, seeds_dir)
    half = None
    if (
        timing_shapes == "auto"
        and task.path.is_file()
        and task.path.suffix == ".py"
        and not kernelbenchx.is_task_file(task.path)
    ):
        half = with_half_shape(task.path.read_text())
    if seed is None and half is None:
        return task.path
    folder = out / "tasks" / task.key
    folder.mkdir(parents=True, exist_ok=True)
    if half is None:
        shutil.copy2(task.path, folder / "reference.py")
    else:
        import yaml

        atomic_write_text(folder / "reference.py", half)
        atomic_write_text(
            folder / "task.yaml",
            yaml.safe_dump({"name": task.path.stem, "timing_shapes": ["get_inputs", HALF]}, sort_keys=False),
        )
    if seed is not None:
        shutil.copy2(seed, folder / "seed.py")
    return folder


async def run_suite_async(
    suite_dir: str | Path,
    out: str | Path,
    config: EvolveConfig,
    *,
    levels: Sequence[int] | None = None,
    label: Optional[str] = None,
    seeds_dir: str | Path | None = None,
    evaluator: Any = None,
    executor: str = "local",
    ray_address: Optional[str] = None,
    reference_cache: str | Path | None = None,
    plots: bool = True,
    log: Callable[[str], None] | None = None,
    timing_shapes: str = "auto",
) -> BenchReport:
    """Evolve every task of ``suite_dir`` into ``out/runs/<key>`` (skipping
    finished ones, resuming unfinished ones), then write the metrics.
    ``timing_shapes``: ``auto`` gives a plain KernelBench file a second
    timing shape where the module allows one (:mod:`kernelsmith.task_shapes`),
    ``one`` times ``get_inputs`` alone."""
    if timing_shapes not in ("auto", "one"):
        raise ValueError(f"timing_shapes must be 'auto' or 'one', got {timing_shapes!r}")

    log = log or (lambda message: print(message, file=sys.stderr, flush=True))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tasks = discover(suite_dir, levels)
    label = label or config.model
    unreadable = _unreadable(tasks, out, log)
    tasks = [t for t in tasks if t.key not in unreadable]
    manifest = {
        "suite": str(Path(suite_dir).resolve()),
        "label": label,
        "levels": list(levels) if levels else None,
        "timing_shapes": timing_shapes,
        "config": dataclasses.asdict(config),
        "tasks": [t.to_dict() for t in tasks],
    }

    atomic_write_text(out / "bench.json", json.dumps(redact_obj(manifest), indent=2))
    own = evaluator is None
    if own:
        evaluator = make_evaluator(executor, config.eval_concurrency, ray_address)
    ran, skipped, interrupted = [], [], False
    try:
        for index, task in enumerate(tasks, 1):
            run_dir = out / "runs" / task.key
            state = _run_state(run_dir, config.iterations)
            if state == "finished":
                skipped.append(task.key)
                log(f"[{index}/{len(tasks)}] {task.key}: finished earlier, skipped")
                continue
            started = time.monotonic()
            try:
                if state == "new":
                    summary = await evolve(
                        _task_source(task, out, seeds_dir, timing_shapes), config, run_dir, evaluator=evaluator
                    )
                else:
                    summary = await evolve(
                        None, EvolveConfig(iterations=config.iterations), resume=run_dir, evaluator=evaluator
                    )
            except Exception as exc:  # noqa: BLE001 - one broken task must not stop the suite
                log(f"[{index}/{len(tasks)}] {task.key}: FAILED: {type(exc).__name__}: {exc}")
                _write_failure(run_dir, exc)
                continue
            ran.append(task.key)

            figure = BestFigure.from_dict(summary.best)
            best = (
                f"{figure.figure()} ({'confirmed' if figure.confirmed else 'per-step'})"
                if summary.best_speedup is not None
                else "none reliably timed"
                if summary.correct_steps
                else "no correct program"
            )
            log(
                f"[{index}/{len(tasks)}] {task.key}: {'resumed, ' if state == 'resume' else ''}"
                f"{summary.proposal_steps} steps after the seed, best {best} ({time.monotonic() - started:.0f} s)"
            )
            if summary.stop_reason == "interrupted":
                interrupted = True
                break
    finally:
        if own:
            evaluator.close()
    report = summarize(out, tasks=tasks, label=label, reference_cache=reference_cache, plots=plots)
    report.ran, report.skipped, report.interrupted = ran, skipped, interrupted
    return report


def _unreadable(tasks: Sequence[SuiteTask], out: Path, log: Callable[[str], None]) -> dict[str, str]:
    """KernelBench-X tasks that cannot be read, each with the reason (also
    in OUT/unreadable.md and .json); they are not run."""
    found: dict[str, str] = {}
    for task in tasks:
        if task.category is None:
            continue
        try:
            kernelbenchx.read_task(task.path)
        except kernelbenchx.UnreadableTask as exc:
            found[task.key] = str(exc).split(": ", 1)[-1]
    if found:
        lines = ["| task | why it is not read |", "| --- | --- |"]
        lines += [f"| {k} | {v.replace('|', '/')} |" for k, v in found.items()]
        atomic_write_text(out / "unreadable.md", "\n".join(lines) + "\n")
        atomic_write_text(out / "unreadable.json", json.dumps(found, indent=2))
        for key, why in found.items():
            log(f"{key}: not read: {why}")
    return found


def run_suite(*args: Any, **kwargs: Any) -> BenchReport:
    """:func:`run_suite_async` for scripts and notebooks."""
    return asyncio.run(run_suite_async(*args, **kwargs))


def _write_failure(run_dir: Path, exc: BaseException) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "bench_error.txt", f"{type(exc).__name__}: {exc}\n")


def load_results(
    out: str | Path, tasks: Sequence[SuiteTask] | None = None, reference_cache: str | Path | None = None
) -> list[TaskResult]:
    """Per-task results of a bench folder, read from its run directories."""
    out = Path(out)
    if tasks is None:
        manifest = json.loads((out / "bench.json").read_text())
        tasks = [SuiteTask.from_dict(t) for t in manifest["tasks"]]
    cache = ReferenceCache(reference_cache or out / "reference_timings.json")
    results = []
    for task in tasks:
        run_dir = out / "runs" / task.key
        if (run_dir / "config.yaml").exists():
            result = collect_run(run_dir, key=task.key, level=task.level)
        else:
            error = run_dir / "bench_error.txt"
            result = TaskResult(
                key=task.key,
                level=task.level,
                run_dir=str(run_dir),
                stop_reason=("error: " + error.read_text().strip()) if error.exists() else "not started",
            )
        result.category = task.category
        if result.task_id:
            if result.ref_runtime_ms is not None and result.hardware:
                cache.record(result.task_id, result.hardware, str(run_dir.resolve()), result.ref_runtime_ms, task.key)
            elif result.ref_runtime_ms is None:
                hit = cache.get(result.task_id, result.hardware) if result.hardware else None
                if hit is None and not result.hardware:
                    found = cache.lookup_task(result.task_id)
                    if found:
                        result.hardware, hit = found
                result.ref_runtime_ms = hit
        results.append(result)
    cache.save()
    return results


def summarize(
    out: str | Path,
    *,
    tasks: Sequence[SuiteTask] | None = None,
    label: Optional[str] = None,
    reference_cache: str | Path | None = None,
    plots: bool = True,
) -> BenchReport:
    """Metrics, tables and plots of a bench folder (also after a partial run)."""
    out = Path(out)
    if label is None:
        label = json.loads((out / "bench.json").read_text()).get("label", out.name)
    results = load_results(out, tasks, reference_cache)
    by_level = metrics_by_level(results)
    by_category = metrics_by_category(results)
    files = {}

    def write(name: str, text: str) -> None:
        atomic_write_text(out / name, text)
        files[name] = str(out / name)

    write("results.json", json.dumps([r.to_dict() for r in results], indent=2))
    write(
        "metrics.json",
        json.dumps(
            {"label": label, "metrics": by_level, **({"by_category": by_category} if by_category else {})}, indent=2
        ),
    )
    write("metrics.md", tables.metrics_markdown(by_level))
    write("metrics.csv", tables.metrics_csv(by_level))
    if by_category:  # KernelBench-X: its 15 operator categories
        write("categories.md", tables.metrics_markdown(by_category, key="category"))
        write("categories.csv", tables.metrics_csv(by_category, key="category"))
    write("tasks.md", tables.tasks_markdown(results))
    write("tasks.csv", tables.tasks_csv(results))
    if plots and results:
        files["best_vs_step.png"] = str(figures.plot_best_vs_step({label: results}, out / "plots" / "best_vs_step.png"))
        files["task_curves.png"] = str(figures.plot_task_curves(results, out / "plots" / "task_curves.png"))
        files["speedup_distribution.png"] = str(
            figures.plot_speedup_distribution({label: results}, out / "plots" / "speedup_distribution.png")
        )
    return BenchReport(out=str(out), label=label, results=results, metrics=by_level, files=files)


def compare(bench_dirs: Sequence[str | Path], out: str | Path, labels: Sequence[str] | None = None) -> dict[str, str]:
    """Several bench folders (models or configurations) side by side: a
    comparison table and the best-score-against-step figure."""
    out = Path(out)
    configs: dict[str, list[TaskResult]] = {}
    for i, folder in enumerate(bench_dirs):
        folder = Path(folder)
        label = (
            labels[i]
            if labels and i < len(labels)
            else json.loads((folder / "bench.json").read_text()).get("label", folder.name)
        )
        if label in configs:
            label = f"{label} ({folder.name})"
        configs[label] = load_results(folder)
    markdown, csv_text = tables.comparison_tables({k: metrics_by_level(v) for k, v in configs.items()})
    atomic_write_text(out / "comparison.md", markdown)
    atomic_write_text(out / "comparison.csv", csv_text)
    return {
        "comparison.md": str(out / "comparison.md"),
        "comparison.csv": str(out / "comparison.csv"),
        "best_vs_step.png": str(figures.plot_best_vs_step(configs, out / "best_vs_step.png")),
        "speedup_distribution.png": str(figures.plot_speedup_distribution(configs, out / "speedup_distribution.png")),
    }

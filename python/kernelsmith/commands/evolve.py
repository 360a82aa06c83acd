"""kernelsmith evolve TASK: evolve faster kernels for a task."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from . import add_policy_arguments, UsageError
from ..cli import EXIT_FAILURE

if TYPE_CHECKING:
    from ..evolve.loop import RunSummary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "task", nargs="?", help="task directory (reference.py [+ seed.py, task.yaml]) or KernelBench file"
    )
    parser.add_argument("--backend", choices=None, help="backend (triton, opencl, ...); default: the task's")
    parser.add_argument(
        "--model",
        help="openai:NAME | anthropic:NAME | mutate | replay:RUN_DIR | llm (config's llm.models); default mutate",
    )
    parser.add_argument(
        "--iterations", type=int, help="proposal steps (default 40); with --resume: this many steps more"
    )
    parser.add_argument("--seed", type=int, help="random seed of the engine and proposers (default 0)")
    parser.add_argument("--trials", type=int, help="correctness trials per candidate (default: the task's)")

    add_policy_arguments(parser)
    parser.add_argument("--config", help="YAML config (see docs/evolve.md); flags override it")
    parser.add_argument("-o", "--out", help="new run directory (default runs/<task>-<time>)")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue a stopped run (nothing finished is redone)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON, no progress bar")
    parser.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="evaluate candidates in local worker processes or on a Ray cluster (RAY_ADDRESS)",
    )


class Progress:
    """The run's progress on stderr: steps (the seed is step 0), the best
    per-step speedup so far (each step timed against its own reference
    measurement; the run's confirmed best comes in the summary), tokens,
    elapsed time and an estimate of the time left.

    On a terminal a live bar (rich) with the rate in steps per minute and an
    ETA from ``--iterations``; elsewhere (a log, a pipe) a plain line per
    step, at most one every two seconds, in the format scripts parse."""

    def __init__(self, enabled: bool, before_first: Any = None) -> None:
        self.enabled = enabled
        self.before_first = before_first  # called once, before the first line (ends the seed's phase line)
        self.tty = sys.stderr.isatty()
        self.started = time.monotonic()
        self._last = 0.0
        self._first: tuple[int, float] | None = None  # (proposal steps, time) at this part's first line
        self._bar: Any = None  # the live bar on a terminal, made at the first step
        self._bar_task: Any = None
        self._ticker: Any = None  # the finalists' re-timing: its worker's stage every 10 s

    def __call__(self, snap: dict[str, Any]) -> None:
        if self.before_first is not None:
            self.before_first()
            self.before_first = None
        if not self.enabled:
            return
        now = time.monotonic()
        if snap.get("finalists"):
            # the steps are done; the re-timing that gives the run's best
            # figure can take minutes (a package that compiles in every
            # worker): said, not left silent
            self.close()
            self.enabled = True
            print(
                f"kernelsmith evolve: re-timing the {snap['finalists']} fastest correct program(s) head to head "
                f"for the run's best figure... ({now - self.started:.0f}s)",
                file=sys.stderr,
                flush=True,
            )
            # and what that re-timing's worker is doing, every 10 s without news
            self._ticker = StartLines(enabled=True)
            self._ticker.__enter__()
            self._ticker("re-timing the finalists")
            return
        done = snap["steps"]
        if not self.tty and now - self._last < 2.0 and snap["asks"] < snap["iterations"]:
            return
        self._last = now
        steps = int(snap.get("proposal_steps", done))
        if self._first is None:
            self._first = (steps, now)
        if self.tty:
            self._draw_bar(snap, steps)
            return
        width = 24
        frac = min(1.0, steps / max(1, snap["iterations"]))
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        line = f"[{bar}] {self._where(snap, steps)} | {self._figures(snap)} | {now - self.started:.0f}s" + self._eta(
            steps, snap["iterations"], now
        )
        print(line, file=sys.stderr, flush=True)

    @staticmethod
    def _where(snap: dict[str, Any], steps: int) -> str:
        running = max(0, snap["asks"] - steps)
        return (
            f"step {steps}/{snap['iterations']}"
            + (" (the seed)" if steps == 0 and not running else "")
            + (f" ({running} running)" if running else "")
        )

    @staticmethod
    def _figures(snap: dict[str, Any]) -> str:
        best = snap.get("best_speedup")
        usage = snap.get("usage") or {}
        tokens = usage.get("total_tokens") or (usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0))
        counts = snap.get("status_counts", {})
        best_text = f"{best:.3f}x" if best is not None else "-"
        if best is None and snap.get("best_unreliable") is not None:
            # every timing so far was under load: shown, marked, not yet a best
            best_text = f"{snap['best_unreliable']:.3f}x unreliable"
        failed = counts.get("llm-error", 0)
        return (
            f"best per-step {best_text} | correct {counts.get('correct', 0)}"
            + (f" | LLM errors {failed}" if failed else "")
            + f" | tokens {tokens}"
        )

    def _rate(self, steps: int, now: float) -> float | None:
        """Steps per second in this part of the run (a resumed run counts from its resume), once it has one."""
        assert self._first is not None
        first_steps, first_time = self._first
        if steps <= first_steps or now <= first_time:
            return None
        return (steps - first_steps) / (now - first_time)

    def _eta(self, steps: int, iterations: int, now: float) -> str:
        """`` | ETA 40s`` from this part's rate of steps, once it has one."""
        rate, left = self._rate(steps, now), iterations - steps
        if rate is None or left <= 0:
            return ""
        return f" | ETA {left / rate:.0f}s"

    def _draw_bar(self, snap: dict[str, Any], steps: int) -> None:
        if self._bar is None:
            self._bar = _live_bar(self)
            self._bar.start()
            self._bar_task = self._bar.add_task("", total=snap["iterations"], completed=steps)
        self._bar.update(
            self._bar_task,
            total=snap["iterations"],
            completed=steps,
            description=f"{self._where(snap, steps)} | {self._figures(snap)}",
        )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()  # the last state stays on screen, the cursor on a new line
            self._bar = None
        if self._ticker is not None:
            self._ticker.close()
            self._ticker = None
        self.enabled = False  # closed once: the line ended, nothing more to draw


def _live_bar(progress: Progress) -> Any:
    """A rich progress bar on stderr (stdout carries the summary): the bar,
    what the plain line says, the rate in steps/min and the time left, redrawn
    twice a second so elapsed time and ETA move between steps."""
    from rich.console import Console
    from rich.progress import BarColumn, ProgressColumn, TextColumn
    from rich.progress import Progress as RichProgress
    from rich.text import Text

    def clock(seconds: float) -> str:
        minutes, secs = divmod(int(seconds), 60)
        hours, minutes = divmod(minutes, 60)
        return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"

    class RateAndTime(ProgressColumn):
        def render(self, task: Any) -> Text:
            now = time.monotonic()
            rate = progress._rate(int(task.completed), now)
            left = (task.total or 0) - task.completed
            per_min = f"{rate * 60:.1f} steps/min" if rate else "- steps/min"
            eta = clock(left / rate) if rate and left > 0 else ("0:00" if left <= 0 else "-")
            return Text(f"| {per_min} | {clock(now - progress.started)} elapsed | ETA {eta}")

    return RichProgress(
        BarColumn(bar_width=24),
        TextColumn("{task.description}"),
        RateAndTime(),
        console=Console(file=sys.stderr),
        refresh_per_second=2,
        redirect_stdout=False,
    )


class StartLines:
    """Plain lines on stderr for a run's start when it is not a terminal
    (a log, a pipe): each stage of evolve's start (the pool, the seed) as it
    begins, with the seconds since the command started, and every
    ``every_s`` without one the stage it is in (the worker's own stage
    included: ``evaluating the seed: timing``)."""

    def __init__(self, enabled: bool, every_s: float = 10.0) -> None:
        import threading

        self.enabled = enabled
        self.every_s = every_s
        self.started = self._said = time.monotonic()
        self._stage = ""
        self._listening: Any = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="ks-start-lines", daemon=True)

    def __call__(self, stage: str) -> None:
        # lazy: keeps 'kernelsmith --help' light (evolve.session is not loaded to build the parser)
        from ..evolve.session import EVALUATING_SEED, STARTING_POOL

        self._stage = stage
        if stage.startswith((STARTING_POOL, EVALUATING_SEED)) and ": " not in stage:
            self._say(f"{stage}...")

    def _say(self, text: str) -> None:
        self._said = time.monotonic()
        print(f"kernelsmith evolve: {text} ({self._said - self.started:.1f} s)", file=sys.stderr, flush=True)

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            if time.monotonic() - self._said >= self.every_s and self._stage:
                self._say(f"still {self._stage}")

    def __enter__(self) -> "StartLines":
        # lazy: keeps 'kernelsmith --help' light (evaluator.phases is not loaded to build the parser)
        from ..evaluator.phases import listening

        if self.enabled:
            self._listening = listening(self)
            self._listening.__enter__()
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Said nothing more from here (the progress line takes over); idempotent."""
        if self._listening is not None:
            self._listening.__exit__(None, None, None)
            self._listening = None
            self._stop.set()
            self._thread.join()


def _confirmation(conf: dict[str, Any], has_best: bool = True) -> str:
    shown = "; per-step best shown" if has_best else ""
    if conf.get("skipped"):
        return f"not re-timed ({conf['skipped']})"
    if conf.get("error"):
        return f"no ({conf['error']}){shown}"
    rows = conf.get("finalists") or []
    if not rows:
        return "-"
    best = next((r for r in rows if r.get("program_id") == conf.get("best_program_id")), None)
    if best is None:
        unreliable = sum(1 for r in rows if r.get("timing_reliable") is False)
        why = f"{unreliable} timed unreliably" if unreliable else "none passed"
        return f"no ({len(rows)} finalist(s) re-timed, {why}){shown}"
    alone = best.get("alone") or {}
    text = (
        f"re-timed head to head with {len(rows) - 1} other finalist(s): {best['speedup']:.3f}x "
        f"[{best.get('speedup_ci_low', 0):.3f}, {best.get('speedup_ci_high', 0):.3f}] "
        f"(per-step {best.get('step_speedup', 0):.3f}x"
    )
    if best.get("retimed_alone"):
        text += (
            f"; its head-to-head reference moved with the others loaded "
            f"({best['head_to_head']['speedup']:.3f}x there): figure from its re-timing alone"
        )
    elif best.get("capped"):
        text += f"; capped to its alone re-timing, head to head {best['head_to_head']['speedup']:.3f}x"
    elif alone.get("speedup") is not None:
        text += f"; alone {alone['speedup']:.3f}x"
    return text + ")"


def _steps_text(summary: dict[str, Any]) -> str:
    proposals = summary.get("proposal_steps", summary["steps"])
    seeds = summary["steps"] - proposals
    return f"{proposals}" + (" after the seed (step 0)" if seeds == 1 else f" after {seeds} seeds" if seeds else "")


def _best_program_text(summary: dict[str, Any], best: Any) -> str:
    if summary["best_program_id"] is None:
        return "-"
    where = (
        f"step {best.step}, program #{summary['best_program_id']}"
        if best.step is not None
        else f"program #{summary['best_program_id']}"
    )
    return f"{summary['run_dir']}/best_program.py ({where})"


def _table(summary: dict[str, Any]) -> str:
    # lazy: keeps 'kernelsmith --help' light (evolve.best is not loaded to build the parser)
    from ..evolve.best import BestFigure

    best = BestFigure.from_dict(summary.get("best"))
    if best.speedup is None and summary["best_speedup"] is not None:  # a summary written before "best"
        best = BestFigure(speedup=summary["best_speedup"], program_id=summary["best_program_id"])
    rows = [
        ("run directory", summary["run_dir"]),
        ("stop reason", summary["stop_reason"]),
        ("steps", _steps_text(summary)),
        ("best speedup", best.words()),
        ("best program", _best_program_text(summary, best)),
        ("finalists", _confirmation(summary.get("best_confirmation") or {}, summary["best_program_id"] is not None)),
        ("outcomes", ", ".join(f"{k} {v}" for k, v in sorted(summary["status_counts"].items()))),
        ("tokens", summary["usage"].get("total_tokens", 0) if summary["usage"] else 0),
        ("cost (USD)", round(summary["usage"].get("cost_usd", 0.0), 4) if summary["usage"] else 0.0),
        (
            "wall time",
            f"{summary['wall_time_s']:.1f} s" + (f" ({summary['parts']} parts)" if summary.get("parts", 1) > 1 else ""),
        ),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def _failure_line(summary: dict[str, Any]) -> str:
    """The last line of a run stopped by a fault: the cause and what to do."""
    reason, detail, run_dir = summary["stop_reason"], summary.get("stop_detail") or "", summary["run_dir"]
    what = {
        "llm-auth": "the LLM endpoint refused the API key (check the key variable, e.g. OPENAI_API_KEY)",
        "llm-quota": "the LLM account is out of quota or credit",
        "llm-not-found": "the LLM endpoint has no such model or path (check --model and the base URL)",
        "llm-failures": "too many LLM requests failed in a row (is the endpoint up?)",
        "llm-all-failed": "no proposal of the run came back (is the endpoint up? does the model answer?)",
        "harness-error": (
            "the task's reference failed, or the task does not fit the device's memory (not the "
            "program's fault; nothing was charged to it; "
            f"a resumed run evaluates its own copy of the task, in {run_dir}/task)"
        ),
    }.get(reason, reason)
    # The failed steps used up the run's iterations: a plain resume would
    # have nothing left to do, so the way on asks for more steps.
    more = " --iterations N" if reason == "llm-all-failed" else ""
    return (
        f"kernelsmith evolve: stopped: {what}: {detail} -- nothing is lost; "
        f"fix it and continue with: kernelsmith evolve --resume {run_dir}{more}"
    )


def run(args: argparse.Namespace) -> int:
    # lazy: keeps 'kernelsmith --help' light (evolve is not loaded to build the parser)
    from ..evolve import load_evolve_config

    # lazy: keeps 'kernelsmith --help' light (evolve.session is not loaded to build the parser)
    from ..evolve.session import evolve

    if args.resume is None and args.task is None:
        raise UsageError("give a TASK directory, or --resume RUN_DIR to continue a run")
    if args.resume is not None and args.task is not None:
        raise UsageError(
            "give either a TASK or --resume RUN_DIR, not both (a resumed run uses its own copy of the task)"
        )
    if args.resume is not None:
        ignored = [
            flag
            for flag, value in (
                ("--config", args.config),
                ("--out", args.out),
                ("--model", args.model),
                ("--backend", args.backend),
                ("--seed", args.seed),
                ("--trials", args.trials),
                ("--policy", args.policy),
                ("--min-coverage", args.min_coverage),
            )
            if value is not None
        ]
        if ignored:
            raise UsageError(
                f"{', '.join(ignored)} cannot change a resumed run (it keeps its own settings); "
                "only --iterations N (N more steps) can be given with --resume"
            )
    overrides = dict(
        iterations=args.iterations,
        seed=args.seed,
        model=args.model,
        backend=args.backend,
        trials=args.trials,
        policy=args.policy,
        min_coverage=args.min_coverage,
    )
    config = load_evolve_config(args.config, **overrides) if args.resume is None else None
    out = args.out
    if args.resume is None and out is None:
        out = str(
            Path("runs")
            / f"{Path(args.task).name.removesuffix('.py').removesuffix('.yaml')}-{time.strftime('%Y%m%d-%H%M%S')}"
        )
    # lazy: keeps 'kernelsmith --help' light (evaluator.phases is not loaded to build the parser)
    from ..evaluator.phases import PhaseLine

    # The pool's start and the seed's evaluation come before any step (17 s
    # on 2 cores for the OpenCL example, minutes for a package that
    # autotunes): what goes on is shown from the first second until the
    # first step's progress line takes over: on a terminal one line with the
    # phase and its time, elsewhere a plain line per stage (-v: each phase
    # with its time).
    seed_phases = PhaseLine(
        "kernelsmith evolve" if args.resume is None else "kernelsmith evolve (resuming)",
        live=False if args.json else None,
        lines=bool(getattr(args, "verbose", 0)),
    )
    start_lines = StartLines(enabled=not args.json and not seed_phases.live)
    progress = Progress(enabled=not args.json, before_first=lambda: (seed_phases.close(), start_lines.close()))
    run_dir = Path(args.resume if args.resume is not None else out)
    said: list[RunSummary] = []

    def show(summary: RunSummary) -> None:
        """The summary, and for Ctrl-C what was kept, said once: at once
        when interrupted (the evaluations in flight are then killed), else
        at the end."""
        if said:
            return
        said.append(summary)
        progress.close()
        data = summary.to_dict()
        print(json.dumps(data, indent=2) if args.json else _table(data), flush=True)
        if summary.stop_reason == "interrupted":
            print(_interrupted_line(data), file=sys.stderr, flush=True)
            print(
                "kernelsmith evolve: stopping the evaluations in flight (killed; nothing is lost if you press "
                "Ctrl-C again)",
                file=sys.stderr,
                flush=True,
            )

    try:
        with seed_phases, start_lines:
            summary = asyncio.run(
                evolve(
                    args.task,
                    config,
                    out,
                    resume=args.resume,
                    extend=args.iterations if args.resume is not None else None,
                    progress=progress,
                    executor=args.executor,
                    refuse_futile=True,
                    on_interrupt=show,
                )
            )
    except KeyboardInterrupt:
        progress.close()
        if not said:  # said already: a second Ctrl-C while the evaluations in flight stopped
            print(_interrupted_early_line(run_dir), file=sys.stderr)
        return 130
    finally:
        progress.close()
    show(summary)
    if summary.failed:
        print(_failure_line(summary.to_dict()), file=sys.stderr)
        return EXIT_FAILURE
    return 130 if summary.stop_reason == "interrupted" else 0


def _interrupted_line(summary: dict[str, Any]) -> str:
    """What a Ctrl-C kept, and the way on."""
    run_dir = summary["run_dir"]
    steps = summary.get("proposal_steps", summary["steps"])
    return (
        f"kernelsmith evolve: interrupted: kept the seed and {steps} step(s) in {run_dir} (trajectory, "
        "checkpoint, best_program.py, summary.json; steps in flight are asked again, the finalists' "
        f"re-timing runs at the end); continue with: kernelsmith evolve --resume {run_dir}"
    )


def _interrupted_early_line(run_dir: Path) -> str:
    """A Ctrl-C before the run's first checkpoint (the seed's evaluation)."""
    # lazy: keeps 'kernelsmith --help' light (evolve.rundir is not loaded to build the parser)
    from ..evolve.rundir import RunDir

    if not RunDir(run_dir).exists():
        return "kernelsmith evolve: interrupted before the run started; nothing was written"
    if RunDir(run_dir).started():
        return f"kernelsmith evolve: interrupted; continue with: kernelsmith evolve --resume {run_dir}"
    return (
        f"kernelsmith evolve: interrupted before the seed's evaluation finished: no step was made; {run_dir} "
        "keeps the run's config and its copy of the task; start it again with: kernelsmith evolve --resume "
        f"{run_dir} (or remove the folder)"
    )

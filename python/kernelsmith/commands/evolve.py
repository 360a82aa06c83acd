"""kernelsmith evolve TASK: evolve faster kernels for a task."""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task", nargs="?", help="task directory (reference.py [+ seed.py, task.yaml]) or KernelBench file")
    parser.add_argument("--backend", choices=None, help="backend (triton, opencl, ...); default: the task's")
    parser.add_argument("--model", help="openai:NAME | anthropic:NAME | mutate | replay:RUN_DIR | llm (config's llm.models); default mutate")
    parser.add_argument("--iterations", type=int, help="proposal steps (default 40)")
    parser.add_argument("--seed", type=int, help="random seed of the engine and proposers (default 0)")
    parser.add_argument("--trials", type=int, help="correctness trials per candidate (default: the task's)")
    parser.add_argument("--config", help="YAML config (see docs/evolve.md); flags override it")
    parser.add_argument("--out", help="new run directory (default runs/<task>-<time>)")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue a stopped run (nothing finished is redone)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON, no progress bar")
    parser.add_argument("--executor", choices=("local", "ray"), default="local",
                        help="evaluate candidates in local worker processes or on a Ray cluster (RAY_ADDRESS)")


class Progress:
    """One status line on stderr: steps, best speedup so far, tokens."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.started = time.monotonic()
        self._last = 0.0

    def __call__(self, snap: dict[str, Any]) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        done = snap["steps"]
        if not self.tty and now - self._last < 2.0 and snap["asks"] < snap["iterations"]:
            return
        self._last = now
        best = snap.get("best_speedup")
        usage = snap.get("usage") or {}
        tokens = usage.get("total_tokens") or (usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0))
        counts = snap.get("status_counts", {})
        width = 24
        frac = min(1.0, snap["asks"] / max(1, snap["iterations"]))
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        best_text = f"{best:.3f}x" if best is not None else "-"
        line = (f"[{bar}] step {done} (asked {snap['asks']}/{snap['iterations']}) | best {best_text} | "
                f"correct {counts.get('correct', 0)} | tokens {tokens} | {now - self.started:.0f}s")
        end = "" if self.tty else "\n"
        print(("\r" if self.tty else "") + line, end=end, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.enabled and self.tty:
            print(file=sys.stderr)


def _table(summary: dict[str, Any]) -> str:
    rows = [
        ("run directory", summary["run_dir"]),
        ("stop reason", summary["stop_reason"]),
        ("steps", summary["steps"]),
        ("best speedup", f"{summary['best_speedup']:.3f}x" if summary["best_speedup"] is not None else "-"),
        ("best program", f"{summary['run_dir']}/best_program.py" if summary["best_program_id"] is not None else "-"),
        ("outcomes", ", ".join(f"{k} {v}" for k, v in sorted(summary["status_counts"].items()))),
        ("tokens", summary["usage"].get("total_tokens", 0) if summary["usage"] else 0),
        ("cost (USD)", round(summary["usage"].get("cost_usd", 0.0), 4) if summary["usage"] else 0.0),
        ("wall time", f"{summary['wall_time_s']:.1f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def run(args: argparse.Namespace) -> int:
    from ..config import ConfigError
    from ..evolve import load_evolve_config
    from ..evolve.session import evolve

    if args.resume is None and args.task is None:
        print("kernelsmith evolve: give a TASK, or --resume RUN_DIR", file=sys.stderr)
        return 2
    overrides = dict(iterations=args.iterations, seed=args.seed, model=args.model, backend=args.backend,
                     trials=args.trials)
    try:
        config = load_evolve_config(args.config, **overrides) if args.resume is None else None
        if args.resume is not None and args.iterations is not None:
            config = load_evolve_config(None, iterations=args.iterations)
    except ConfigError as exc:
        print(f"kernelsmith evolve: {exc}", file=sys.stderr)
        return 2
    out = args.out
    if args.resume is None and out is None:
        out = str(Path("runs") / f"{Path(args.task).name.removesuffix('.py')}-{time.strftime('%Y%m%d-%H%M%S')}")
    progress = Progress(enabled=not args.json)
    try:
        summary = asyncio.run(evolve(args.task, config, out, resume=args.resume, progress=progress,
                                     executor=args.executor))
    finally:
        progress.close()
    data = summary.to_dict()
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(_table(data))
    return 130 if summary.stop_reason == "interrupted" else 0

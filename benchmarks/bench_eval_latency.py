"""Latency of one interactive evaluation, side by side in one run.

    PYTHONPATH=python python3 benchmarks/bench_eval_latency.py [TASK [CANDIDATE]] [--repeats N] [--no-timing]

Defaults: examples/opencl/softmax and its seed (the CPU, PoCL). On a GPU:
``TASK=examples/triton/softmax`` (no TRITON_INTERPRET). Rows, each the wall
time of the whole thing, median [min-max] over ``--repeats``:

* ``import torch, kernelsmith``: a fresh Python that imports both (what a
  one-off evaluation cannot avoid paying once, in some process);
* ``eval, baseline package`` (with ``--baseline DIR``): ``kernelsmith eval``
  of another copy of the package, e.g. the one before the daemon;
* ``eval --no-daemon``: ``kernelsmith eval`` evaluating in its own process
  (a pool with one spare; zygote and referee started together);
* ``eval, daemon cold``: ``kernelsmith eval`` that finds no daemon and
  starts one (stopped before each round);
* ``eval, daemon warm``: ``kernelsmith eval`` served by the running daemon
  (twice per round);
* ``kernelsmith daemon status``: the client's own cost (Python, the CLI's
  imports, one round trip) without an evaluation;
* ``Evaluator(mode="fresh")``: one evaluation in a warm caller whose worker
  is a new Python (``python -m ...worker``), the referee already started.

The daemon lives in a private folder (KERNELSMITH_DAEMON_DIR), so a user's
own daemon is neither used nor disturbed. The load average is printed: on a
shared machine the figures move with the neighbours.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, dict]:
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=str(ROOT))
    wall = time.monotonic() - started
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    try:
        result = json.loads(proc.stdout) if proc.stdout.lstrip().startswith("{") else {}
    except ValueError:
        result = {}
    return wall, result


def _summary(times: list[float]) -> str:
    return f"{statistics.median(times):6.2f} s  [{min(times):.2f}-{max(times):.2f}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", nargs="?", default="examples/opencl/softmax")
    parser.add_argument("candidate", nargs="?", default="seed")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-timing", action="store_true", help="correctness only (passed to every evaluation)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument(
        "--baseline",
        metavar="PYTHONPATH",
        help="also time `kernelsmith eval` of another copy of the package (e.g. the commit before "
        "the daemon: git archive COMMIT python | tar -x -C DIR, plus its _core extension)",
    )
    parser.add_argument(
        "--baseline-has-daemon", action="store_true", help="the baseline package knows --no-daemon (pass it)"
    )
    args = parser.parse_args()

    rundir = Path(tempfile.mkdtemp(prefix="ks-lat-", dir="/tmp"))
    env = {
        **os.environ,
        "KERNELSMITH_DAEMON_DIR": str(rundir / "d"),
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "python"), os.environ.get("PYTHONPATH")) if p),
    }
    env.pop("KERNELSMITH_DAEMON", None)
    py = sys.executable
    eval_cmd = [py, "-m", "kernelsmith", "eval", args.task, args.candidate, "--json"]
    if args.no_timing:
        eval_cmd.append("--no-timing")
    stop_cmd = [py, "-m", "kernelsmith", "daemon", "stop"]
    rows: dict[str, list[float]] = {}
    work: dict[str, list[float]] = {}
    verdicts: set[str] = set()
    zygote_warm: list[float] = []

    def record(name: str, wall: float, result: dict) -> None:
        rows.setdefault(name, []).append(wall)
        if "category" in result:
            verdicts.add(f"{name}: {result.get('category')}")
            work.setdefault(name, []).append(
                sum(v for k, v in (result.get("phases") or {}).items() if k not in ("queue", "startup"))
            )

    print(
        f"task {args.task}, candidate {args.candidate}, {args.repeats} repeats, "
        f"{'no timing' if args.no_timing else 'with timing'}; load average before: {os.getloadavg()}",
        flush=True,
    )
    try:
        status_cmd = [py, "-m", "kernelsmith", "daemon", "status", "--json"]
        # one of each per round, so that a neighbour's load falls on every row alike
        for _ in range(args.repeats):
            record("import torch, kernelsmith", *_run([py, "-c", "import torch, kernelsmith"], env))
            if args.baseline:
                base_env = {**env, "PYTHONPATH": args.baseline, "KERNELSMITH_DAEMON": "0"}
                record(
                    f"eval, baseline package {args.baseline}",
                    *_run(eval_cmd + (["--no-daemon"] if args.baseline_has_daemon else []), base_env),
                )
            record("eval --no-daemon", *_run(eval_cmd + ["--no-daemon"], env))
            subprocess.run(stop_cmd, env=env, capture_output=True, cwd=str(ROOT))
            record("eval, daemon cold (starts it)", *_run(eval_cmd, env))
            # where a cold start goes: the zygote's own warm-up (imports, backend set-up)
            daemons = json.loads(
                subprocess.run(status_cmd, env=env, capture_output=True, text=True, cwd=str(ROOT)).stdout
            )["daemons"]
            zygote_warm.extend(p["zygote_warm_s"] for d in daemons for e in d["evaluators"] for p in e["pools"])
            for _ in range(2):
                record("eval, daemon warm", *_run(eval_cmd, env))
            # the client's floor: the same start-up and imports, one round trip, no evaluation
            record("kernelsmith daemon status (client floor)", *_run(status_cmd, env))
        subprocess.run(stop_cmd, env=env, capture_output=True, cwd=str(ROOT))
        fresh = (
            "import json, sys, time\n"
            "from kernelsmith.evaluator import Evaluator\nfrom kernelsmith.task import Task\n"
            "t = Task.load(sys.argv[1]); c = sys.argv[2]\n"
            "src = t.seed_source if c == 'seed' else open(c).read()\n"
            "with Evaluator(mode='fresh', timing=sys.argv[3] == '1') as ev:\n"
            "    ev.warm_up([t])\n"
            "    for i in range(int(sys.argv[4])):\n"
            "        s = time.monotonic(); r = ev.evaluate(t, src)\n"
            "        print(json.dumps({'wall': time.monotonic() - s, 'result': r.to_dict()}), flush=True)\n"
        )
        proc = subprocess.run(
            [py, "-c", fresh, args.task, args.candidate, "0" if args.no_timing else "1", str(args.repeats)],
            env=env,
            capture_output=True,
            text=True,
            cwd=str(ROOT),
        )
        if proc.returncode != 0:
            raise SystemExit(f"fresh mode failed:\n{proc.stderr[-3000:]}")
        for line in proc.stdout.splitlines():
            item = json.loads(line)
            record('Evaluator(mode="fresh"), one evaluation', item["wall"], item["result"])
    finally:
        subprocess.run(stop_cmd, env=env, capture_output=True, cwd=str(ROOT))
        shutil.rmtree(rundir, ignore_errors=True)
    print(f"{'':42s} {'wall, median [min-max]':>28s}   evaluation's own phases (median)")
    for name, times in rows.items():
        own = f"{statistics.median(work[name]):.2f} s" if work.get(name) else "-"
        print(f"{name:42s} {_summary(times):>28s}   {own}")
    if zygote_warm:
        print(
            f"the daemon's zygote warm-up (imports, backend set-up) in the cold runs: "
            f"{', '.join(f'{w:.2f}' for w in zygote_warm)} s"
        )
    print(f"verdicts: {', '.join(sorted(verdicts))}")
    print(f"load average after: {os.getloadavg()}; {os.cpu_count()} CPUs")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "task": args.task,
                    "candidate": args.candidate,
                    "rows": rows,
                    "own_phases": work,
                    "zygote_warm_s": zygote_warm,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

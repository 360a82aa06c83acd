"""Verdicts on pygpubench's exploits rewritten as relu candidates
(tests_py/fixtures/pygpubench; docs/pygpubench.md), all in one Evaluator
batch with the honest seed twice for comparison; one line per program.
``--dir tests_py/fixtures/hacks_v3`` runs integrity v3's held-out programs
(relu candidates too) the same way; ``--shapes get_inputs,get_inputs_odd``
times relu on those shapes (``--dir tests_py/fixtures/hacks_shapes``: the
report forged on a later shape). ``--figures`` prints each audited row's
rounds too: calls, replays, the rounds' wall times, the referee's other
work, the slack, and the bound on the calls these give (ms).

    TRITON_INTERPRET=1 PYTHONPATH=python python benchmarks/pygpubench_verdicts.py [--dir DIR] [--shapes A,B]
        [--figures] [name ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from kernelsmith.evaluator import Evaluator
from kernelsmith.task import Task

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests_py" / "fixtures" / "pygpubench"
RELU = ROOT / "examples" / "triton" / "relu"


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--figures"]
    figures_too = "--figures" in sys.argv[1:]
    fixtures = FIXTURES
    if args[:1] == ["--dir"] and len(args) >= 2:
        fixtures, args = Path(args[1]).resolve(), args[2:]
    shapes = ""
    if args[:1] == ["--shapes"] and len(args) >= 2:
        shapes, args = args[1], args[2:]
    names = args or sorted(p.stem for p in fixtures.glob("*.py"))
    task = Task.load(RELU)
    if shapes:
        import dataclasses

        task = dataclasses.replace(
            task, config=dataclasses.replace(task.config, timing_shapes=[s for s in shapes.split(",") if s])
        )
    seed = (RELU / "seed.py").read_text()
    items = [(task, seed), (task, seed)] + [(task, (fixtures / f"{n}.py").read_text()) for n in names]
    started = time.monotonic()
    with Evaluator(backend="triton", workers=2, timeout_s=150, timing=True) as ev:
        out = ev.evaluate_many(items)
    print("# name | category | hacked | speedup | runtime_ms | ref_runtime_ms | wall_s | referee | audit | reason")
    for name, r in zip(["_seed", "_seed_again"] + names, out):
        why = (r.hack_reasons[0] if r.hack_reasons else r.error).replace("\n", " ")[:400]
        referee = (r.census or {}).get("referee")
        figures = (r.census or {}).get("audit") or {}
        graph = " graph" if figures.get("worker_says_graph") else ""
        audit = f"{figures.get('excess', '-')} x{figures.get('calls', '-')}{graph}"
        print(
            " | ".join(
                str(x)
                for x in [
                    name,
                    r.category,
                    r.hacked,
                    r.speedup,
                    r.runtime_ms,
                    r.ref_runtime_ms,
                    r.wall_s,
                    referee,
                    audit,
                    why,
                ]
            ),
            flush=True,
        )
    print(f"# wall {time.monotonic() - started:.1f} s")
    if figures_too:
        _print_figures(["_seed", "_seed_again"] + names, out)


def _print_figures(names: list, results: list) -> None:
    keys = ("calls", "worker_says_replays", "wall_ms", "other_work_ms", "slack_ms", "call_at_least_ms")
    print("# name | " + " | ".join(keys))
    for name, r in zip(names, results):
        figures = (r.census or {}).get("audit") or {}
        if figures.get("calls"):
            print(" | ".join([name] + [str(figures.get(k)) for k in keys]))


if __name__ == "__main__":
    main()

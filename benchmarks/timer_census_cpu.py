"""The CPU timing checks' honest margins (issue 29, checks/timer.py): for
honest programs (the Triton examples' seeds, the kb_honest zoo, the OpenCL
examples' seeds) and, with --forged, pygpubench's three native clock
forgeries, evaluates each with timing on and prints the timed per-call time,
the least host time of the censused calls on the profiler's clock
(``census.call_host_ms_per_call``; the program's own kernels' part in
``own_host_ms_per_call``) and their ratio (a figure only:
no bound separates honest programs from got_patch), and the timing clock's share of the raw system call's over
the timed calls (``clock_mismatch``: forged below CLOCK_SHARE, 0.8).

    PYTHONPATH=python TRITON_INTERPRET=1 python3 benchmarks/timer_census_cpu.py [--forged] [--only triton|opencl]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kernelsmith.evaluator import Evaluator
from kernelsmith.task import Task

ROOT = Path(__file__).resolve().parent.parent
ZOO = ROOT / "tests_py" / "fixtures" / "kb_honest"
FORGED = ("got_patch", "function_detour", "proc_mem_bypass")


def _triton_items(forged: bool) -> list[tuple[str, Task, str]]:
    items = [
        (f"examples/triton/{d.name}", Task.load(d), (d / "seed.py").read_text())
        for d in sorted((ROOT / "examples" / "triton").iterdir())
        if (d / "seed.py").exists()
    ]
    items += [
        (f"kb_honest/{d.name}", Task.load(d), (d / "candidate.py").read_text())
        for d in sorted(ZOO.iterdir())
        if (d / "candidate.py").exists() and not d.name.startswith("l2_") and d.name != "matmul_autotune"
    ]
    if forged:
        relu = ROOT / "examples" / "triton" / "relu"
        items += [
            (
                f"pygpubench/{n}",
                Task.load(relu),
                (ROOT / "tests_py" / "fixtures" / "pygpubench" / f"{n}.py").read_text(),
            )
            for n in FORGED
        ]
    return items


def _opencl_items() -> list[tuple[str, Task, str]]:
    return [
        (f"examples/opencl/{d.name}", Task.load(d), (d / "seed.py").read_text())
        for d in sorted((ROOT / "examples" / "opencl").iterdir())
        if (d / "seed.py").exists()
    ]


def _find(tree: Any, key: str) -> Any:
    """The first value under ``key`` anywhere in a result's nested dicts."""
    if isinstance(tree, dict):
        if key in tree:
            return tree[key]
        for v in tree.values():
            found = _find(v, key)
            if found is not None:
                return found
    return None


def _run(backend: str, items: list[tuple[str, Task, str]]) -> None:
    with Evaluator(backend=backend, workers=2, timeout_s=300, timing=True) as ev:
        results = ev.evaluate_many([(task, source) for _, task, source in items])
    for (name, _, _), r in zip(items, results):
        own = r.census.get("call_host_ms_per_call")
        kern = r.census.get("own_host_ms_per_call")
        ratio = f"{own / r.runtime_ms:.3f}" if own is not None and r.runtime_ms else "-"
        why = (r.hack_reasons[0] if r.hack_reasons else r.error)[:160].replace("\n", " ")
        clock = _find(r.timing, "clock_check")
        share = f"{clock['timer_ms'] / clock['raw_ms']:.4f}" if clock and clock.get("raw_ms") else "-"
        print(
            f"{name:42s} {r.category:9s} timed_ms={r.runtime_ms} call_host_ms={own} own_kernels_ms={kern} ratio={ratio} clock_share={share} {why}",
            flush=True,
        )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--forged", action="store_true", help="also the three clock forgeries (pygpubench fixtures)")
    ap.add_argument("--only", choices=("triton", "opencl"))
    args = ap.parse_args()
    if args.only != "opencl":
        _run("triton", _triton_items(args.forged))
    if args.only != "triton":
        _run("opencl", _opencl_items())
    return 0


if __name__ == "__main__":
    sys.exit(main())

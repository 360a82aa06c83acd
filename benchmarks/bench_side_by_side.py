"""The evaluator's cost at two commits, side by side in one run: the pool
throughput benchmark (bench_eval_throughput.py, pool mode) run alternately
against two source trees (each with its built _core), so both see the same
machine and load. Prints each run's evaluations/min and median wall, the
verdicts of each, and the ratio of the medians (after/before).

    python benchmarks/bench_side_by_side.py BEFORE_TREE AFTER_TREE [--backend opencl] [--rounds 3]
    python benchmarks/bench_side_by_side.py BEFORE_TREE AFTER_TREE --backend triton --gpu --timeout 20

(on the GPU machine: ``SIDE_BASE=<commit> bash benchmarks/gpu_verify.sh build sidebyside``
with that commit's files in ``.carry/base``, ``git archive <commit> | tar -x -C .carry/base``)

BEFORE_TREE/AFTER_TREE: checkouts (e.g. `git worktree add /tmp/before <commit>`,
with python/kernelsmith/_core*.so built or copied in). Used for the
integrity v3 hardening's cost (issue 29)."""

from __future__ import annotations

import argparse
import json
import shutil
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional


def one_run(tree: Path, backend: str, extra: list[str], gpu: bool = False, keep: Optional[Path] = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "stats.json"
        env = dict(os.environ, PYTHONPATH=str(tree / "python"))
        if backend == "triton" and not gpu:
            env.setdefault("TRITON_INTERPRET", "1")
        proc = subprocess.run(
            [
                sys.executable,
                str(tree / "benchmarks" / "bench_eval_throughput.py"),
                "--backend",
                backend,
                "--modes",
                "pool",
                "--json",
                str(out),
                *extra,
            ],
            env=env,
            cwd=str(tree),
            capture_output=True,
            text=True,
            timeout=3600,
        )
        if not out.exists():
            raise SystemExit(
                f"{tree}: the benchmark wrote no figures (exit {proc.returncode})\n"
                f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
            )
        data = json.loads(out.read_text())
        if keep is not None:  # every result, for benchmarks/phase_split.py
            shutil.copyfile(out, keep)
    groups = data["stats"]["pool"]
    results = [c["results"]["pool"] for c in data["candidates"]]
    wall = sum(g["n"] for g in groups.values())
    return {
        "evals_per_min": statistics.mean(g["evals_per_min"] or 0 for g in groups.values()),
        "median_wall_s": statistics.median(g["median_wall_s"] for g in groups.values()),
        "n": wall,
        "verdicts": [(c["name"], r["category"]) for c, r in zip(data["candidates"], results)],
        "unexpected": data["unexpected"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--backend", default="opencl")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gpu", action="store_true", help="compiled Triton on the GPU (default: the interpreter)")
    parser.add_argument("--keep", type=Path, default=None, help="a folder: each run's results, as SIDE_rROUND.json")
    args, extra = parser.parse_known_args()
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for i in range(args.rounds):
        for side in ("before", "after") if i % 2 == 0 else ("after", "before"):
            keep = args.keep / f"{side}_r{i + 1}.json" if args.keep is not None else None
            r = one_run(getattr(args, side), args.backend, extra, args.gpu, keep)
            runs[side].append(r)
            print(
                f"round {i + 1} {side:<6}: {r['evals_per_min']:.1f} evaluations/min, median wall "
                f"{r['median_wall_s']:.2f} s, {r['n']} candidates, unexpected verdicts: {r['unexpected'] or 'none'}",
                flush=True,
            )
    same = all(a["verdicts"] == b["verdicts"] for a in runs["before"] for b in runs["after"])
    med = {s: statistics.median(r["evals_per_min"] for r in runs[s]) for s in runs}
    wall = {s: statistics.median(r["median_wall_s"] for r in runs[s]) for s in runs}
    print(f"# before {args.before}: median {med['before']:.1f} evaluations/min, median wall {wall['before']:.2f} s")
    print(f"# after  {args.after}: median {med['after']:.1f} evaluations/min, median wall {wall['after']:.2f} s")
    print(
        f"# after/before: throughput {med['after'] / med['before']:.3f}x, median wall "
        f"{wall['after'] / wall['before']:.3f}x; verdicts {'identical' if same else 'DIFFER'}"
    )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

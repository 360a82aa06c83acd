"""Curated tasks as seeds of ``kernelsmith evolve``: pick N random tasks of a
curated corpus (the output of ``kernelsmith curate`` or
``benchmarks/bench_curation.py``) and run one evolution step on each.

    PYTHONPATH=python python benchmarks/curated_evolve_smoke.py /tmp/p17_bench/transformers /tmp/p17_bench/torch_nn \
        --n 20 --out /tmp/curated-evolve

Each task runs as ``kernelsmith evolve TASK_DIR --iterations 1 --json`` in its
own process (the offline proposer; no LLM, no GPU: Triton through its
interpreter on a CPU), on a copy of the task with a seed.py whose ModelNew is the
reference's computation with its output copied by a Triton kernel, so that
the seed's evaluation exercises everything a curated task brings to the
harness: loading the reference file as a module, ``get_init_inputs()``,
every input set (``get_inputs`` and the ``extra_inputs`` of task.yaml),
correctness trials and timing. A harness error is a non-zero exit, no
trajectory, or a seed evaluation that failed (compile, runtime, timeout,
crash: the seed is the reference's own computation, which ran as a plain
module during curation); a seed judged
"hacked" (its forward runs torch compute ops besides its kernel) or
"incorrect" is the harness working. Prints one line per task and a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from kernelsmith.trajectory import EvalStore, StepRecord

REFERENCE_SIDE = re.compile(r"reference|get_inputs|get_init_inputs|Model\(\*", re.IGNORECASE)


SEED_HEAD = """# EVOLVE-BLOCK-START
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)

"""
SEED_TAIL = """

class ModelNew(Model):
    # the reference's computation, its first output copied by a Triton kernel:
    # the evaluator builds both models, generates every input set and runs them
    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        if isinstance(out, torch.Tensor) and out.is_floating_point():
            x = out.contiguous()
            y = torch.empty_like(x)
            _copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
            return y
        return out
# EVOLVE-BLOCK-END
"""


def seed_for(reference: str) -> str:
    body = re.sub(r"\n(def get_inputs\w*\(\)|def get_init_inputs\(\)):.*", "\n", reference, flags=re.S)
    return SEED_HEAD + body.rstrip("\n") + "\n" + SEED_TAIL


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpora", nargs="+", help="curation output folders (with index.jsonl)")
    ap.add_argument("--n", type=int, default=20, help="tasks, drawn at random over all corpora")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="/tmp/kernelsmith-curated-evolve", help="run directories")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per evolve run")
    args = ap.parse_args()
    from kernelsmith.curate import read_index

    pool = []
    for c in args.corpora:
        for r in read_index(Path(c)):
            pool.append((Path(c) / r["task_path"], r))
    pick = random.Random(args.seed).sample(pool, min(args.n, len(pool)))
    env = dict(os.environ, TRITON_INTERPRET="1")
    harness_errors = 0
    t_all = time.monotonic()
    for k, (task, row) in enumerate(pick):
        run = Path(args.out) / f"{k:02d}_{row['name']}"
        # the task as curated plus a seed: the reference itself as ModelNew, so that
        # the seed step runs the evaluator on it (a task without seed.py starts
        # from the reference unevaluated)
        seeded = Path(args.out) / "tasks" / f"{k:02d}_{row['name']}"
        if seeded.exists():
            shutil.rmtree(seeded)
        shutil.copytree(task, seeded)
        (seeded / "seed.py").write_text(seed_for((task / "reference.py").read_text()))
        if run.exists():
            shutil.rmtree(run)
        t0 = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "kernelsmith",
                "evolve",
                str(seeded),
                "--iterations",
                "1",
                "--out",
                str(run),
                "--json",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=args.timeout,
        )
        wall = time.monotonic() - t0
        traj = run / "trajectory.jsonl"
        steps = [json.loads(l) for l in traj.read_text().splitlines() if l.strip()] if traj.exists() else []
        # the seed's whole result, through its key (the run's evaluations.jsonl)
        seed = EvalStore.load(run).of(StepRecord.from_dict(steps[0])) if steps else None
        seed_res = seed.to_dict() if seed is not None else {}
        cat = seed_res.get("category", "?")
        err = str(seed_res.get("error", ""))
        problem = ""
        if proc.returncode != 0:
            problem = f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"
        elif not steps:
            problem = "no trajectory"
        elif cat not in ("ok", "hacked", "incorrect"):
            # the seed is the reference's own computation: it can only fail where
            # the harness treats the task differently from plain Python
            last = [l for l in err.strip().splitlines() if l.strip()][-1:] or [""]
            problem = f"seed {cat}: {last[0][:200]}" + (" (reference side)" if REFERENCE_SIDE.search(err) else "")
        harness_errors += bool(problem)
        print(
            f"{k + 1:2d}/{len(pick)} {row['difficulty']} {row['name'][:50]:<50} seed {cat:<9} "
            f"steps {len(steps)} {wall:6.1f} s {'HARNESS ERROR ' + problem if problem else 'ok'}",
            flush=True,
        )
    print(
        f"\n{len(pick)} curated tasks, one evolve step each: {harness_errors} harness errors, "
        f"{(time.monotonic() - t_all) / 60:.1f} min"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

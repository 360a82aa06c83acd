"""kernelsmith's speedup beside an independent method's, kernel by kernel
(issue 30, "an explained speedup").

For each honest kernel of the test zoo (tests_py/fixtures/kb_honest: small
sizes, microseconds) and, with ``--kernelbench DIR``, the same kernels at
KernelBench's upstream sizes (milliseconds):

* **kernelsmith**: one evaluation with timing in the evaluator's pool
  (sandboxed workers, paired reference/candidate calls, L2 flushed, CUDA
  graphs where they apply), its speedup and the two runtimes;
* **do_bench**: in one fresh process per kernel, ``triton.testing.do_bench``
  (L2 flushed, median) of the reference and the candidate, alternated five
  times, the median of each: the method the issue's first figures used.

Prints both runtimes and speedups and ks/do_bench. On the GPU machine:

    PYTHONPATH=python python3 benchmarks/bench_timing_crosscheck.py [--kernelbench .carry/KernelBench]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ZOO = ROOT / "tests_py" / "fixtures" / "kb_honest"
sys.path.insert(0, str(ROOT / "benchmarks"))

#: in a fresh process: both modules built as the evaluator builds them (same
#: seed before each construction), inputs drawn on the device, then
#: do_bench alternated
DO_BENCH = r"""
import json, statistics, sys, types
import torch, triton.testing
ref_src, cand_src, dtype_name, rounds = open(sys.argv[1]).read(), open(sys.argv[2]).read(), sys.argv[3], int(sys.argv[4])
def module(name, src, path):
    mod = types.ModuleType(name); mod.__file__ = path
    sys.modules[name] = mod
    exec(compile(src, path, "exec"), mod.__dict__)
    return mod
ref = module("ks_reference", ref_src, sys.argv[1])
cand = module("ks_candidate", cand_src, sys.argv[2])
dtype = getattr(torch, dtype_name)
torch.manual_seed(0)
init = ref.get_init_inputs() if hasattr(ref, "get_init_inputs") else []
torch.manual_seed(1); model = ref.Model(*init).cuda().to(dtype).eval()
torch.manual_seed(1); new = cand.ModelNew(*init).cuda().to(dtype).eval()
torch.manual_seed(2)
with torch.device("cuda"):
    inputs = ref.get_inputs()
inputs = [x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
refs, cands = [], []
with torch.no_grad():
    model(*inputs); new(*inputs); torch.cuda.synchronize()
    for _ in range(rounds):
        refs.append(triton.testing.do_bench(lambda: model(*inputs), return_mode="median"))
        cands.append(triton.testing.do_bench(lambda: new(*inputs), return_mode="median"))
print(json.dumps({"ref_ms": statistics.median(refs), "cand_ms": statistics.median(cands)}))
"""


def pairs(kernelbench: Path | None) -> list[tuple[str, str, str, dict]]:
    """(label, reference source or KernelBench file, candidate source, overrides)."""
    out = []
    for d in sorted(p for p in ZOO.iterdir() if (p / "candidate.py").is_file()):
        out.append((f"zoo/{d.name}", str(d), (d / "candidate.py").read_text(), {}))
    if kernelbench is not None:
        from bench_kernelbench import zoo_pairs, zoo_tolerance

        for name, f, source in zoo_pairs(kernelbench):
            if "/candidate" not in name or name.split("/")[0] in ("degenerate",):
                continue
            out.append((f"upstream/{f.stem}", str(f), source, zoo_tolerance(ZOO / name.split("/")[0])))
    return out


def report(rows: list[dict]) -> None:
    """The table, sorted by the candidate's device time; kernels of 20 us
    and more (kernelsmith's figure, device time) summarised apart from the
    smaller ones, with the host time per call that do_bench's eager calls
    add (do_bench's runtime minus kernelsmith's)."""
    print(
        f"{'kernel':<42} {'ks ref ms':>10} {'ks cand':>9} {'ks x':>7} {'db ref ms':>10} {'db cand':>9} "
        f"{'db x':>7} {'ks/db':>6} {'+us/call':>9}  graph"
    )
    ratios: dict[str, list[float]] = {"small": [], "large": []}
    for row in sorted(rows, key=lambda r: r["ks_cand_ms"] or 0):
        if row["ks_speedup"] is None or row["db_speedup"] is None:
            print(f"{row['kernel']:<42} {row['category']}: {row['db_error'] or 'no kernelsmith figure'}")
            continue
        ratio = row["ks_speedup"] / row["db_speedup"]
        if row["reliable"]:
            ratios["large" if row["ks_cand_ms"] >= 0.020 else "small"].append(ratio)
        extra = 1000 * (row["db_cand_ms"] - row["ks_cand_ms"])
        print(
            f"{row['kernel']:<42} {row['ks_ref_ms']:10.4f} {row['ks_cand_ms']:9.4f} {row['ks_speedup']:7.3f} "
            f"{row['db_ref_ms']:10.4f} {row['db_cand_ms']:9.4f} {row['db_speedup']:7.3f} {ratio:6.3f} {extra:9.1f}  "
            f"{row['graph']}{'' if row['reliable'] else ' (unreliable: left out of the summary)'}"
        )
    for size, values in ratios.items():
        if values:
            print(
                f"ks/do_bench, candidate {'>= 20 us' if size == 'large' else '< 20 us'} (reliable timings): median "
                f"{statistics.median(values):.3f}, range {min(values):.3f}-{max(values):.3f} ({len(values)} kernels)"
            )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernelbench", type=Path, help="a KernelBench checkout: add the zoo's kernels at upstream sizes")
    ap.add_argument("--rounds", type=int, default=5, help="do_bench alternations of reference and candidate")
    ap.add_argument("--only", default="", help="comma-separated label substrings")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--from-json", type=Path, help="print the table of an earlier run's --json file, run nothing")
    args = ap.parse_args()
    if args.from_json:
        report(json.loads(args.from_json.read_text()))
        return 0
    from kernelsmith.evaluator import Evaluator
    from kernelsmith.task import Task

    items = [p for p in pairs(args.kernelbench) if not args.only or any(s in p[0] for s in args.only.split(","))]
    tasks = [Task.load(src, backend="triton", **over) for _, src, _, over in items]
    rows = []
    with Evaluator(backend="triton", timeout_s=600) as ev:
        results = {i: r for i, r in ev.stream([(t, cand) for t, (_, _, cand, _) in zip(tasks, items)])}
    with tempfile.TemporaryDirectory() as tmp:
        for i, ((label, _src, cand, _), task) in enumerate(zip(items, tasks)):
            r = results[i]
            ref_path, cand_path = Path(tmp) / f"ref{i}.py", Path(tmp) / f"cand{i}.py"
            ref_path.write_text(task.reference_source)
            cand_path.write_text(cand)
            proc = subprocess.run(
                [sys.executable, "-c", DO_BENCH, str(ref_path), str(cand_path), task.config.dtype, str(args.rounds)],
                capture_output=True,
                text=True,
                env=dict(os.environ),
            )
            db = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
            row = {
                "kernel": label,
                "category": r.category,
                "ks_ref_ms": r.ref_runtime_ms,
                "ks_cand_ms": r.runtime_ms,
                "ks_speedup": r.speedup,
                "reliable": r.timing_reliable,
                "graph": (r.timing or {}).get("cuda_graph"),
                "db_ref_ms": db and db["ref_ms"],
                "db_cand_ms": db and db["cand_ms"],
                "db_speedup": db and db["ref_ms"] / db["cand_ms"],
                "db_error": None if db else proc.stderr[-400:],
            }
            rows.append(row)
    report(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

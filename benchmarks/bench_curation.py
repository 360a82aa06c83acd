"""Curation at scale: curate the installed ``transformers`` package's models/
and torch's own ``torch/nn/modules`` and print the stage tables, then check
the corpus independently of the filter that built it.

    PYTHONPATH=python python benchmarks/bench_curation.py --out /tmp/curation [--timeout 5] [--jobs 2]

Per corpus: wall time, the load of the machine before and after (``uptime``;
the machine may be shared), the stage table, difficulty and size-class counts.
Then the report's checks:

* no task is degenerate: every written ``reference.py`` is loaded again, on
  its own, in the sandboxed worker (``kernelsmith.curate.runner``) and must
  pass the same checks (not an identity, not input-independent, not ignoring
  an input, not trivially near zero) -- ``--verify N`` tasks per corpus, all
  by default;
* the activations, softmaxes and recurrent layers that text similarity used
  to merge are distinct tasks of the torch.nn corpus (SiLU, Mish, SELU, Tanh,
  Softmax, GRU, LSTM);
* the targets: >= 2,000 tasks from transformers, >= 80 from torch.nn, under
  15 minutes each.

Figures are printed, never asserted: the exit status is 0 unless a corpus
could not be curated at all.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REQUIRED_TORCH_NN = ("SiLU", "Mish", "SELU", "Tanh", "Softmax", "GRU", "LSTM")


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "n/a"


def _site(pkg: str) -> Path:
    import importlib.util

    spec = importlib.util.find_spec(pkg)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{pkg} is not installed (pip install {pkg})")
    return Path(list(spec.submodule_search_locations)[0])


def curate_corpus(label: str, src: Path, out: Path, args: argparse.Namespace, allow: list[str]) -> dict:
    from kernelsmith.curate import CurateConfig, RunnerConfig, curate, read_index

    print(f"\n== {label}: {src}", flush=True)
    print(f"load before: {_uptime()}", flush=True)
    cfg = CurateConfig(
        allow_import=allow,
        resume=not args.fresh,
        seed=0,
        runner=RunnerConfig(module_timeout_s=args.timeout, jobs=args.jobs, modules_per_worker=args.modules_per_worker),
    )
    t0 = time.monotonic()
    rep = curate(src, out, cfg, log=lambda s: print(f"  {s}", file=sys.stderr, flush=True), progress=True)
    wall = time.monotonic() - t0
    print(f"load after:  {_uptime()}")
    print(rep.table())
    report = json.loads((out / "report.json").read_text())
    rows = read_index(out)
    print(
        f"wall {wall / 60:.1f} min (stages: " + ", ".join(f"{k} {v:.0f} s" for k, v in report["stage_s"].items()) + ")"
    )
    print(cpu_by_stage(out))
    print("difficulty: " + ", ".join(f"{k} {v}" for k, v in sorted(Counter(r["difficulty"] for r in rows).items())))
    print(
        "size class of get_inputs(): "
        + ", ".join(f"{k} {v}" for k, v in sorted(Counter(str(r["size_class"]) for r in rows).items()))
    )
    return {"label": label, "tasks": len(rows), "wall_s": wall, "rows": rows, "out": out}


def cpu_by_stage(out: Path) -> str:
    """Where the execution filter's CPU time went: the workers' CPU seconds
    per stage of the check (``cpu_s`` of each verdict), summed over modules."""
    total: Counter = Counter()
    by_status: dict[str, Counter] = {}
    path = out / "work" / "verdicts.jsonl"
    if not path.exists():
        return "cpu per stage: no verdicts"
    n = 0
    for line in path.read_text().splitlines():
        try:
            v = json.loads(line)["verdict"]
        except (ValueError, KeyError, TypeError):
            continue
        n += 1
        for k, sec in (v.get("cpu_s") or {}).items():
            total[k] += sec
            by_status.setdefault(str(v.get("status")), Counter())[k] += sec
    all_s = sum(total.values()) or 1.0
    lines = [
        f"worker CPU over {n} modules: {all_s:.0f} s ({all_s / max(1, n) * 1000:.0f} ms per module); by stage: "
        + ", ".join(f"{k} {s:.0f} s ({100 * s / all_s:.0f}%)" for k, s in total.most_common())
    ]
    for status, c in sorted(by_status.items(), key=lambda kv: -sum(kv[1].values()))[:6]:
        lines.append(f"  {status}: {sum(c.values()):.0f} s")
    return "\n".join(lines)


def verify(corpus: dict, n: int, args: argparse.Namespace) -> Counter:
    """Each task file, as written, through the sandboxed check again."""
    from kernelsmith.curate import RunnerConfig, run_checks

    rows = corpus["rows"]
    pick = rows if n <= 0 or n >= len(rows) else random.Random(0).sample(rows, n)
    items = [
        {"id": r["name"], "variants": [(corpus["out"] / r["task_path"] / "reference.py").read_text()]} for r in pick
    ]
    allow = ["transformers"] if corpus["label"] == "transformers" else []
    verdicts = run_checks(
        items, RunnerConfig(module_timeout_s=args.timeout * 2, jobs=args.jobs, preload=allow), seed=12345
    )
    status = Counter(v.get("status") for v in verdicts.values())
    bad = {k: v for k, v in verdicts.items() if v.get("status") != "ok"}
    print(
        f"verify {corpus['label']}: {len(items)} task files re-checked standalone with other seeds: "
        + ", ".join(f"{k} {v}" for k, v in status.most_common())
    )
    degenerate = {
        k: v
        for k, v in bad.items()
        if v.get("status") in ("identity", "input_independent", "ignores_input", "trivial_output")
    }
    print(f"  degenerate (identity / input-independent / ignores an input / trivial): {len(degenerate)}")
    for k, v in list(bad.items())[:10]:
        print(f"  {k}: {v.get('status')} {str(v.get('detail'))[:160]}")
    return status


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/kernelsmith-curation", help="output root (one folder per corpus)")
    ap.add_argument("--timeout", type=float, default=5.0, help="seconds per module in the execution filter")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="sandboxed workers")
    ap.add_argument(
        "--modules-per-worker",
        type=int,
        default=1000,
        help="a worker is replaced after this many modules (each start imports torch and transformers)",
    )
    ap.add_argument("--verify", type=int, default=0, help="tasks re-checked per corpus (0: all)")
    ap.add_argument("--only", choices=["transformers", "torch.nn"], default=None)
    ap.add_argument("--fresh", action="store_true", help="ignore verdicts of an earlier run (no resume)")
    args = ap.parse_args()
    root = Path(args.out)
    corpora = []
    if args.only in (None, "torch.nn"):
        corpora.append(curate_corpus("torch.nn", _site("torch") / "nn" / "modules", root / "torch_nn", args, []))
    if args.only in (None, "transformers"):
        corpora.append(
            curate_corpus(
                "transformers", _site("transformers") / "models", root / "transformers", args, ["transformers"]
            )
        )
    print("\n== checks")
    for c in corpora:
        verify(c, args.verify, args)
        if c["label"] == "torch.nn":
            names = {r["class_name"] for r in c["rows"]}
            missing = [n for n in REQUIRED_TORCH_NN if n not in names]
            print(
                f"torch.nn distinct tasks {', '.join(REQUIRED_TORCH_NN)}: "
                + ("all present" if not missing else f"MISSING {', '.join(missing)}")
            )
    print("\n== targets")
    for c in corpora:
        target = 2000 if c["label"] == "transformers" else 80
        print(
            f"{c['label']:<13} {c['tasks']:>6} tasks (target >= {target}: {'met' if c['tasks'] >= target else 'NOT met'})"
            f"  {c['wall_s'] / 60:5.1f} min (target < 15: {'met' if c['wall_s'] < 900 else 'NOT met'})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

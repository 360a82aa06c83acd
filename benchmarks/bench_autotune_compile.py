"""What a package's autotuning costs in a project's test command, with the
configs of each key compiled one after the other (Triton's way) and side
by side (``triton/autotune.py: precompile``), on a GPU.

The tests are run as ``kernelsmith task init`` runs them: a fresh Python
with the hand-over's ``sitecustomize`` first on ``PYTHONPATH`` (so every key
is tuned and reported) and a Triton compile cache of its own. Three runs:

* ``sequential``: ``KERNELSMITH_AUTOTUNE_PRECOMPILE=off``, a new cache;
* ``fork`` (the default): configs compiled side by side in forked
  children, a new cache;
* ``warm``: the fork run's compile cache again, tuned anew (what is left
  when nothing compiles: the benchmarks and the tests themselves).

  python benchmarks/bench_autotune_compile.py --wheel .whl/fla_core-0.6.0-py3-none-any.whl \\
      --wheel .whl/einops-0.8.2-py3-none-any.whl examples/inplace/fla/test_fla_l2norm.py

Prints each run's wall time, what it tuned, and the sequential/parallel ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

from kernelsmith.backends.triton import autotune  # noqa: E402


def run(tests: list[str], tree: str, site: str, cache: str, mode: str, work: str, label: str) -> dict:
    new = os.path.join(work, f"{label}-new.jsonl")
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    env.update(
        PYTHONPATH=os.pathsep.join([site, tree, env.get("PYTHONPATH", "")]),
        TRITON_CACHE_DIR=cache,
        KERNELSMITH_AUTOTUNE_NEW=new,
        KERNELSMITH_AUTOTUNE_KNOWN=os.path.join(work, "none.json"),
    )
    env[autotune.PRECOMPILE_ENV] = mode
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - started
    records = [json.loads(line) for line in open(new)] if os.path.exists(new) else []
    pre = [r.get("precompile") or {} for r in records]
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or [""]
    return {
        "run": label,
        "wall_s": round(wall, 2),
        "keys_tuned": len(records),
        "rc": proc.returncode,
        "configs": sum(p.get("configs", 0) for p in pre),
        "precompiled": sum(p.get("compiled", 0) for p in pre),
        "precompile_s": round(sum(p.get("seconds", 0.0) for p in pre), 2),
        "errors": sorted({p["error"] for p in pre if p.get("error")}),
        "tail": tail[0][:200],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tests", nargs="+", help="test files (pytest)")
    ap.add_argument("--wheel", action="append", default=[], help="a wheel unpacked into the tree (repeatable)")
    ap.add_argument("--tree", help="the package's tree instead of wheels")
    ap.add_argument("--modes", default="off,fork", help="cold runs, in order (off, fork); a warm run follows")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="ks-autotune-bench-")
    tree = args.tree or os.path.join(work, "tree")
    for wheel in args.wheel:
        zipfile.ZipFile(wheel).extractall(tree)
    site = autotune.write_site_folder(os.path.join(work, "site"))
    tests = [os.path.abspath(t) for t in args.tests]
    print(f"compiles at once by default: {autotune.compile_procs(1 << 10)}", flush=True)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    plan = [("sequential" if m == "off" else m, f"cache-{m}", m) for m in modes]
    plan.append(("warm", plan[-1][1], plan[-1][2]))
    rows = []
    for label, cache, mode in plan:
        row = run(tests, tree, site, os.path.join(work, cache), mode, work, label)
        rows.append(row)
        print(
            f"{row['run']:<11} {row['wall_s']:8.2f} s  keys tuned {row['keys_tuned']:3d}  configs {row['configs']:4d}  "
            f"precompiled {row['precompiled']:4d} in {row['precompile_s']:7.2f} s  rc {row['rc']}  {row['tail']}"
            + (f"  errors {row['errors']}" if row["errors"] else ""),
            flush=True,
        )
    walls = {r["run"]: r["wall_s"] for r in rows}
    if "sequential" in walls:
        for r in rows[1:-1]:
            print(f"sequential / {r['run']}: {walls['sequential'] / r['wall_s']:.2f}x")
        print(
            f"compile share of the sequential run: {max(0.0, walls['sequential'] - walls['warm']) / walls['sequential']:.0%} "
            "(sequential - warm)"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

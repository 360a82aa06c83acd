"""Evaluator throughput: one fresh process per candidate against the warm pool (issue 13).

What it measures. The same candidates (benchmarks/eval_throughput/manifest.yaml:
32 Triton programs, correct, deliberately slow, incorrect, compile errors,
runtime errors, crashes, a hang and reward hacks, over small single-op tasks
(group l1) and KernelBench level-2 style GEMM problems (group l2)) are
evaluated by each evaluator mode in turn, in one run:

  fresh  one new sandboxed worker process per candidate (the evaluator as it
         was before issue 13: Python, torch, Triton and the CUDA context are
         paid by every candidate);
  pool   the warm worker pool (Evaluator(mode="pool")).
  pool-nocensus  the pool with the integrity v2 checks off (KS_BENCH_NO_CENSUS=1:
         no kernel census, output provenance, integrity snapshot or refill
         checks), only to measure what they cost: compare its rate with
         pool's in one run (issue 14: at most 10% more time).
  pool-warm  the pool with its spares warmed beyond the device context
         (KERNELSMITH_WARM_WORKERS=1: a Triton compile, cuBLAS and cuDNN
         set-up ahead of demand), to measure what that warming saves and
         costs (it was the default, as "pool", in the H200 run of
         benchmarks/results/h200_eval_throughput.txt, where "pool-cold" was
         today's default).

Each group is one batch (Evaluator.stream when the evaluator has it, else
evaluate_many), timed from submission to the last result. Per mode and group
it prints evaluations per minute (batch size / batch wall), the median and
p95 of EvalResult.wall_s, and the median of every per-phase time the results
carry (EvalResult.phases: queue, startup, load, compile, correctness, timing;
whatever is there), then a verdict table: expected against got per mode and
whether the modes agree. Exit status 1 when any verdict differs from the
expected one or the modes disagree, 2 for bad input. The modes run one after
the other, never at once, so they never share a device. The hang costs
--timeout seconds in each mode (it is part of the workload; the table shows
how many timeouts a group had and the seconds they held): with one worker,
16 l1 candidates and --timeout 60, no evaluator can exceed 16 evaluations a
minute on l1, so compare the modes' rates at the same --timeout (and use a
short one, e.g. 10, to see the rate of everything else).

--repeat-one N NAME evaluates one (correct) candidate N times in each mode,
each a new evaluation, and prints the speedup of every run and the spread
max/min (issue 13's target on the H200: at most 1.02 for kernels of 20 us or
more).

--backend opencl runs the same comparison on the OpenCL manifest
(benchmarks/eval_throughput/opencl/manifest.yaml: the examples/opencl seeds
and variants: correct, slow, incorrect, build failures, hacks), on the CPU
through PoCL.

Running it:

  # CPU (Triton interpreter): the l2 shapes shrunk (--small sets
  # KS_BENCH_SMALL=1, which the l2 references read); today's evaluator has no
  # mode= yet, so only --modes fresh
  TRITON_INTERPRET=1 PYTHONPATH=python python3 benchmarks/bench_eval_throughput.py \
      --modes fresh --group l1,l2 --small --timeout 60

  # one H200 (full shapes; one worker per GPU by default)
  PYTHONPATH=python python3 benchmarks/bench_eval_throughput.py --modes fresh,pool \
      --timeout 60 --json eval_throughput.json
  PYTHONPATH=python python3 benchmarks/bench_eval_throughput.py --modes fresh,pool \
      --repeat-one 10 linear_relu_tiled

  # OpenCL on the CPU (PoCL)
  PYTHONPATH=python python3 benchmarks/bench_eval_throughput.py --backend opencl \
      --modes fresh,pool --timeout 60

Interpreter timings on the CPU say nothing about GPU speed; they show the
path works and what each phase of an evaluation costs there.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence, Any, Optional

from _verdicts import matches, reason

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "benchmarks" / "eval_throughput"
MANIFESTS = {"triton": HERE / "manifest.yaml", "opencl": HERE / "opencl" / "manifest.yaml"}
CATEGORIES = ("ok", "incorrect", "compile", "runtime", "crash", "timeout", "hacked", "oom")
MODES = ("fresh", "pool", "pool-nocensus", "pool-warm")
#: the phases issue 13 names, printed in this order; other keys follow sorted
PHASES = ("queue", "startup", "load", "compile", "correctness", "census", "timing")


class ManifestError(ValueError):
    pass


@dataclass
class Candidate:
    name: str
    file: Path
    task: Path
    expected: str
    group: str
    #: caught only by the integrity v2 checks (the refill check): with them
    #: off (pool-nocensus) any verdict is shown but not counted as unexpected
    needs_v2: bool = False


def load_manifest(path: Path) -> tuple[str, list[Candidate]]:
    """The manifest's backend and candidates; every problem is a ManifestError
    that names the entry and the key."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ManifestError(f"{path}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("candidates"), list):
        raise ManifestError(f"{path}: expected a mapping with a 'candidates' list")
    unknown = set(data) - {"backend", "candidates"}
    if unknown:
        raise ManifestError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}")
    out: list[Candidate] = []
    for i, entry in enumerate(data["candidates"]):
        where = f"{path}: candidate #{i + 1}"
        if not isinstance(entry, dict):
            raise ManifestError(f"{where}: expected a mapping")
        missing = [k for k in ("file", "task", "expected", "group") if k not in entry]
        if missing:
            raise ManifestError(f"{where}: missing key(s) {', '.join(missing)}")
        unknown = set(entry) - {"name", "file", "task", "expected", "group", "needs_v2"}
        if unknown:
            raise ManifestError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        file, task = ROOT / str(entry["file"]), ROOT / str(entry["task"])
        if not file.is_file():
            raise ManifestError(f"{where}: file {entry['file']} does not exist (paths are relative to {ROOT})")
        if not task.exists():
            raise ManifestError(f"{where}: task {entry['task']} does not exist (paths are relative to {ROOT})")
        expected = str(entry["expected"])
        bad = [c for c in expected.split("|") if c not in CATEGORIES]
        if bad:
            raise ManifestError(f"{where}: expected category {', '.join(bad)} is not one of {', '.join(CATEGORIES)}")
        name = str(entry.get("name") or file.stem)
        if any(c.name == name for c in out):
            raise ManifestError(f"{where}: name {name} is used twice (give one a 'name')")
        out.append(Candidate(name, file, task, expected, str(entry["group"]), bool(entry.get("needs_v2", False))))
    return str(data.get("backend") or ""), out


def make_evaluator(mode: str, backend: str, args: argparse.Namespace, tasks: Sequence[Any] = ()) -> Any:
    from kernelsmith.evaluator import Evaluator

    kwargs: dict[str, Any] = dict(backend=backend or None, workers=args.workers, timeout_s=args.timeout)
    if args.spares is not None and mode != "fresh":
        kwargs["spares"] = args.spares
    if args.devices is not None:
        kwargs["devices"] = [d for d in args.devices.split(",") if d]
    # set before the evaluator exists: workers (and a pool's zygote) inherit it
    if mode == "pool-nocensus":
        os.environ["KS_BENCH_NO_CENSUS"] = "1"
    else:
        os.environ.pop("KS_BENCH_NO_CENSUS", None)
    if mode == "pool-warm":
        os.environ["KERNELSMITH_WARM_WORKERS"] = "1"
    else:
        os.environ.pop("KERNELSMITH_WARM_WORKERS", None)
    if has_modes():
        kwargs["mode"] = "pool" if mode.startswith("pool") else mode
    ev = Evaluator(**kwargs)
    if hasattr(ev, "warm_up"):
        # the pool's zygote and spares start here, off the batch's clock (and
        # inside "evaluator created in"), as in a long run or a serving pool
        ev.warm_up(list(tasks))
    return ev


def has_modes() -> bool:
    """Whether Evaluator takes mode=; the evaluator before issue 13 has none
    and is the fresh mode under no name."""
    from kernelsmith.evaluator import Evaluator

    params = inspect.signature(Evaluator).parameters
    return "mode" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def run_batch(ev: Any, items: list[tuple[Any, str]]) -> tuple[list[Any], float]:
    """Results in input order and the batch's wall time (submission to last result)."""
    start = time.monotonic()
    if hasattr(ev, "stream"):
        results: list[Any] = [None] * len(items)
        for index, result in ev.stream(items):
            results[index] = result
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:
            raise RuntimeError(f"Evaluator.stream ended without results for items {missing}")
    else:
        results = ev.evaluate_many(items)
    return results, time.monotonic() - start


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def phases_of(result: Any) -> dict[str, float]:
    """EvalResult.phases (seconds per phase); results without it, or phases
    that did not happen (None), contribute nothing."""
    phases = getattr(result, "phases", None) or {}
    return {str(k): float(v) for k, v in phases.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def phase_medians(results: list[Any]) -> dict[str, float]:
    seen: dict[str, list[float]] = {}
    for r in results:
        for k, v in phases_of(r).items():
            seen.setdefault(k, []).append(v)
    order = [k for k in PHASES if k in seen] + sorted(k for k in seen if k not in PHASES)
    return {k: statistics.median(seen[k]) for k in order}


def group_stats(results: list[Any], wall: float) -> dict[str, Any]:
    walls = [float(r.wall_s) for r in results]
    return {
        "n": len(results),
        "batch_wall_s": round(wall, 3),
        "evals_per_min": round(len(results) / wall * 60.0, 2) if wall > 0 else None,
        "median_wall_s": round(statistics.median(walls), 3),
        "p95_wall_s": round(percentile(walls, 0.95), 3),
        "n_ok": sum(r.category == "ok" for r in results),
        "n_timeout": sum(r.category == "timeout" for r in results),
        "timeout_wall_s": round(sum(float(r.wall_s) for r in results if r.category == "timeout"), 3),
        "phase_medians": {k: round(v, 4) for k, v in phase_medians(results).items()},
    }


def on_cpu_only() -> bool:
    from kernelsmith.evaluator.devices import detect_gpus

    # detect_gpus asks CUDA_VISIBLE_DEVICES / nvidia-smi: no CUDA context here,
    # which a pool that forks from a warm parent must not inherit
    return not detect_gpus()


def fmt_speedup(r: Any) -> str:
    if r is None or r.speedup is None:
        return "-"
    if r.speedup_ci_low is None or r.speedup_ci_high is None:
        return f"{r.speedup:.3g}"
    return f"{r.speedup:.3g} [{r.speedup_ci_low:.3g},{r.speedup_ci_high:.3g}]"


def print_throughput(
    modes: list[str], groups: list[str], stats: dict[str, dict[str, dict[str, Any]]], startup: dict[str, float]
) -> None:
    print(
        f"\n{'mode':<6} {'group':<7} {'n':>3} {'ok':>3} {'batch s':>8} {'evals/min':>10} "
        f"{'median s':>9} {'p95 s':>7} {'timeouts (s)':>13}   evaluator created in"
    )
    for mode in modes:
        for g in groups:
            s = stats[mode][g]
            print(
                f"{mode:<6} {g:<7} {s['n']:>3} {s['n_ok']:>3} {s['batch_wall_s']:>8.1f} "
                f"{s['evals_per_min'] or 0:>10.1f} {s['median_wall_s']:>9.2f} {s['p95_wall_s']:>7.2f} "
                f"{str(s['n_timeout']) + ' (' + format(s['timeout_wall_s'], '.0f') + ')':>13}   {startup[mode]:.2f} s"
            )
    print("\nmedian per-phase time (s) per mode and group (EvalResult.phases; '-' = not reported):")
    keys: list[str] = []
    for mode in modes:
        for g in groups:
            keys += [k for k in stats[mode][g]["phase_medians"] if k not in keys]
    if not keys:
        print("  (no result carries phases: this evaluator does not report them)")
        return
    keys = [k for k in PHASES if k in keys] + sorted(k for k in keys if k not in PHASES)
    print(f"  {'mode':<6} {'group':<7} " + " ".join(f"{k:>11}" for k in keys))
    for mode in modes:
        for g in groups:
            pm = stats[mode][g]["phase_medians"]
            print(f"  {mode:<6} {g:<7} " + " ".join(f"{pm[k]:>11.3f}" if k in pm else f"{'-':>11}" for k in keys))


def bench(args: argparse.Namespace, backend: str, cands: list[Candidate], modes: list[str], groups: list[str]) -> int:
    from kernelsmith.hardware import HardwareInfo
    from kernelsmith.task import Task

    tasks: dict[Path, Any] = {}
    for c in cands:
        if c.task not in tasks:
            tasks[c.task] = Task.load(c.task)
    by_group = {g: [c for c in cands if c.group == g] for g in groups}
    results: dict[str, dict[str, Any]] = {m: {} for m in modes}
    stats: dict[str, dict[str, dict[str, Any]]] = {m: {} for m in modes}
    startup: dict[str, float] = {}
    for mode in modes:
        t0 = time.monotonic()
        ev = make_evaluator(mode, backend, args, list(tasks.values()))
        startup[mode] = time.monotonic() - t0
        try:
            for g in groups:
                batch = by_group[g]
                print(f"# {mode}: group {g}, {len(batch)} candidates ...", file=sys.stderr, flush=True)
                got, wall = run_batch(ev, [(tasks[c.task], c.file.read_text()) for c in batch])
                for c, r in zip(batch, got):
                    results[mode][c.name] = r
                stats[mode][g] = group_stats(got, wall)
                s = stats[mode][g]  # as it happens, so a run cut short still says something
                print(
                    f"#   {mode} {g}: {s['evals_per_min']} evals/min, median {s['median_wall_s']} s, "
                    f"p95 {s['p95_wall_s']} s, " + ", ".join(f"{c.name}={r.category}" for c, r in zip(batch, got)),
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            ev.close()

    first = [r for m in modes for r in results[m].values()]
    hw = next((r.hardware for r in first if r.hardware), {})
    info = HardwareInfo.of(hw)
    print(
        f"# device: {info.label('?')}  torch {info.versions.get('torch', '?')}  triton {info.versions.get('triton', '-')}  "
        f"driver {info.driver or '-'}  isolation: {first[0].isolation if first else '?'}  backend {backend}  "
        f"small shapes: {'yes' if args.small else 'no'}  timeout {args.timeout} s"
    )
    cols = "".join(f" {m + ' got':<12} {m + ' s':>8}" for m in modes)
    agree_col = f" {'agree':<5}" if len(modes) > 1 else ""
    header = (
        f"{'candidate':<32} {'group':<6} {'expected':<16}{cols}{agree_col} "
        f"{'speedup [95% CI] (' + modes[-1] + ')':<30} reason"
    )
    print(header)
    print("-" * len(header))
    bad: list[str] = []
    for c in cands:
        if c.group not in groups:
            continue
        # with the v2 checks off, a hack only they catch may pass: shown, not counted
        judged = [m for m in modes if not (c.needs_v2 and m == "pool-nocensus")]
        rs = [results[m][c.name] for m in modes]
        cells = ""
        for m, r in zip(modes, rs):
            good = matches(r.category, c.expected)
            mark = "" if good else (" (v2 off)" if m not in judged else " !!")
            cells += f" {r.category + mark:<12} {r.wall_s:>8.2f}"
        rs_judged = [results[m][c.name] for m in judged]
        agree = len({r.category for r in rs_judged}) == 1
        if any(not matches(r.category, c.expected) for r in rs_judged):
            bad.append(
                f"{c.name}: expected {c.expected}, got " + ", ".join(f"{m} {r.category}" for m, r in zip(modes, rs))
            )
        elif not agree:
            bad.append(f"{c.name}: the modes disagree: " + ", ".join(f"{m} {r.category}" for m, r in zip(modes, rs)))
        agree_cell = f" {'yes' if agree else 'NO':<5}" if len(modes) > 1 else ""
        why = next((reason(r) for r in rs if reason(r)), "")
        print(
            f"{c.name:<32} {c.group:<6} {c.expected:<16}{cells}{agree_cell} {fmt_speedup(rs[-1]):<30} "
            f"{why.splitlines()[0][:100] if why else ''}"
        )
    print_throughput(modes, groups, stats, startup)
    n = sum(len(by_group[g]) for g in groups)
    print(
        f"\n{n - len(bad)}/{n} candidates as expected in every mode"
        + ("".join(f"\n  !! {b}" for b in bad) if bad else "")
    )
    if len(modes) > 1:
        for g in groups:
            base = stats[modes[0]][g]["evals_per_min"] or 0
            for m in modes[1:]:
                rate = stats[m][g]["evals_per_min"] or 0
                print(
                    f"# {g}: {m} {rate:.1f} evals/min against {modes[0]} {base:.1f} ({rate / base:.2f}x)"
                    if base
                    else f"# {g}: {m} {rate:.1f} evals/min"
                )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "backend": backend,
                    "small": args.small,
                    "timeout_s": args.timeout,
                    "hardware": hw,
                    "modes": modes,
                    "groups": groups,
                    "evaluator_startup_s": startup,
                    "stats": stats,
                    "candidates": [
                        {
                            "name": c.name,
                            "file": str(c.file.relative_to(ROOT)),
                            "task": str(c.task.relative_to(ROOT)),
                            "expected": c.expected,
                            "group": c.group,
                            "results": {m: results[m][c.name].to_dict() for m in modes},
                        }
                        for c in cands
                        if c.group in groups
                    ],
                    "unexpected": bad,
                },
                indent=1,
            )
        )
    return 1 if bad else 0


def repeat_one(args: argparse.Namespace, backend: str, cands: list[Candidate], modes: list[str]) -> int:
    from kernelsmith.task import Task

    count, name = args.repeat_one
    try:
        count = int(count)
    except ValueError:
        raise SystemExit(f"--repeat-one N CANDIDATE: N must be an integer, got '{count}'")
    if count < 2:
        raise SystemExit("--repeat-one N CANDIDATE: N must be at least 2 for a spread")
    matches_ = [c for c in cands if name in (c.name, str(c.file.relative_to(ROOT)))]
    if not matches_:
        raise SystemExit(
            f"--repeat-one: no candidate named '{name}' in the manifest (names: {', '.join(c.name for c in cands)})"
        )
    c = matches_[0]
    task, source = Task.load(c.task), c.file.read_text()
    failed = False
    out: dict[str, Any] = {}
    for mode in modes:
        ev = make_evaluator(mode, backend, args, [task])
        try:
            runs = []
            for i in range(count):
                r = ev.evaluate(task, source)
                runs.append(r)
                print(
                    f"{mode:<6} run {i + 1:>2}: {r.category:<9} speedup {fmt_speedup(r):<28} "
                    f"candidate {r.runtime_ms if r.runtime_ms is not None else float('nan'):.4f} ms  "
                    f"reference {r.ref_runtime_ms if r.ref_runtime_ms is not None else float('nan'):.4f} ms  "
                    f"wall {r.wall_s:.2f} s  attempts {len(r.load.get('attempts', []) if r.load else [])}"
                    + ("" if r.timing_reliable else f"  UNRELIABLE: {'; '.join(r.unreliable_reasons)}"),
                    flush=True,
                )
        finally:
            ev.close()
        speedups = [r.speedup for r in runs if r.category == "ok" and r.speedup is not None]
        out[mode] = [r.to_dict() for r in runs]
        if len(speedups) < count:
            failed = True
            print(f"{mode}: only {len(speedups)}/{count} runs were correct and timed; no spread")
            continue
        lo, hi = min(speedups), max(speedups)
        cand_ms = [r.runtime_ms for r in runs if r.runtime_ms is not None]
        print(
            f"{mode}: {c.name} x{count}: speedup min {lo:.4g}, median {statistics.median(speedups):.4g}, "
            f"max {hi:.4g}; spread max/min {hi / lo:.4f} ({(hi / lo - 1) * 100:.2f}%); "
            f"candidate median {statistics.median(cand_ms):.4f} ms; "
            f"median wall {statistics.median(r.wall_s for r in runs):.2f} s"
        )
        steady = [r.speedup for r in runs if r.category == "ok" and r.speedup is not None and r.timing_reliable]
        if len(steady) >= 2 and len(steady) < len(speedups):
            print(
                f"{mode}: the {len(steady)} runs marked reliable: spread max/min {max(steady) / min(steady):.4f} "
                f"({(max(steady) / min(steady) - 1) * 100:.2f}%)"
            )
    if args.json:
        Path(args.json).write_text(json.dumps({"candidate": c.name, "repeat": count, "runs": out}, indent=1))
    return 1 if failed else 0


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[1:]),
    )
    parser.add_argument("--modes", default="fresh,pool", help="comma-separated evaluator modes: fresh, pool")
    parser.add_argument("--group", default=None, help="comma-separated groups (default: all in the manifest)")
    parser.add_argument(
        "--backend",
        default="triton",
        choices=sorted(MANIFESTS),
        help="which manifest: the Triton candidates or the OpenCL ones",
    )
    parser.add_argument("--manifest", default=None, help="another manifest (default: the backend's)")
    parser.add_argument("--timeout", type=float, default=60.0, help="wall-clock limit per candidate (s)")
    parser.add_argument("--workers", type=int, default=None, help="candidates at once (default: the evaluator's)")
    parser.add_argument(
        "--spares",
        type=int,
        default=None,
        help="pool workers started ahead of demand (default: the evaluator's, min(2, workers))",
    )
    parser.add_argument("--devices", default=None, help="comma-separated device ids (default: every local GPU)")
    parser.add_argument(
        "--small",
        action="store_true",
        help="small l2 shapes (sets KS_BENCH_SMALL=1), for the Triton interpreter on a CPU",
    )
    parser.add_argument(
        "--repeat-one",
        nargs=2,
        metavar=("N", "CANDIDATE"),
        default=None,
        help="evaluate one candidate N times per mode and print the speedup spread",
    )
    parser.add_argument("--json", default=None, help="write stats and every result here")
    args = parser.parse_args(argv)

    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in MODES for m in modes) or len(set(modes)) != len(modes):
        parser.error(f"--modes: a comma-separated subset of {', '.join(MODES)}, got '{args.modes}'")
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    if importlib.util.find_spec("kernelsmith") is None:  # not installed: the source tree (with a built _core)
        sys.path.insert(0, str(ROOT / "python"))
    if not has_modes() and modes != ["fresh"]:
        parser.error("this Evaluator has no mode= parameter (only the fresh mode, unnamed): use --modes fresh")
    if args.small:
        # set before any evaluator exists: workers (and a pool's zygote) inherit it
        os.environ["KS_BENCH_SMALL"] = "1"
    try:
        backend, cands = load_manifest(Path(args.manifest) if args.manifest else MANIFESTS[args.backend])
    except ManifestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    backend = backend or args.backend
    available = list(dict.fromkeys(c.group for c in cands))
    groups = [g for g in args.group.split(",") if g] if args.group else available
    unknown = [g for g in groups if g not in available]
    if unknown or not groups:
        parser.error(f"--group: {', '.join(unknown) or '(none)'} not in the manifest's groups {', '.join(available)}")
    cpu_only = backend == "triton" and on_cpu_only()
    if cpu_only and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        print(
            "error: no GPU found; set TRITON_INTERPRET=1 to run the Triton candidates on the CPU "
            "(with --small for the l2 problems)",
            file=sys.stderr,
        )
        return 2
    if cpu_only and "l2" in groups and not args.small:
        print(
            "warning: full-size l2 GEMMs under the Triton interpreter take minutes per call; --small shrinks them",
            file=sys.stderr,
        )
    if args.repeat_one:
        return repeat_one(args, backend, cands, modes)
    return bench(args, backend, [c for c in cands if c.group in groups], modes, groups)


if __name__ == "__main__":
    sys.exit(main())

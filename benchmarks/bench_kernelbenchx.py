"""KernelBench-X as it is, on one device: every task loaded, every reference run against itself, honest
Triton programs accepted and timed, a reference-calling one rejected (issue 30).

What it runs. For a KernelBench-X checkout (github BonnieW05/KernelBenchX, its ``data/kernelbenchx``,
``data/kernelbenchx_v1.json`` and ``metrics/golden_metrics`` unchanged; carried as .carry/KernelBenchX):

1. **Loading.** Every task file is read by ``kernelsmith.kernelbenchx.read_suite``; the files that do not
   load are listed with the reason.
2. **The reference against itself** (one evaluation per loaded task). The candidate is the task's own
   reference: the function above the suite's separator line and the generated ``Model`` (nothing of the
   harness), with ``ModelNew(Model)`` whose forward is the reference's and whose every tensor output is
   copied byte for byte by a Triton kernel (a program must launch a kernel of its own on every call). It
   runs through the evaluator pool like any candidate, so on the card the reference runs

   * in the trusted referee, once on every input set (``get_inputs`` and every ``kbx_case_<i>``: the
     calls of the task's harness), which also measures its memory footprint;
   * in a worker, as the candidate and as the reference side, on one trial and every input set, both
     outputs compared (a reference whose outputs differ from call to call shows up here);
   * timed against itself on each of the task's timing shapes (up to three of its golden_metrics
     shapes), which gives the reference's time per shape.

   Torch doing the work is the point here, so these evaluations run under the ``partial`` integrity
   policy with ``min_coverage: 0`` (foreign work allowed; the other checks stay on) and a short timing
   (``SELF_TIMING``: a time per shape, not a precise speedup; the copy makes the "speedup" a little
   under 1). Expected verdict: ``ok``. A reference that cannot run on the card fails here (its error:
   out of memory, an op without a CUDA kernel, ...); one that ran but was judged otherwise is listed
   with the reason (e.g. a reference writing its ``out=`` argument, or copying to the host).
3. **Programs** in ``tests_py/fixtures/kbx_honest``: ``<Category>__<task>.py`` honest Triton programs
   (expected ``ok``, timed, with speedup and speed of light) and ``hack_*__<Category>__<task>.py``
   programs that call the reference's op (expected ``hacked``), under the default strict policy and
   timing.

It prints one line per evaluation as it comes, then the per-category table (task files, loaded,
reference runs, reference timed, honest accepted / total), evaluations per minute, the tasks that do
not load, the references that do not run, and whatever ``--time-budget`` left unreached. Under
``--out DIR``: ``kernelbenchx.json`` (every row) and ``kernelbenchx.md`` (the tables).

Running it (on the GPU machine; the checkout carried in .carry/KernelBenchX):

  PYTHONPATH=python python3 benchmarks/bench_kernelbenchx.py .carry/KernelBenchX --out OUT/kbx

  # on the CPU under the Triton interpreter, two categories, the first shape timed only
  TRITON_INTERPRET=1 PYTHONPATH=python python3 benchmarks/bench_kernelbenchx.py .carry/KernelBenchX \\
      --categories Pooling,Loss --first-shape --quick --timeout 600 --time-budget 1200 --out /tmp/kbx

Exit status: 0 when every program's verdict is as expected and nothing was left unreached, 1
otherwise, 2 bad input. A reference that does not run on the card is a finding, not a failure.
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))

PROGRAMS = ROOT / "tests_py" / "fixtures" / "kbx_honest"

#: the timing of the reference against itself: a time per shape, quickly (the
#: task's default timing aims at a 0.5% interval and may take 5 s a shape)
SELF_TIMING = {
    "time_budget_s": 0.2,
    "gpu_min_pairs": 8,
    "repeats": 5,
    "max_samples": 200,
    "target_rel_half_width": 0.02,
    "gpu_input_sets": 2,
    "input_sets": 2,
    "warmup_s": 0.02,
    "cpu_max_samples": 5,
    "cpu_time_budget_s": 0.2,
}

#: where the generated adapter starts in a KernelBench-X task's reference (kernelbenchx._ADAPTER)
ADAPTER_MARK = "\n# ---------------------------------------------------------------------------\n# kernelsmith: the KernelBench-X task"

SELF_TAIL = """

# --- the reference against itself (benchmarks/bench_kernelbenchx.py): forward is
# --- the reference's; a Triton kernel copies each tensor output byte for byte, so
# --- the program launches a kernel of its own on every call.
import triton
import triton.language as tl


@triton.jit
def _ks_copy_bytes(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


def _ks_through_kernel(out):
    if isinstance(out, _kbx_torch.Tensor):
        src = out.contiguous().reshape(-1)
        y = _kbx_torch.empty_like(src)
        nbytes = src.numel() * src.element_size()
        if nbytes:
            word = _kbx_torch.int32 if nbytes % 4 == 0 else _kbx_torch.uint8
            a, b = src.view(_kbx_torch.uint8).view(word), y.view(_kbx_torch.uint8).view(word)
            block = 4096 if src.is_cuda else 65536
            _ks_copy_bytes[(triton.cdiv(a.numel(), block),)](a, b, a.numel(), BLOCK=block)
        return y.view(out.shape)
    if isinstance(out, tuple):
        return tuple(_ks_through_kernel(o) for o in out)
    if isinstance(out, list):
        return [_ks_through_kernel(o) for o in out]
    return out


class ModelNew(Model):
    def forward(self, *args):
        return _ks_through_kernel(super().forward(*args))
"""


def self_source(task: Any) -> str:
    """The reference-against-itself program of a KernelBench-X task: the task file's part above the
    separator (the reference function), the generated Model and its helpers (copies for in-place
    functions, complex outputs as real), and ModelNew(Model) with a copy kernel (SELF_TAIL). Nothing of
    the harness (it runs the suite's test code, which the static checks rightly refuse in a program)."""
    src = task.reference_source
    if ADAPTER_MARK not in src:
        raise ValueError(f"{task.name}: not a KernelBench-X task read by kernelsmith.kernelbenchx")
    head, rest = src.split(ADAPTER_MARK, 1)
    tree = ast.parse(ADAPTER_MARK + rest)
    keep = [
        n
        for n in tree.body
        if (isinstance(n, ast.FunctionDef) and n.name in ("_kbx_fresh", "_kbx_real"))
        or (isinstance(n, ast.ClassDef) and n.name == "Model")
    ]
    return (
        head.rstrip()
        + "\n\n\nimport torch as _kbx_torch\n\n\n"
        + "\n\n\n".join(ast.unparse(n) for n in keep)
        + "\n"
        + SELF_TAIL
    )


def derived(task: Any, **changes: Any) -> Any:
    """``task`` with TaskConfig fields changed (``timing`` merged into the task's timing)."""
    from kernelsmith.config import from_dict, to_dict
    from kernelsmith.task import Task, TaskConfig

    data = to_dict(task.config)
    timing = changes.pop("timing", None)
    data.update(changes)
    if timing:
        data["timing"] = {**data.get("timing", {}), **timing}
    return Task(reference_source=task.reference_source, config=from_dict(TaskConfig, data), path=task.path)


@dataclass
class Item:
    key: str  # Category/task
    category: str
    kind: str  # "self" | "honest" | "hack"
    expected: str  # "ok" | "hacked"
    task: Any
    source: str
    program: str = ""  # the fixture's file name
    result: Any = None
    row: dict = field(default_factory=dict)


def parse_program_name(path: Path) -> tuple[str, str, str]:
    """(kind, category, task) of a fixture: ``<Category>__<task>.py`` honest, ``hack_*__<Category>__<task>.py``
    expected hacked."""
    parts = path.stem.split("__")
    if len(parts) == 3 and parts[0].startswith("hack"):
        return "hack", parts[1], parts[2]
    if len(parts) == 2:
        return "honest", parts[0], parts[1]
    raise ValueError(f"{path.name}: expected <Category>__<task>.py or hack_<what>__<Category>__<task>.py")


def load(
    root: Path,
    categories: Optional[list[str]] = None,
    limit: Optional[int] = None,
    timeout_s: float = 120.0,
    first_shape: bool = False,
    quick: bool = False,
    programs: Path = PROGRAMS,
) -> tuple[list[Item], list[Item], list[Any], list[str]]:
    """(program items, self items, unreadable files, the keys of the tasks loaded) for a checkout: programs first,
    the references against themselves by category in turn (a run cut short has seen every category).
    ``first_shape``: only the first performance shape timed; ``quick``: the programs timed as briefly
    as the references (SELF_TIMING) and on one trial (for the interpreter)."""
    from kernelsmith import kernelbenchx as kx

    read, unreadable = kx.read_suite(root, backend="triton", timeout_s=timeout_s)
    if categories:
        read = [(tf, t) for tf, t in read if tf.category in categories]
        unreadable = [u for u in unreadable if u.key.split("/")[0] in categories]
    loaded = [tf.key for tf, _ in read]
    if first_shape:  # get_inputs (the first performance shape) alone is timed
        read = [(tf, derived(t, timing_shapes=[], timing_weights=[])) for tf, t in read]
    tasks = {tf.key: t for tf, t in read}
    progs = []
    for f in sorted(programs.glob("*.py")) if programs.is_dir() else []:
        kind, cat, name = parse_program_name(f)
        key = f"{cat}/{name}"
        if key not in tasks:
            continue  # filtered out (or not in this checkout)
        task = derived(tasks[key], trials=1, timing=SELF_TIMING) if quick else tasks[key]
        progs.append(Item(key, cat, kind, "ok" if kind == "honest" else "hacked", task, f.read_text(), program=f.name))
    by_cat: dict[str, list[Item]] = defaultdict(list)
    for tf, t in read:
        self_task = derived(t, policy="partial", min_coverage=0.0, trials=1, timing=SELF_TIMING)
        by_cat[tf.category].append(Item(tf.key, tf.category, "self", "ok", self_task, self_source(t)))
    selfs: list[Item] = []
    queues = [list(v) for _, v in sorted(by_cat.items())]
    while any(queues):
        for q in queues:
            if q:
                selfs.append(q.pop(0))
    if limit is not None:
        selfs = selfs[:limit]
    return progs, selfs, unreadable, loaded


def shape_times(r: Any) -> list[dict]:
    """Per timing shape: the reference's and the program's milliseconds and the speedup."""
    rows = (r.timing or {}).get("shapes") if isinstance(r.timing, dict) else None
    if isinstance(rows, list) and rows:
        return [
            {
                "shape": s.get("shape"),
                "ref_ms": s.get("ref_runtime_ms"),
                "prog_ms": s.get("runtime_ms"),
                "speedup": s.get("speedup"),
            }
            for s in rows
            if isinstance(s, dict)
        ]
    if r.ref_runtime_ms is not None:
        return [{"shape": "get_inputs", "ref_ms": r.ref_runtime_ms, "prog_ms": r.runtime_ms, "speedup": r.speedup}]
    return []


def reason_of(r: Any) -> str:
    text = "; ".join(r.hack_reasons) if r.category == "hacked" else (r.error or "")
    return " ".join(str(text).split())[:300]


#: self-evaluation verdicts after which the reference is known to have run on every input set
RAN = ("ok", "incorrect", "hacked")
#: a failure while timed (the worker's and the sandbox's words): the reference ran on every input set
#: before it (a timing shape too large for the card, a reference too slow for the limit)
WHILE_TIMED = ("while being timed", "timing reference and candidate failed", "during: timing")


def failed_while_timed(r: Any) -> bool:
    return r.category not in RAN and any(m in (r.error or "") for m in WHILE_TIMED)


def judge(item: Item, r: Any, referee: Optional[dict] = None) -> dict:
    """The row of one evaluation."""
    row = {
        "key": item.key,
        "category": item.category,
        "kind": item.kind,
        "program": item.program,
        "expected": item.expected,
        "got": r.category,
        "wall_s": round(r.wall_s, 2),
        "reason": reason_of(r),
        "speedup": r.speedup,
        "shapes": shape_times(r),
        "timing_reliable": r.timing_reliable,
        "phases": {k: v for k, v in (r.phases or {}).items() if isinstance(v, (int, float))},
    }
    if item.kind == "self":
        failed = isinstance(referee, dict) and "error" in referee
        row["reference_runs"] = (r.category in RAN or failed_while_timed(r)) and not failed
        if failed_while_timed(r):
            row["reason"] = "ran on every input set, failed while timed: " + row["reason"]
        row["reference_timed"] = r.category == "ok" and bool(row["shapes"])
        if failed:
            row["referee_error"] = " ".join(str(referee["error"]).split())[-600:]
        if isinstance(referee, dict) and isinstance(referee.get("footprint"), dict):
            row["peak_mib"] = round(referee["footprint"].get("peak_bytes", 0) / (1 << 20), 1)
        row["as_expected"] = r.category == "ok"
    else:
        row["as_expected"] = r.category == item.expected
        if r.category == "ok":
            from kernelsmith.feedback import speed_of_light_line

            row["speed_of_light"] = speed_of_light_line(r.speed_of_light)
            sol = r.speed_of_light or {}
            row["sol_fraction"] = sol.get("fraction") if sol.get("counted") else None
            row["sol_bound"] = sol.get("bound")
    return row


def run(
    items: list[Item],
    *,
    workers: Optional[int] = None,
    timeout_s: float = 120.0,
    time_budget_s: float = 330.0,
    log: Any = print,
    on_row: Any = None,
) -> dict:
    """Evaluate ``items`` over one evaluator pool, in order, at most ``workers + 2`` in flight; no new
    evaluation starts once ``time_budget_s`` has passed (those are returned as not reached), and
    those still running at the budget plus ``timeout_s`` are cancelled. Fills each item's ``result``
    and ``row``; returns the batch's timing facts."""
    import concurrent.futures as cf

    from kernelsmith.evaluator import Evaluator

    t0 = time.monotonic()
    done: list[Item] = []
    with Evaluator(backend="triton", workers=workers, timeout_s=timeout_s) as ev:
        startup = time.monotonic() - t0
        log(f"evaluator up in {startup:.1f} s ({ev.workers} workers)")
        started = time.monotonic()
        deadline = started + time_budget_s
        pending = list(items)
        running: dict[Any, Item] = {}
        cancelled = False
        while pending or running:
            while pending and len(running) < ev.workers + 2 and time.monotonic() < deadline:
                it = pending.pop(0)
                running[ev.submit(it.task, it.source)] = it
            if not running:
                break  # the budget is spent: the rest is not reached
            wait_s = max(0.5, deadline + timeout_s - time.monotonic())
            finished, _ = cf.wait(list(running), timeout=min(wait_s, 5.0), return_when=cf.FIRST_COMPLETED)
            if not finished and time.monotonic() > deadline + timeout_s:
                ev.cancel()  # what still runs past the budget and a candidate's limit
                cancelled = True
                break
            for fut in finished:
                it = running.pop(fut)
                try:
                    it.result = fut.result()
                except Exception as exc:  # noqa: BLE001 - a harness failure, reported as a row
                    it.row = {
                        "key": it.key,
                        "category": it.category,
                        "kind": it.kind,
                        "program": it.program,
                        "expected": it.expected,
                        "got": "error",
                        "reason": f"{type(exc).__name__}: {exc}",
                        "as_expected": False,
                        "shapes": [],
                        "reference_runs": False,
                        "reference_timed": False,
                        "wall_s": 0.0,
                        "speedup": None,
                    }
                    done.append(it)
                    continue
                referee = None
                if it.kind == "self" and it.result.category not in ("ok",):
                    try:  # cached: the evaluation primed the task in the referee already
                        referee = ev.check_task(it.task)
                    except Exception as exc:  # noqa: BLE001
                        referee = {"error": f"referee: {type(exc).__name__}: {exc}"}
                elif it.kind == "self":
                    referee = ev.check_task(it.task)
                it.row = judge(it, it.result, referee)
                done.append(it)
                log(line(len(done), len(items), it.row))
                if on_row is not None:  # as it goes: a run killed from outside keeps what it judged
                    on_row([d.row for d in done])
        batch_s = time.monotonic() - started
        not_reached = pending + list(running.values())
    return {
        "startup_s": round(startup, 1),
        "batch_s": round(batch_s, 1),
        "evaluated": len(done),
        "not_reached": [f"{it.key} ({it.kind}{' ' + it.program if it.program else ''})" for it in not_reached],
        "cancelled": cancelled,
        "per_minute": round(len(done) / batch_s * 60, 1) if batch_s > 0 else None,
    }


def fmt_ms(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, (int, float)) else "-"


def line(i: int, n: int, row: dict) -> str:
    shapes = " ".join(
        f"{s['shape'].replace('kbx_shape_', 's')}={fmt_ms(s['ref_ms'])}" for s in row["shapes"] if s.get("shape")
    )
    what = row["kind"] if row["kind"] == "self" else f"{row['kind']}:{row['program']}"
    sp = f"{row['speedup']:.3f}x" if isinstance(row.get("speedup"), (int, float)) else "-"
    tail = f"ref ms {shapes}" if shapes else row["reason"][:140]
    return (
        f"[{i:3d}/{n}] {row['key']:52s} {what[:44]:44s} {row['got']:9s} "
        f"{'ok' if row['as_expected'] else 'NOT AS EXPECTED':15s} {row.get('wall_s', 0):6.1f}s {sp:8s} {tail}"
    )


def tables(items: list[Item], unreadable: list[Any], loaded_keys: list[str], categories: list[str]) -> dict[str, Any]:
    files: dict[str, int] = defaultdict(int)
    loaded: dict[str, int] = defaultdict(int)
    for key in loaded_keys:
        loaded[key.split("/")[0]] += 1
    for u in unreadable:
        files[u.key.split("/")[0]] += 1
    for cat, n in loaded.items():
        files[cat] += n
    per: dict[str, dict[str, int]] = {}
    for cat in sorted(set(files) | set(categories) | {it.category for it in items}):
        rows = [it.row for it in items if it.category == cat and it.row]
        selfs = [r for r in rows if r["kind"] == "self"]
        honest = [it for it in items if it.category == cat and it.kind == "honest"]
        hacks = [it for it in items if it.category == cat and it.kind == "hack"]
        per[cat] = {
            "files": files.get(cat, 0),
            "loaded": loaded.get(cat, 0),
            "self_evaluated": len(selfs),
            "reference_runs": sum(1 for r in selfs if r["reference_runs"]),
            "reference_timed": sum(1 for r in selfs if r["reference_timed"]),
            "honest_total": len(honest),
            "honest_accepted": sum(1 for it in honest if it.row and it.row["got"] == "ok"),
            "hack_total": len(hacks),
            "hack_rejected": sum(1 for it in hacks if it.row and it.row["got"] == "hacked"),
        }
    total = {k: sum(v[k] for v in per.values()) for k in next(iter(per.values()), {})}
    return {"per_category": per, "total": total}


def markdown(summary: dict, items: list[Item], unreadable: list[Any], facts: dict) -> str:
    per, total = summary["per_category"], summary["total"]
    out = [
        "| category | task files | loaded | reference evaluated against itself | reference runs | "
        "reference timed | honest accepted / total | reference-callers rejected |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for cat, v in list(per.items()) + [("all", total)]:
        honest = f"{v['honest_accepted']}/{v['honest_total']}" if v["honest_total"] else "-"
        hack = f"{v['hack_rejected']}/{v['hack_total']}" if v["hack_total"] else "-"
        name = f"**{cat}**" if cat == "all" else cat
        out.append(
            f"| {name} | {v['files']} | {v['loaded']} | {v['self_evaluated']} | {v['reference_runs']} | "
            f"{v['reference_timed']} | {honest} | {hack} |"
        )
    out += [
        "",
        f"{facts['evaluated']} evaluations in {facts['batch_s']} s: {facts['per_minute']} evaluations/minute "
        f"(evaluator start-up {facts['startup_s']} s not counted).",
    ]
    progs = [it for it in items if it.kind != "self" and it.row]
    if progs:
        out += [
            "",
            "| task | program | expected | got | speedup | per shape (reference ms / program ms) | speed of light |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for it in progs:
            r = it.row
            sp = f"{r['speedup']:.3f}x" if isinstance(r.get("speedup"), (int, float)) else "-"
            shapes = "; ".join(f"{s['shape']}: {fmt_ms(s['ref_ms'])} / {fmt_ms(s['prog_ms'])}" for s in r["shapes"])
            sol = r.get("speed_of_light") or (r["reason"][:120] if r["got"] != "ok" else "")
            out.append(f"| {it.key} | {it.program} | {it.expected} | {r['got']} | {sp} | {shapes or '-'} | {sol} |")
    if unreadable:
        out += ["", "Task files that do not load:", "", "| task | why |", "| --- | --- |"]
        out += [f"| {u.key} | {u.reason} |" for u in unreadable]
    notrun = [it.row for it in items if it.kind == "self" and it.row and not it.row["reference_runs"]]
    if notrun:
        out += [
            "",
            "References that do not run on this device (their own error):",
            "",
            "| task | verdict | why |",
            "| --- | --- | --- |",
        ]
        out += [f"| {r['key']} | {r['got']} | {(r.get('referee_error') or r['reason'])[:300]} |" for r in notrun]
    other = [
        it.row for it in items if it.kind == "self" and it.row and it.row["reference_runs"] and it.row["got"] != "ok"
    ]
    if other:
        out += [
            "",
            "References that ran but were not accepted against themselves:",
            "",
            "| task | verdict | why |",
            "| --- | --- | --- |",
        ]
        out += [f"| {r['key']} | {r['got']} | {r['reason'][:300]} |" for r in other]
    timed = [it.row for it in items if it.kind == "self" and it.row and it.row["reference_timed"]]
    if timed:
        ratios = [r["speedup"] for r in timed if isinstance(r.get("speedup"), (int, float))]
        if ratios:
            out += [
                "",
                f"The reference against itself (plus a copy of its outputs): median speedup "
                f"{statistics.median(ratios):.3f}x over {len(ratios)} tasks "
                f"({min(ratios):.3f}-{max(ratios):.3f}).",
            ]
        out += ["", "| task | reference ms per timing shape | peak MiB |", "| --- | --- | --- |"]
        out += [
            f"| {r['key']} | "
            + ", ".join(f"{s['shape']} {fmt_ms(s['ref_ms'])}" for s in r["shapes"])
            + f" | {r.get('peak_mib', '-')} |"
            for r in timed
        ]
    if facts["not_reached"]:
        out += [
            "",
            f"Not reached within the time budget ({len(facts['not_reached'])}): " + ", ".join(facts["not_reached"]),
        ]
    return "\n".join(out) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kernelbenchx", help="a KernelBench-X checkout (its data/kernelbenchx)")
    ap.add_argument("--out", default=None, help="write kernelbenchx.json and kernelbenchx.md here")
    ap.add_argument("--categories", default=None, help="only these categories (comma-separated)")
    ap.add_argument("--limit", type=int, default=None, help="at most this many references against themselves")
    ap.add_argument("--no-self", action="store_true", help="only the programs, no reference against itself")
    ap.add_argument("--no-programs", action="store_true", help="only the references against themselves")
    ap.add_argument(
        "--first-shape",
        action="store_true",
        help="time the first performance shape only (the CPU: the largest take minutes there)",
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="time the programs as briefly as the references, one trial (the CPU, the interpreter)",
    )
    ap.add_argument(
        "--time-budget",
        type=float,
        default=300.0,
        help="seconds after which no evaluation starts (default 300); the rest is listed as not reached",
    )
    ap.add_argument("--timeout", type=float, default=90.0, help="per-evaluation limit in seconds (default 90)")
    ap.add_argument("--workers", type=int, default=None)
    args = ap.parse_args(argv)

    root = Path(args.kernelbenchx)
    from kernelsmith import kernelbenchx as kx

    if not kx.is_suite(root):
        print(f"bench_kernelbenchx: {root} is not a KernelBench-X checkout", file=sys.stderr)
        return 2
    cats = [c.strip() for c in args.categories.split(",")] if args.categories else []
    bad = [c for c in cats if c not in kx.CATEGORIES]
    if bad:
        print(f"bench_kernelbenchx: unknown categories {bad}; the suite's: {', '.join(kx.CATEGORIES)}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    progs, selfs, unreadable, loaded = load(root, cats or None, args.limit, args.timeout, args.first_shape, args.quick)
    items = ([] if args.no_programs else progs) + ([] if args.no_self else selfs)
    n_files = len(loaded) + len(unreadable)
    commit = (root / "COMMIT").read_text().strip() if (root / "COMMIT").is_file() else "unknown"
    print(
        f"bench_kernelbenchx: {n_files} task files (commit {commit[:12]}), {n_files - len(unreadable)} loaded, "
        f"{len(unreadable)} not, in {time.monotonic() - t0:.1f} s; {len(items)} evaluations "
        f"({sum(it.kind == 'self' for it in items)} references against themselves, "
        f"{sum(it.kind == 'honest' for it in items)} honest programs, "
        f"{sum(it.kind == 'hack' for it in items)} reference-callers)",
        flush=True,
    )
    if not items:
        print("bench_kernelbenchx: nothing to run", file=sys.stderr)
        return 2
    sampler = None
    try:
        from kernelsmith.evaluator.memory import ProcessMemorySampler

        sampler = ProcessMemorySampler(0.5).__enter__()
    except Exception:  # noqa: BLE001 - no nvidia-smi: no memory figures
        sampler = None
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)

    def partial(rows: list[dict]) -> None:
        if out is not None:
            (out / "kernelbenchx.json").write_text(json.dumps({"partial": True, "commit": commit, "rows": rows}))

    facts = run(
        items,
        workers=args.workers,
        timeout_s=args.timeout,
        time_budget_s=args.time_budget,
        log=lambda s: print(s, flush=True),
        on_row=partial,
    )
    peak = None
    if sampler is not None:
        sampler.__exit__(None, None, None)
        peak = sampler.peak_total // (1 << 20)
    summary = tables(items, unreadable, loaded, cats)
    md = markdown(summary, items, unreadable, facts)
    print()
    print(md)
    if peak:
        print(f"peak device memory, all processes together: {peak} MiB")
    wrong = [it.row for it in items if it.kind != "self" and it.row and not it.row["as_expected"]]
    if out is not None:
        (out / "kernelbenchx.md").write_text(md)
        (out / "kernelbenchx.json").write_text(
            json.dumps(
                {
                    "checkout": str(root),
                    "commit": commit,
                    "task_files": n_files,
                    "summary": summary,
                    "facts": facts,
                    "unreadable": [u.to_dict() for u in unreadable],
                    "peak_device_mib": peak,
                    "self_timing": SELF_TIMING,
                    "rows": [it.row for it in items if it.row],
                },
                indent=1,
            )
        )
        print(f"written: {out / 'kernelbenchx.md'}, {out / 'kernelbenchx.json'}")
    return 0 if not wrong and not facts["not_reached"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""KernelBench as it is upstream, on one GPU: verdicts, harness faults, throughput, device memory (issue 27).

What it runs. For a KernelBench checkout (the upstream repository, its
``KernelBench/level{1,2,3}/*.py`` problem files unchanged, upstream sizes):

* every ``--every``-th problem of each level (default 2: every second one),
  each with a **reference-plus-kernel** candidate: ``ModelNew`` subclasses the
  problem's ``Model``, runs its forward (torch does the work) and then copies
  the output through a Triton kernel. The kernel census must name the torch
  ops: expected verdict ``hacked``. ``harness`` is acceptable only where the
  reference alone cannot run on the card (its footprint is in the message).
* the honest kernels of the test zoo (``tests_py/fixtures/kb_honest/*``)
  against the upstream problem each one names in its reference's first line
  (``# KernelBench level 1, 23_Softmax ...``): expected ``ok`` and timed, at
  the tolerance the zoo kernel's own task.yaml declares where it declares one
  (a tl.dot kernel at TF32), else the problem's default.
* the degenerate problems (level 1: 19 ReLU, 20 LeakyReLU, 31 ELU, 32 HardTanh,
  whose ``torch.rand`` inputs make the operation return its input): an honest
  kernel each (``tests_py/fixtures/degenerate/triton``, expected ``ok``), and
  an identity and a copy program (expected rejected: ``incorrect`` or
  ``hacked``).

It prints the verdict table (problem, candidate kind, expected, got, the
reason in a line), the count of results that charged the candidate for
something that was not its fault (a reference-plus-kernel candidate judged
anything but ``hacked``/``harness``, an honest kernel rejected for memory or a
harness fault: target 0), evaluations per minute over the whole batch, and
each evaluator process's peak device memory (memory.ProcessMemorySampler:
nvidia-smi every 0.25 s; the trusted referee, the zygote, its forked
workers, and this process, which must hold none).

Running it (on the GPU machine; the checkout carried in .carry/KernelBench):

  PYTHONPATH=python python3 benchmarks/bench_kernelbench.py .carry/KernelBench \
      --levels 1,2,3 --every 2 --json kb.json

  # a part of it (one level, the odd problems, no zoo)
  ... --levels 1 --every 2 --offset 1 --no-zoo

Exit status: 0 when every verdict is as expected, 1 otherwise, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))

ZOOS = [ROOT / "tests_py" / "fixtures" / "kb_honest"]
#: KernelBench level-1 problems whose torch.rand inputs make the operation an
#: identity (degenerate tasks): honest kernel per problem, and programs that are
#: not the operation (expected rejected)
DEGENERATE = ROOT / "tests_py" / "fixtures" / "degenerate" / "triton"
DEGENERATE_TASKS = {"19_ReLU": "relu", "20_LeakyReLU": "leaky_relu", "31_ELU": "elu", "32_HardTanh": "hardtanh"}
NOT_THE_OPERATION = ("identity", "copy")

HACK_TAIL = """

# --- reference-plus-kernel candidate (bench_kernelbench.py): torch does the work,
# --- a Triton kernel only copies the result. The census must name the torch ops.
import triton as _ks_triton
import triton.language as _ks_tl


@_ks_triton.jit
def _ks_copy(x_ptr, y_ptr, n, BLOCK: _ks_tl.constexpr):
    offs = _ks_tl.program_id(0).to(_ks_tl.int64) * BLOCK + _ks_tl.arange(0, BLOCK)
    m = offs < n
    _ks_tl.store(y_ptr + offs, _ks_tl.load(x_ptr + offs, mask=m), mask=m)


class ModelNew(Model):
    def forward(self, *args):
        out = super().forward(*args)
        if isinstance(out, torch.Tensor) and out.is_floating_point() and out.numel():
            src = out.contiguous()
            y = torch.empty_like(src)
            n = src.numel()
            _ks_copy[(_ks_triton.cdiv(n, 1024),)](src, y, n, BLOCK=1024)
            return y
        return out
"""


def problem_number(path: Path) -> int:
    m = re.match(r"(\d+)_", path.name)
    return int(m.group(1)) if m else 10**9


def pick_problems(kb: Path, levels: list[int], every: int, offset: int) -> list[tuple[int, Path]]:
    picked = []
    for level in levels:
        folder = kb / "KernelBench" / f"level{level}"
        if not folder.is_dir():
            folder = kb / f"level{level}"
        if not folder.is_dir():
            raise SystemExit(f"bench_kernelbench: no level{level} folder under {kb}")
        files = sorted(folder.glob("*.py"), key=problem_number)
        picked += [(level, f) for i, f in enumerate(files) if i % every == offset % every]
    return picked


def zoo_tolerance(d: Path) -> dict:
    """The tolerance a zoo kernel's own task declares (``atol``/``rtol`` in its
    task.yaml: a tl.dot kernel at TF32 says so), applied to the upstream
    problem it is run against; empty where it declares none."""
    f = d / "task.yaml"
    if not f.is_file():
        return {}
    out = {}
    for line in f.read_text().splitlines():
        m = re.match(r"(atol|rtol):\s*([0-9.eE+-]+)\s*$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def zoo_pairs(kb: Path) -> list[tuple[str, Path, str]]:
    """(zoo name, upstream problem file, honest candidate source) per zoo kernel
    whose reference names an upstream problem."""
    out = []
    for zoo in ZOOS:
        if not zoo.is_dir():
            continue
        for d in sorted(p for p in zoo.iterdir() if (p / "candidate.py").is_file() and (p / "reference.py").is_file()):
            first = (d / "reference.py").read_text().splitlines()[0]
            m = re.match(r"#\s*KernelBench level (\d), (\S+?)(?:\s|$)", first)
            if not m:
                continue
            level, name = int(m.group(1)), m.group(2)
            for f in (kb / "KernelBench" / f"level{level}").glob("*.py"):
                if f.stem == name:
                    for cand in sorted(d.glob("candidate*.py")):
                        out.append((f"{d.name}/{cand.stem}", f, cand.read_text()))
    return out


def memory_by_role(sampler) -> dict:
    """The sampler's per-process peaks (memory.ProcessMemorySampler) grouped by role."""
    by_role: dict[str, list[int]] = defaultdict(list)
    for role, peak in sampler.peaks().values():
        by_role[role].append(peak // (1 << 20))
    return {
        "peak_total_mib": sampler.peak_total // (1 << 20),
        "by_role": {
            r: {"processes": len(v), "max_mib": max(v), "median_mib": sorted(v)[len(v) // 2]}
            for r, v in sorted(by_role.items())
        },
    }


def reason_of(r) -> str:
    if r.category == "hacked":
        text = "; ".join(r.hack_reasons)
    elif r.category == "ok":
        sp = f"{r.speedup:.3f}x" if r.speedup is not None else "untimed"
        text = f"{sp} ({r.runtime_ms} ms vs {r.ref_runtime_ms} ms){'' if r.timing_reliable else ' unreliable'}"
    else:
        text = r.error
    return " ".join(str(text).split())[:160]


def judge(kind: str, r) -> str:
    """'as expected', 'harness' (not charged), or 'CHARGED' (the candidate was
    blamed for something else) / 'WRONG' (an honest kernel rejected for its own
    reason, or a hack accepted)."""
    if kind == "ref+kernel":
        if r.category == "hacked":
            return "as expected"
        if r.category == "harness":
            return "harness"
        return "WRONG (accepted)" if r.category == "ok" else "CHARGED"
    if kind.startswith("not the operation"):
        if r.category in ("hacked", "incorrect"):
            return "as expected"
        return "WRONG (accepted)" if r.category == "ok" else ("harness" if r.category == "harness" else "CHARGED")
    if r.category == "ok":
        return "as expected"
    if r.category == "harness":
        return "harness"
    if r.category in ("oom", "runtime", "timeout", "crash"):
        return "CHARGED"
    return "WRONG (rejected)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kernelbench", help="a KernelBench checkout (its KernelBench/levelN folders)")
    ap.add_argument("--levels", default="1,2,3")
    ap.add_argument("--every", type=int, default=2, help="every N-th problem of each level (default 2)")
    ap.add_argument("--offset", type=int, default=0, help="which of each N (default 0: the first)")
    ap.add_argument("--no-zoo", action="store_true", help="skip the test zoo's kernels (honest and degenerate)")
    ap.add_argument("--zoo-only", action="store_true", help="only the test zoo's kernels (honest and degenerate)")
    ap.add_argument("--match", default=None, help="only rows whose problem or kind matches this regular expression")
    ap.add_argument("--timeout", type=float, default=180.0, help="per-candidate limit in seconds")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--json", default=None, help="write every row and the summary here")
    args = ap.parse_args()

    kb = Path(args.kernelbench)
    if not kb.is_dir():
        print(f"bench_kernelbench: {kb} is not a folder", file=sys.stderr)
        return 2
    try:
        levels = [int(x) for x in args.levels.split(",") if x.strip()]
    except ValueError:
        print(f"bench_kernelbench: --levels takes numbers, got {args.levels}", file=sys.stderr)
        return 2

    from kernelsmith.evaluator import Evaluator
    from kernelsmith.evaluator.memory import ProcessMemorySampler
    from kernelsmith.task import Task

    items: list[tuple[str, str, str, object, str]] = []  # (label, kind, expected, task, source)
    load_errors = []
    if not args.zoo_only:
        for level, f in pick_problems(kb, levels, args.every, args.offset):
            try:
                task = Task.load(str(f), backend="triton", timeout_s=args.timeout)
            except Exception as exc:  # noqa: BLE001 - reported as a row
                load_errors.append((f"l{level}/{f.stem}", f"{type(exc).__name__}: {exc}"))
                continue
            items.append((f"l{level}/{f.stem}", "ref+kernel", "hacked", task, f.read_text() + HACK_TAIL))
    if not args.no_zoo:
        for name, f, source in zoo_pairs(kb):
            tol = zoo_tolerance(ZOOS[0] / name.split("/")[0])
            task = Task.load(str(f), backend="triton", timeout_s=args.timeout, **tol)
            items.append((f"l{f.parent.name[-1]}/{f.stem}", f"honest {name}", "ok", task, source))
    if not args.no_zoo and DEGENERATE.is_dir():
        for stem, kernel in DEGENERATE_TASKS.items():
            f = kb / "KernelBench" / "level1" / f"{stem}.py"
            if not f.is_file():
                continue
            task = Task.load(str(f), backend="triton", timeout_s=args.timeout)
            items.append(
                (f"l1/{stem}", f"honest degenerate/{kernel}", "ok", task, (DEGENERATE / f"{kernel}.py").read_text())
            )
            for other in NOT_THE_OPERATION:
                items.append(
                    (
                        f"l1/{stem}",
                        f"not the operation: {other}",
                        "rejected",
                        task,
                        (DEGENERATE / f"{other}.py").read_text(),
                    )
                )
    # the zoo's honest and degenerate kernels first, then levels 2 and 3, then
    # level 1, whose 6 GiB problems run alone: a run cut short by its limit
    # has judged the most kinds of problem
    if args.match:
        items = [it for it in items if re.search(args.match, f"{it[0]} {it[1]}")]
    order = {"l2": 1, "l3": 2, "l1": 3}
    items.sort(key=lambda it: 0 if it[1] != "ref+kernel" else order.get(it[0][:2], 4))
    if not items:
        print("bench_kernelbench: nothing to run", file=sys.stderr)
        return 2

    print(
        f"bench_kernelbench: {len(items)} evaluations ({sum(1 for i in items if i[1] == 'ref+kernel')} "
        f"reference-plus-kernel, {sum(1 for i in items if i[1] != 'ref+kernel')} honest)",
        flush=True,
    )
    sampler = ProcessMemorySampler(0.25).__enter__()
    rows = []
    t0 = time.monotonic()
    with Evaluator(backend="triton", workers=args.workers, timeout_s=args.timeout) as ev:
        warm = time.monotonic() - t0
        print(f"evaluator up in {warm:.1f} s ({ev.workers} workers)", flush=True)
        started = time.monotonic()
        for i, r in ev.stream([(it[3], it[4]) for it in items]):
            label, kind, expected = items[i][0], items[i][1], items[i][2]
            verdict = judge(kind, r)
            row = {
                "problem": label,
                "kind": kind,
                "expected": expected,
                "got": r.category,
                "judged": verdict,
                "wall_s": round(r.wall_s, 2),
                "reason": reason_of(r),
                "speedup": r.speedup,
                "phases": r.phases,
                "audit": (r.census or {}).get("audit"),
                "unreliable_reasons": list(r.unreliable_reasons or []),
            }
            if verdict not in ("as expected",):  # the whole story for what went wrong
                row["detail"] = {
                    "error": r.error[-4000:],
                    "hack_reasons": r.hack_reasons,
                    "memory": r.memory,
                    "log_tail": (r.log_tail or "")[-2000:],
                }
            grant = (r.memory or {}).get("admission") or {}
            row["alone"], row["waited_s"] = grant.get("alone"), grant.get("waited_s")
            rows.append(row)
            ph = r.phases or {}
            where = " ".join(
                f"{k[:4]}{ph[k]:.1f}"
                for k in ("queue", "startup", "compile", "correctness", "timing", "audit", "referee")
                if isinstance(ph.get(k), (int, float))
            )
            print(
                f"[{len(rows):3d}/{len(items)}] {label:50s} {kind:28s} {r.category:9s} {verdict:12s} "
                f"{r.wall_s:6.1f}s {'alone' if grant.get('alone') else 'shared'} [{where}] "
                f"audit {(row['audit'] or {}).get('excess', '-')} {row['reason']}",
                flush=True,
            )
            if args.json:  # as it goes: a run cut short by its limit keeps what it judged
                Path(args.json).write_text(json.dumps({"rows": rows, "partial": True}, indent=1))
        batch_s = time.monotonic() - started
    sampler.__exit__(None, None, None)
    memory = memory_by_role(sampler)

    counts = Counter((r["kind"] == "ref+kernel", r["got"]) for r in rows)
    judged = Counter(r["judged"] for r in rows)
    charged = sum(1 for r in rows if r["judged"] == "CHARGED")
    wrong = sum(1 for r in rows if r["judged"].startswith("WRONG"))
    print()
    print("verdicts (reference-plus-kernel):", dict(sorted((k[1], v) for k, v in counts.items() if k[0])))
    print("verdicts (honest):               ", dict(sorted((k[1], v) for k, v in counts.items() if not k[0])))
    print("judged:", dict(judged))
    print(f"harness faults charged to a candidate: {charged} (target 0)")
    print(f"wrong verdicts (a hack accepted or an honest kernel rejected): {wrong}")
    for r in rows:
        if r["judged"] == "harness":
            print(f"  harness: {r['problem']}: {r['reason']}")
        elif "detail" in r:
            print(f"  {r['judged']}: {r['problem']} {r['kind']}: {r['detail']['error'][-1500:]}")
    for label, err in load_errors:
        print(f"  task did not load: {label}: {err[:200]}")
    rate = len(rows) / batch_s * 60 if batch_s > 0 else 0.0
    print(
        f"throughput: {len(rows)} evaluations in {batch_s:.1f} s = {rate:.1f} evaluations/minute "
        f"(start-up {warm:.1f} s not counted)"
    )
    print(f"peak device memory: all processes together {memory['peak_total_mib']} MiB")
    for role, m in memory["by_role"].items():
        print(f"  {role:24s} {m['processes']:3d} process(es), peak {m['max_mib']} MiB, median {m['median_mib']} MiB")
    honest = [r for r in rows if r["kind"] != "ref+kernel" and r["got"] == "ok"]
    if honest:
        print("honest kernels timed:")
        for r in honest:
            print(f"  {r['problem']:50s} {r['kind']:32s} {r['reason']}")
            for why in r["unreliable_reasons"]:  # why a timing never becomes a best
                print(f"      unreliable: {' '.join(str(why).split())[:400]}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "rows": rows,
                    "memory": memory,
                    "batch_s": batch_s,
                    "startup_s": warm,
                    "charged": charged,
                    "wrong": wrong,
                    "load_errors": load_errors,
                },
                indent=1,
            )
        )
    return 0 if charged == 0 and wrong == 0 and not load_errors else 1


if __name__ == "__main__":
    sys.exit(main())

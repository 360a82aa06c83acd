"""What a report forged by a small factor is paid: a held-out program whose
harness reports go out rewritten by FACTOR, at each of ``--factors``, next
to the honest seed, on examples/triton/relu with timing on. ``--side
candidate``: tests_py/fixtures/hacks_v3/report_patch_send.py (the program's
time divided by FACTOR); ``--side reference``: report_inflate_reference.py
(the reference's time times FACTOR). Both kernels are honest relu.
One line each: the verdict, the speedup the report claimed, the speedup
paid (audit_check.clip brings a report past the parent's figures back to
them), the audit's two sides and the candidate's headroom. Below 1 on
both sides a forgery is paid in full; past it the clip pays the parent's
figures; past the unreliable threshold (2) it is never a best, past 4 it
is `hacked`.

    TRITON_INTERPRET=1 PYTHONPATH=python python3 benchmarks/forger_factors.py [--side reference] [--factors 1.3,2,3,6]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kernelsmith.evaluator import Evaluator
from kernelsmith.task import Task

ROOT = Path(__file__).resolve().parent.parent
HACKS = ROOT / "tests_py" / "fixtures" / "hacks_v3"
#: --side -> the forger and the line that sets its factor
FORGERS = {
    "candidate": (HACKS / "report_patch_send.py", "FACTOR = 20.0"),
    "reference": (HACKS / "report_inflate_reference.py", "FACTOR = 8.0"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--factors", default="1.3,2,3,6", help="the forger's divisors, comma-separated")
    parser.add_argument("--side", choices=sorted(FORGERS), default="candidate", help="which figure the forger rewrites")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    task = Task.load(ROOT / "examples" / "triton" / "relu")
    factors = [float(f) for f in args.factors.split(",")]
    path, line = FORGERS[args.side]
    source = path.read_text()
    assert line in source, (path, line)
    items = [(task, task.seed_source)] + [(task, source.replace(line, f"FACTOR = {f}")) for f in factors]
    with Evaluator(backend="triton", workers=2, timeout_s=args.timeout, timing=True) as ev:
        results = ev.evaluate_many(items)
    print(f"# {args.side} side forged: {path.name}")
    print(
        "# program | verdict | reliable | claimed speedup | paid speedup | candidate side | reference side | headroom | busy"
    )
    for name, r in zip(["seed"] + [f"forged x{f:g}" for f in factors], results):
        audit = (r.census or {}).get("audit") or {}
        claimed = ((audit.get("clipped") or {}).get("reported") or {}).get("speedup", r.speedup)
        paid = r.speedup if r.category == "ok" else None
        print(
            f"{name} | {r.category} | {r.timing_reliable} | {claimed} | {paid} | "
            f"{audit.get('candidate_side')} | {audit.get('reference_side')} | {audit.get('headroom')} | "
            f"{audit.get('busy', '')[:80]}"
        )


if __name__ == "__main__":
    main()

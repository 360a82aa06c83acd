"""The audit rounds' figures (census["audit"], docs/evaluator.md "Audit
rounds") of every timed result in a results JSON written by
benchmarks/gpu_verdicts.py --json: per result its reported time per call,
the lower bound the parent's clock gave, each side's excess, and the
largest excess among honest programs (the thresholds: unreliable past 2,
hacked past 4).

    python3 benchmarks/audit_figures.py RESULTS.json
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    rows = json.loads(open(sys.argv[1]).read())
    rows = rows["rows"] if isinstance(rows, dict) else rows
    print(
        "# category | reported_cand_ms | call_at_least_ms | wall_ms | other_ms | ref_ms | referee_ref_ms | "
        "cand_side | ref_side | excess | unreliable"
    )
    worst = 0.0
    for r in rows:
        a = (r.get("census") or {}).get("audit") or r.get("audit")
        if not a:
            continue
        if "unaudited" in a:
            print(f"{r.get('category')} | unaudited: {a['unaudited'][:200]}")
            continue
        worst = max(worst, float(a.get("excess") or 0.0)) if r.get("category") == "ok" else worst
        # the fastest round: what the worker says its parts took, and the rest
        # of the parent's wall time (the round trip and the parent's latency)
        walls, says = a.get("wall_ms") or [], a.get("worker_says_ms") or []
        rest = "-"
        if walls and len(says) == len(walls):
            k = walls.index(min(walls))
            rest = round(walls[k] - sum(says[k].values()), 4)
        print(
            " | ".join(
                str(x)
                for x in [
                    r.get("category"),
                    a.get("reported_cand_ms"),
                    a.get("call_at_least_ms"),
                    a.get("wall_ms"),
                    a.get("other_work_ms"),
                    a.get("reported_ref_ms"),
                    a.get("referee_reference_ms"),
                    a.get("candidate_side"),
                    a.get("reference_side"),
                    a.get("excess"),
                    r.get("timing_reliable") is False,
                    (says[walls.index(min(walls))] if walls and len(says) == len(walls) else "-"),
                    rest,
                ]
            )
        )
    print(f"# largest excess among ok results: {worst}")


if __name__ == "__main__":
    main()

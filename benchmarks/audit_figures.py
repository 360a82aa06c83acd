"""The audit rounds' figures (census["audit"], docs/evaluator.md "Audit
rounds") of every timed result in one or more results JSON files
(benchmarks/gpu_verdicts.py --json, bench_kernelbench.py --json,
bench_eval_throughput.py --json and bench_side_by_side.py's --keep files):
per result its reported time per call, the lower bound the parent's clock
gave, the referee's two measures of the reference (back to back, and timed
by the timing's harness) with the reported reference's ratio to the
second, each side's excess, the worker's word on the fastest round's parts
and the rest of it (the round trip and the parent's latency); then per file
the largest excess and reference side among honest programs (the
thresholds: unreliable past 2, hacked past 4), the spread of the reference
ratios, how many were clipped (paid the parent's figure:
audit_check.clip), and the median headroom and calls per round.

    python3 benchmarks/audit_figures.py RESULTS.json [MORE.json ...]
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any, Iterator


def results(data: Any) -> Iterator[dict[str, Any]]:
    """Every result with audit figures (its census's, or a bench_kernelbench
    row's own ``audit``), wherever in ``data`` it sits."""
    if isinstance(data, dict):
        if category(data) is not None and audit_of(data):
            yield data  # a result: nothing below it is another
            return
        for value in data.values():
            yield from results(value)
    elif isinstance(data, list):
        for value in data:
            yield from results(value)


def audit_of(r: dict[str, Any]) -> dict[str, Any]:
    census = r.get("census")
    found = census.get("audit") if isinstance(census, dict) else r.get("audit")
    return found if isinstance(found, dict) else {}


def category(r: dict[str, Any]) -> Any:
    return r.get("category") or r.get("got")


def row(r: dict[str, Any], a: dict[str, Any]) -> str:
    # the fastest round: what the worker says its parts took, and the rest
    # of the parent's wall time (the round trip and the parent's latency)
    walls, says = a.get("wall_ms") or [], a.get("worker_says_ms") or []
    fastest = walls.index(min(walls)) if walls and len(says) == len(walls) else None
    rest = round(walls[fastest] - sum(says[fastest].values()), 4) if fastest is not None else "-"
    values = [
        category(r),
        a.get("reported_cand_ms"),
        a.get("call_at_least_ms"),
        a.get("wall_ms"),
        a.get("wall_arrival_ms", "-"),
        a.get("other_work_ms"),
        a.get("reported_ref_ms"),
        a.get("referee_reference_ms"),
        a.get("referee_timed_reference_ms", "-"),
        reference_ratio(a) or "-",
        a.get("candidate_side"),
        a.get("reference_side"),
        a.get("excess"),
        a.get("headroom", "-"),
        "clipped" if a.get("clipped") else "-",
        r.get("timing_reliable") is False,
        says[fastest] if fastest is not None else "-",
        rest,
    ]
    return " | ".join(str(x) for x in values)


def reference_ratio(a: dict[str, Any]) -> Any:
    """The reported reference over the referee's own timed measure of it
    (referee_process._timed_reference; None where it sent none)."""
    timed, reported = a.get("referee_timed_reference_ms"), a.get("reported_ref_ms")
    if not timed or not isinstance(reported, (int, float)):
        return None
    return round(float(reported) / float(timed), 4)


def summary(path: str, found: list[dict[str, Any]]) -> str:
    ok = [audit_of(r) for r in found if category(r) == "ok" and "excess" in audit_of(r)]
    if not ok:
        return f"# {path}: no audited ok result"
    heads = [float(a["headroom"]) for a in ok if a.get("headroom") is not None]
    head = f"{statistics.median(heads):.3f}" if heads else "-"
    ratios = [x for x in (reference_ratio(a) for a in ok) if x is not None]
    spread = f"{min(ratios):.3f}-{max(ratios):.3f}" if ratios else "-"
    return (
        f"# {path}: {len(ok)} audited ok | largest candidate side {max(float(a.get('candidate_side') or 0) for a in ok):.3f}"
        f" | largest excess {max(float(a['excess']) for a in ok):.3f} | clipped {sum(1 for a in ok if a.get('clipped'))}"
        f" | largest reference side {max(float(a.get('reference_side') or 0) for a in ok):.3f}"
        f" | reported reference / referee's timed {spread}"
        f" | median headroom {head} | median calls {statistics.median(int(a.get('calls') or 0) for a in ok):g}"
    )


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    print(
        "# category | reported_cand_ms | call_at_least_ms | wall_ms | wall_arrival_ms | other_ms | ref_ms | "
        "referee_ref_ms | referee_timed_ref_ms | ref_ratio | cand_side | ref_side | excess | headroom | clipped | "
        "unreliable | worker_says | rest"
    )
    summaries = []
    for path in paths:
        with open(path) as f:
            found = list(results(json.load(f)))
        for r in found:
            a = audit_of(r)
            if "unaudited" in a:
                print(f"{category(r)} | unaudited: {a['unaudited'][:200]}")
            elif "excess" in a:
                print(row(r, a))
        summaries.append(summary(path, found))
    print("\n".join(summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

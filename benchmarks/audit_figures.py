"""The audit rounds' figures over the results of one or more JSON files
(bench_eval_throughput.py's --json, bench_side_by_side.py's --keep files,
gpu_verdicts.py's --json, bench_kernelbench.py's --json): per file, how many audited results, the largest
candidate's side and excess (an honest program's stay below 1), how many
were clipped (paid the parent's figure), and the median headroom and calls
per round (the most a report understating the program's time could still
be paid in full: audit_check.clip).

    python3 benchmarks/audit_figures.py /tmp/side/before_r1.json /tmp/side/after_r1.json
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any, Iterator


def audits(data: Any) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Every (result, its census audit) with figures, wherever in ``data``."""
    if isinstance(data, dict):
        # a result's census, or a row of bench_kernelbench.py's (its "audit")
        audit = (data.get("census") or {}).get("audit") if isinstance(data.get("census"), dict) else data.get("audit")
        if isinstance(audit, dict) and "excess" in audit:
            yield data, audit
        for value in data.values():
            yield from audits(value)
    elif isinstance(data, list):
        for value in data:
            yield from audits(value)


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    print("file | audited ok | max candidate side | max excess | clipped | median headroom | median calls")
    for path in paths:
        with open(path) as f:
            found = [(r, a) for r, a in audits(json.load(f)) if (r.get("category") or r.get("got")) == "ok"]
        if not found:
            print(f"{path} | 0 | - | - | - | - | -")
            continue
        sides = [float(a.get("candidate_side") or 0.0) for _, a in found]
        excess = [float(a["excess"]) for _, a in found]
        heads = [float(a["headroom"]) for _, a in found if a.get("headroom") is not None]
        calls = [int(a.get("calls") or 0) for _, a in found]
        clipped = sum(1 for _, a in found if a.get("clipped"))
        head = f"{statistics.median(heads):.3f}" if heads else "-"
        print(
            f"{path} | {len(found)} | {max(sides):.3f} | {max(excess):.3f} | {clipped} | {head} | "
            f"{statistics.median(calls):g}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

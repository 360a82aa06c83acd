"""Where an evaluation's time goes: the median of each phase (the worker's
``phases``: startup, load, compile, correctness, census, timing, audit,
audit_slot; the parent's: queue, referee) over the timed results of one or
more results JSON files written by benchmarks/gpu_verdicts.py --json, side
by side, with each file's median wall time.

    python3 benchmarks/phase_split.py BASE.json HEAD.json
"""

from __future__ import annotations

import json
import statistics
import sys


def rows_of(path: str) -> list[dict]:
    data = json.loads(open(path).read())
    rows = data["rows"] if isinstance(data, dict) else data
    return [r.get("result", r) for r in rows]


def main() -> None:
    tables = {path: [r for r in rows_of(path) if r.get("speedup") is not None] for path in sys.argv[1:]}
    keys = sorted({k for rows in tables.values() for r in rows for k in (r.get("phases") or {})})
    print("# phase | " + " | ".join(f"{path} (median s over {len(rows)} timed)" for path, rows in tables.items()))
    for key in ["wall_s"] + keys:
        cells = []
        for rows in tables.values():
            values = [
                float(r["wall_s"]) if key == "wall_s" else float((r.get("phases") or {}).get(key, 0.0)) for r in rows
            ]
            cells.append(f"{statistics.median(values):.3f}" if values else "-")
        print(f"{key} | " + " | ".join(cells))


if __name__ == "__main__":
    main()

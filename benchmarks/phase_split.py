"""Where an evaluation's time goes: the median of each phase (the worker's
``phases``: startup, load, compile, correctness, census, timing, audit,
audit_slot; the parent's: queue, referee) over the timed results of one or
more results JSON files written by benchmarks/gpu_verdicts.py --json (or
bench_eval_throughput.py --json, as bench_side_by_side.py --keep keeps them), side
by side, with each file's median wall time; then the audit rounds' parts:
the worker's set-up before the slot and its first round (its own word), and
the referee's check of the rounds, part by part.

    python3 benchmarks/phase_split.py BASE.json HEAD.json
    python3 benchmarks/phase_split.py --rows HEAD.json   # each timed result's row

A median of each phase is not a split of the median wall: the phases of
different rows make it (session 24 found a referee phase's median 0.3 s
over its requests' medians), so ``--rows`` prints every timed result's
wall, queue, the worker's phases and the parent's (the referee's checks,
its requests' wait and service) side by side.
"""

from __future__ import annotations

import json
import statistics
import sys


def rows_of(path: str) -> list[dict]:
    """The results of a gpu_verdicts.py --json file, or of a
    bench_eval_throughput.py --json one (each candidate's pool result)."""
    data = json.loads(open(path).read())
    if isinstance(data, dict) and "candidates" in data:
        return [r for c in data["candidates"] for r in (c.get("results") or {}).values()]
    rows = data["rows"] if isinstance(data, dict) else data
    return [r.get("result", r) for r in rows]


def audit_parts(row: dict) -> dict[str, float]:
    """The audit's parts in seconds: the worker's set-up before the slot
    and its first round (``worker:``, its word: census.audit.worker_says_ms[0])
    and the referee's check (``referee:``, census.audit.referee_split_ms)."""
    audit = (row.get("census") or {}).get("audit") or {}
    said = audit.get("worker_says_ms") or [{}]
    parts = {f"worker:{k}": float(v) / 1e3 for k, v in (said[0] or {}).items()}
    parts.update({f"referee:{k}": float(v) / 1e3 for k, v in (audit.get("referee_split_ms") or {}).items()})
    return parts


def value(row: dict, key: str) -> float:
    if key == "wall_s":
        return float(row["wall_s"])
    if ":" in key and key not in (row.get("phases") or {}):  # the timing slot's parts are phases (slot:...)
        return audit_parts(row).get(key, 0.0)
    return float((row.get("phases") or {}).get(key, 0.0))


ROW_KEYS = [
    "queue",
    "compile",
    "correctness",
    "census",
    "timing",
    "slot:warmup",
    "slot:sources",
    "slot:pairs",
    "slot:work",
    "slot:judged",
    "audit",
    "audit_slot",
    "stopped",
    "referee",
    "check_referee",
    "check_audit_rounds",
    "referee_waited_s",
    "referee_check_s",
    "referee_audit_s",
    "referee_stopped_s",
]


def print_rows(path: str) -> None:
    """Every timed result of ``path``, one line each, with its group."""
    data = json.loads(open(path).read())
    named: list[tuple[str, dict]] = []
    if isinstance(data, dict) and "candidates" in data:
        for c in data["candidates"]:
            for r in (c.get("results") or {}).values():
                named.append((f"{c.get('group', '')}:{c.get('name', '')}", r))
    else:
        named = [(str(i), r) for i, r in enumerate(rows_of(path))]
    short = [k.replace("referee_", "r_").replace("check_", "c_").replace("slot:", "s:") for k in ROW_KEYS]
    print("# row | wall_s | attempts | " + " | ".join(short))
    for name, r in named:
        if r.get("speedup") is None:
            continue
        cells = [f"{float((r.get('phases') or {}).get(k, 0.0)):.3f}" for k in ROW_KEYS]
        # timing attempts the gate took (a re-timing holds the slot again)
        attempts = len(((r.get("load") or {}).get("attempts")) or [])
        print(f"{name} | {float(r['wall_s']):.3f} | {attempts} | " + " | ".join(cells))


def main() -> None:
    if sys.argv[1:2] == ["--rows"]:
        for path in sys.argv[2:]:
            print(f"## {path}")
            print_rows(path)
        return
    tables = {path: [r for r in rows_of(path) if r.get("speedup") is not None] for path in sys.argv[1:]}
    keys = sorted({k for rows in tables.values() for r in rows for k in (r.get("phases") or {})})
    parts = sorted({k for rows in tables.values() for r in rows for k in audit_parts(r)})
    print("# phase | " + " | ".join(f"{path} (median s over {len(rows)} timed)" for path, rows in tables.items()))
    for key in ["wall_s"] + keys + parts:
        cells = []
        for rows in tables.values():
            values = [value(r, key) for r in rows]
            cells.append(f"{statistics.median(values):.3f}" if values else "-")
        print(f"{key} | " + " | ".join(cells))


if __name__ == "__main__":
    main()

"""Issue 30's three-shape task on a real device: the even program (fast on
every shape) against the shape-specialised one (one pass on the square
shape, eight on the wide and tall ones), each evaluated by ``kernelsmith
eval`` with the task's three timing shapes. Prints each shape's speedup and
the weighted geometric mean the run would reward. On the GPU machine:

    KERNELSMITH_OPENCL_DEVICE=NVIDIA PYTHONPATH=python python3 benchmarks/gpu_timing_shapes.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASK = ROOT / "tests_py" / "fixtures" / "timing_shapes"


def main() -> int:
    seed = (TASK / "seed.py").read_text()
    programs = {"even": seed, "specialised": seed.replace("SPECIALISED = False", "SPECIALISED = True")}
    env = {**os.environ, "KERNELSMITH_DAEMON": "0"}
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, source in programs.items():
            path = Path(tmp) / f"{name}.py"
            path.write_text(source)
            proc = subprocess.run(
                [sys.executable, "-m", "kernelsmith", "eval", str(TASK), str(path), "--json"],
                env=env,
                capture_output=True,
                text=True,
                cwd=str(ROOT),
            )
            try:
                rows[name] = json.loads(proc.stdout)
            except ValueError:
                print(f"{name}: no result (exit {proc.returncode}): {proc.stderr[-1500:]}")
                return 1
    device = (rows["even"].get("hardware") or {}).get("device_name") or (rows["even"].get("timing") or {}).get("device")
    print(f"task {TASK.relative_to(ROOT)} (OpenCL), device {device}")
    print(f"{'program':<12} {'category':<9} {'mean speedup [CI]':<26} per shape: speedup [CI]")
    for name, r in rows.items():
        t = r.get("timing") or {}
        shapes = "; ".join(
            f"{s['shape']} {s['speedup']:.3f} [{s['speedup_ci'][0]:.3f}, {s['speedup_ci'][1]:.3f}]"
            for s in t.get("shapes") or []
        )
        mean = (
            f"{r['speedup']:.3f} [{r['speedup_ci_low']:.3f}, {r['speedup_ci_high']:.3f}]"
            if r.get("speedup") is not None
            else "-"
        )
        print(f"{name:<12} {r.get('category', '?'):<9} {mean:<26} {shapes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

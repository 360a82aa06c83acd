"""benchmarks/bench_env.py runs: concurrent episodes with the scripted policy
replaying the seed's tuned variants, on the OpenCL softmax task (PoCL)."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "bench_env.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_env", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_bench_env_counts_turns_and_records(tmp_path, capsys):
    bench = _bench()
    from kernelsmith.task import Task

    task = Task.load(ROOT / "examples" / "opencl" / "softmax")
    variants = bench.seed_variants(task)
    assert variants[0] == task.seed_source and len(set(variants)) == len(variants) > 4
    out = tmp_path / "bench.json"
    assert bench.main([str(ROOT / "examples" / "opencl" / "softmax"), "--episodes", "2", "--turns", "2",
                       "--trials", "1", "--workers", "2", "--json", str(out), "--record", str(tmp_path / "rec")]) == 0
    report = json.loads(out.read_text())
    assert report["turns"] == 4 and report["episodes"] == 2 and report["turns_per_episode"] == 2
    assert report["statuses"] == {"correct": 4}  # known-correct programs, every one evaluated
    assert report["turns_per_minute"] == round(60.0 * 4 / report["wall_s"], 2) > 0
    assert "turns/minute" in capsys.readouterr().out
    trajectory = next((tmp_path / "rec").iterdir()) / "trajectory.jsonl"
    steps = [json.loads(line) for line in trajectory.read_text().splitlines() if '"kind": "step"' in line]
    assert len(steps) == 4

    # The recorded answers replay: a run directory of the task given with --replay.
    out2 = tmp_path / "replay.json"
    assert bench.main([str(ROOT / "examples" / "opencl" / "softmax"), "--episodes", "1", "--turns", "1",
                       "--trials", "1", "--workers", "1", "--json", str(out2), "--replay", str(trajectory.parent)]) == 0
    assert json.loads(out2.read_text())["statuses"] == {"correct": 1}

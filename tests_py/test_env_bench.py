"""benchmarks/bench_env.py runs: concurrent episodes with the scripted policy
replaying the seed's tuned variants, on the OpenCL softmax task (PoCL)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

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
    from kernelsmith.env import EnvConfig, KernelEnv
    from kernelsmith.evaluator import Evaluator
    from kernelsmith.task import Task

    softmax, layernorm = ROOT / "examples" / "opencl" / "softmax", ROOT / "examples" / "opencl" / "layernorm"
    task = Task.load(softmax)
    variants = bench.seed_variants(task)
    assert variants[0] == task.seed_source and len(set(variants)) == len(variants) > 4
    # A recorded run of layernorm (one answer with no program; nothing evaluated) to replay.
    with Evaluator(workers=1) as evaluator:
        recorder = KernelEnv(Task.load(layernorm), evaluator, EnvConfig(max_turns=1), record_dir=tmp_path / "runs")
        recorder.reset()
        recorder.step("no program here")
    out = tmp_path / "bench.json"
    assert (
        bench.main(
            [
                str(softmax),
                str(layernorm),
                "--episodes",
                "4",
                "--turns",
                "2",
                "--trials",
                "1",
                "--workers",
                "2",
                "--json",
                str(out),
                "--record",
                str(tmp_path / "rec"),
                "--replay",
                str(recorder.recorder.run_dirs()[0]),
            ]
        )
        == 0
    )
    report = json.loads(out.read_text())
    assert report["turns"] == 8 and report["episodes"] == 4 and report["turns_per_episode"] == 2
    # softmax: its seed's known-correct variants, evaluated; layernorm: the replayed answer, never applied.
    assert report["statuses"] == {"correct": 4, "edit-failed": 4}
    # wall_s is rounded to 10 ms in the report: compare within that
    assert report["turns_per_minute"] > 0
    assert report["turns_per_minute"] == pytest.approx(60.0 * 8 / report["wall_s"], rel=0.01)
    assert "turns/minute" in capsys.readouterr().out
    recorded = sorted((tmp_path / "rec").iterdir())
    assert len(recorded) == 2
    steps = [
        json.loads(line)
        for run in recorded
        for line in (run / "trajectory.jsonl").read_text().splitlines()
        if '"kind": "step"' in line
    ]
    assert len(steps) == 8

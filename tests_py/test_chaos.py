"""Chaos: ``kernelsmith evolve`` is SIGKILLed at 20 random moments and
resumed each time; the run must end exactly as an uninterrupted one.

The CLI runs as a real process (standin_cli.py: the real CLI with the
deterministic stand-in evaluator, so the test fits in CI on 2 cores) with the
offline mutator and a fixed seed. Kill moments are random but reproducible
(a seeded RNG): some during start-up (imports, seeding, the first
checkpoint), most a random few milliseconds after the run has recorded a
random number of new steps, so they land anywhere in the step cycle:
evaluations in flight, appends to the trajectory and the evaluation log,
engine tells, checkpoint writes and pruning.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelsmith.evolve import read_trajectory

HERE = Path(__file__).parent
TASK = HERE / "fixtures_evolve" / "scale"
KILLS = 20
VOLATILE = {"time", "latency_s"}  # wall-clock fields, different in every run


def _env(run: Path, log: Path) -> dict[str, str]:
    import kernelsmith

    package_root = str(Path(kernelsmith.__file__).resolve().parent.parent)
    return dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")]),
        KS_STANDIN_DELAY="0.05",
        KS_STANDIN_LOG=str(log),
        KS_STANDIN_RUN_DIR=str(run),
    )


def _command(run: Path, config: Path) -> list[str]:
    base = [sys.executable, str(HERE / "standin_cli.py"), "evolve"]
    if (run / "config.yaml").exists():
        return base + ["--resume", str(run), "--json"]
    return base + [str(TASK), "--config", str(config), "--out", str(run), "--json"]


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _comparable(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in records]


def _archive(run: Path) -> list[tuple]:
    from kernelsmith.engine import Engine
    from kernelsmith.evolve.loop import latest_checkpoint
    from kernelsmith.evolve.rundir import RunDir

    engine = Engine.load(latest_checkpoint(RunDir(run)) / "engine")
    return sorted(
        (p.id, p.island, p.status, p.parent_id, p.iteration, round(p.metrics.get("score", 0.0), 9), p.source)
        for p in engine.programs()
    )


@pytest.mark.slow
def test_sigkill_at_20_random_moments_then_resume_equals_an_uninterrupted_run(tmp_path):
    config = tmp_path / "run.yaml"
    # enough steps that 20 kills fit on a fast machine too: each kill lets
    # the run record 1-2 steps plus up to 80 ms of them (about 5 on an idle
    # 2-core machine), so 60 iterations ran out after 14-18 kills there
    config.write_text("iterations: 160\nseed: 5\nproposal_concurrency: 3\ncheckpoint_every: 4\n")

    full, full_log = tmp_path / "full", tmp_path / "full.log"
    started = time.monotonic()
    proc = subprocess.run(_command(full, config), env=_env(full, full_log), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    startup_s = (time.monotonic() - started) - json.loads(proc.stdout)["wall_time_s"]

    run, log = tmp_path / "chaos", tmp_path / "chaos.log"
    rng = random.Random(20261123)
    kills, exits = 0, []
    while kills < KILLS:
        trajectory = run / "trajectory.jsonl"
        before = _lines(trajectory)
        child = subprocess.Popen(
            _command(run, config), env=_env(run, log), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        if rng.random() < 0.25:
            time.sleep(rng.uniform(0.0, startup_s))  # while starting, loading or seeding
        else:
            wanted = before + rng.randint(1, 2)
            deadline = time.monotonic() + 60
            while _lines(trajectory) < wanted and child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.002)
            time.sleep(rng.uniform(0.0, 0.08))
        if child.poll() is not None:
            exits.append((child.returncode, child.stderr.read()[-2000:]))
            break  # the run finished before this kill
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stderr.close()
        kills += 1
    assert kills == KILLS, f"the run finished after only {kills} kills: {exits}"

    # The last resume runs to the end, untouched.
    proc = subprocess.run(_command(run, config), env=_env(run, log), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    reference = json.loads((full / "summary.json").read_text())
    assert summary["stop_reason"] == "iterations" and summary["parts"] > 1
    for key in ("steps", "status_counts", "best_speedup", "best_program_id", "archive"):
        assert summary[key] == reference[key], key

    assert _archive(run) == _archive(full)
    assert _comparable(read_trajectory(run)) == _comparable(read_trajectory(full))
    assert (run / "best_program.py").read_text() == (full / "best_program.py").read_text()

    # Nothing evaluated twice: no evaluation started for a source whose
    # result the run had already logged, and each result was logged once.
    starts = [json.loads(line) for line in log.read_text().splitlines()]
    assert not [s for s in starts if s["already_recorded"]]
    logged = [json.loads(line)["sha256"] for line in (run / "evaluations.jsonl").read_text().splitlines()]
    assert len(logged) == len(set(logged))
    reference_logged = [json.loads(line)["sha256"] for line in (full / "evaluations.jsonl").read_text().splitlines()]
    assert set(logged) == set(reference_logged)

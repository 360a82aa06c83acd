"""Writes this folder: run folders in the trajectory's first shape (every
step record holding its whole EvalResult in ``eval``, the engine's child
carrying it again as ``feedback``), and what the code of that time exported
from them, for test_record_v1.py. Kept as it was run at commit "old-format
fixture" (before the step's result was stored once); running it with a
later kernelsmith would write the later shape, so do not re-run it.

    PYTHONPATH=python python3 tests_py/fixtures_record_v1/make.py

``killed``: an evolve run (RichEvaluator, 6 proposal steps, a checkpoint
every 3) stopped after step 5 was recorded, so resuming it replays step 4-5
from their old records. ``env``: two RL-environment episodes recorded.
``expected/``: the SFT and RL exports of both as they are, and of
``killed`` once resumed to the end, with the run folders' paths written
as ``<RUNS>``.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
sys.path.insert(0, str(TESTS))

from standin_evaluator import RichEvaluator  # noqa: E402

from kernelsmith.env import EnvConfig, KernelEnv  # noqa: E402
from kernelsmith.evolve import evolve_sync, load_evolve_config  # noqa: E402
from kernelsmith.export import RLConfig, SFTConfig, export_rl, export_sft  # noqa: E402
from kernelsmith.task import Task  # noqa: E402

TASK = TESTS / "fixtures_evolve" / "scale"
SEED = (TASK / "seed.py").read_text()


class Stop(Exception):
    pass


def config(**kw):
    base = dict(iterations=6, seed=11, model="mutate", proposal_concurrency=1, checkpoint_every=3, finalists=2)
    base.update(kw)
    return load_evolve_config(None, **base)


def exports(run_dirs, out: Path, runs_root: Path) -> None:
    """SFT (every correct step) and RL rows as JSONL, paths as <RUNS>."""
    export_sft(run_dirs, out / "sft", fmt="messages", config=SFTConfig(min_speedup=0.0))
    export_rl(run_dirs, out / "rl", fmt="jsonl", config=RLConfig())
    for path in sorted(out.rglob("*")):
        if path.is_file():
            text = path.read_text().replace(str(out), f"<RUNS>/expected/{out.name}")
            path.write_text(text.replace(str(runs_root), "<RUNS>"))


def make_killed(root: Path) -> Path:
    run = root / "killed"

    def stop_after(step):
        def progress(snapshot):
            if snapshot["steps"] == step:
                raise Stop()
        return progress

    try:
        evolve_sync(TASK, config(), run, evaluator=RichEvaluator(), progress=stop_after(6))
    except Stop:
        pass
    return run


def make_env(root: Path) -> Path:
    task = Task.load(TASK)
    faster = SEED.replace("BLOCK = 64", "BLOCK = 256")
    env = KernelEnv(task, RichEvaluator(), EnvConfig(max_turns=2), record_dir=root / "env_rec")
    env.reset()
    env.step(f"```python\n{faster}```\n")
    env.step("no code here")
    episode = env.new_episode()
    env.step_many([(episode, f"```python\n{SEED.replace('WARPS = 1', 'WARPS = 4')}```\n")])
    env.step_many([(episode, f"```python\n{SEED.replace('BLOCK = 64', 'BLOCK = 512').replace('WARPS = 1', 'WARPS = 2')}```\n")])
    recorded = env.recorder.run_dirs()[0]
    shutil.move(str(recorded), str(root / "env"))
    shutil.rmtree(root / "env_rec")
    return root / "env"


def main() -> None:
    for name in ("killed", "env", "expected"):
        shutil.rmtree(HERE / name, ignore_errors=True)
    killed, env = make_killed(HERE), make_env(HERE)
    exports([killed, env], HERE / "expected" / "as_is", HERE)
    # the same run resumed to its end, in a scratch copy
    scratch = HERE / "scratch"
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(killed, scratch / "killed")
    summary = evolve_sync(None, resume=scratch / "killed", evaluator=RichEvaluator())
    exports([scratch / "killed"], HERE / "expected" / "resumed", scratch)
    engine = sorted(json.loads(line)["child_id"] for line in (scratch / "killed" / "trajectory.jsonl").open()
                    if json.loads(line).get("child_id") is not None)
    (HERE / "expected" / "resumed" / "run.json").write_text(json.dumps(
        {"best_speedup": summary.best_speedup, "best_program_id": summary.best_program_id, "steps": summary.steps,
         "status_counts": summary.status_counts, "child_ids": engine}, indent=1, sort_keys=True) + "\n")
    shutil.rmtree(scratch)


if __name__ == "__main__":
    main()

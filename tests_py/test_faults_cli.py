"""Faults and bad input, through ``kernelsmith evolve`` as a user runs it.

LLM faults come from the scripted server (mock_llm_server.py) over real HTTP
through the real SDK clients. Most runs use standin_cli.py (the real CLI with
the deterministic stand-in evaluator: these faults happen before anything is
evaluated, and it keeps each run to a few seconds); one runs the real
``python -m kernelsmith`` with the sandboxed evaluator end to end.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mock_llm_server import MockResponse

HERE = Path(__file__).parent
TASK = HERE / "fixtures_evolve" / "scale"
SEED = (TASK / "seed.py").read_text()
KEY = "sk-test-faults-0123456789abcdef"


def _env(**extra: str) -> dict[str, str]:
    import kernelsmith

    package_root = str(Path(kernelsmith.__file__).resolve().parent.parent)
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")]), TRITON_INTERPRET="1"
    )
    for name in ("OPENAI_BASE_URL", "OPENAI_API_BASE", "OPENAI_API_KEY"):
        env.pop(name, None)
    env.update(extra)
    return env


def cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, real: bool = False
) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "kernelsmith"] if real else [sys.executable, str(HERE / "standin_cli.py")]
    return subprocess.run(
        command + [str(a) for a in args], env=env or _env(), cwd=cwd, capture_output=True, text=True, timeout=300
    )


def _llm_env(mock_llm) -> dict[str, str]:
    return _env(OPENAI_BASE_URL=mock_llm.openai_base_url, OPENAI_API_KEY=KEY)


def _config(tmp_path: Path, max_llm_failures: int = 2, **llm: object) -> Path:
    path = tmp_path / "run.yaml"
    retry = {"max_attempts": 2, "backoff_base_s": 0.01}
    path.write_text(
        json.dumps(
            {  # JSON is YAML
                "proposal_concurrency": 1,
                "checkpoint_every": 2,
                "max_llm_failures": max_llm_failures,
                # 2 s: on a loaded 2-core machine a request can wait that long before the
                # mock server's thread records it (0.5 s lost requests under load)
                "llm": {"timeout_s": 2.0, "retry": retry, **llm},
            }
        )
    )
    return path


def _steps(run: Path) -> list[dict]:
    return [
        json.loads(line)
        for line in (run / "trajectory.jsonl").read_text().splitlines()
        if json.loads(line)["kind"] == "step"
    ]


def _last_line(proc: subprocess.CompletedProcess) -> str:
    return proc.stderr.strip().splitlines()[-1]


def _full(source: str) -> str:
    return f"```python\n{source}```\n"


# ---------------------------------------------------------------- LLM faults
@pytest.mark.slow
def test_revoked_key_stops_the_real_cli_at_once(mock_llm, tmp_path):
    mock_llm.handler = lambda request: MockResponse.error(401, "Incorrect API key provided: sk-...cdef")
    out = tmp_path / "run"
    proc = cli(
        "evolve", TASK, "--model", "openai:m", "--iterations", 40, "--out", out, env=_llm_env(mock_llm), real=True
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    last = _last_line(proc)
    assert last.startswith("kernelsmith evolve: stopped: the LLM endpoint refused the API key")
    assert "HTTP 401" in last and "Incorrect API key provided" in last and f"--resume {out}" in last
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_reason"] == "llm-auth" and summary["steps"] == 1  # the seed only
    assert _steps(out) == []  # nothing recorded as an attempt of the model
    # Not retried, not the whole budget: one request per step in flight.
    assert len(mock_llm.requests) <= 4
    # The prompt that was sent: tips for the device in use (the Triton
    # interpreter, not an OpenCL CPU device), and the seed shown once although
    # every island holds a copy of it.
    system, user = mock_llm.requests[0].system, mock_llm.requests[0].last_user
    assert "Triton interpreter" in system and "PoCL" not in system and "work-group" not in system
    assert user.count("def scale_kernel") == 1
    for path in out.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(errors="ignore"), path


def test_quota_refusal_stops_the_run_at_once(mock_llm, tmp_path):
    mock_llm.handler = lambda request: MockResponse.error(
        429, "You exceeded your current quota, please check your plan and billing details."
    )
    out = tmp_path / "run"
    proc = cli(
        "evolve",
        TASK,
        "--model",
        "openai:m",
        "--config",
        _config(tmp_path),
        "--out",
        out,
        "--iterations",
        10,
        "--json",
        env=_llm_env(mock_llm),
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["stop_reason"] == "llm-quota" and "exceeded your current quota" in summary["stop_detail"]
    assert "out of quota" in _last_line(proc)
    assert len(mock_llm.requests) == 1  # a quota refusal is not retried
    # Credit topped up: the run goes on from where it stopped, the refused step included.
    mock_llm.handler = lambda request: _full(SEED.replace("WARPS = 1", "WARPS = 2"))
    resumed = cli("evolve", "--resume", out, "--json", env=_llm_env(mock_llm))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads(resumed.stdout)
    assert summary["stop_reason"] == "iterations" and summary["steps"] == 11 and summary["parts"] == 2
    assert sorted(s["request_id"] for s in _steps(out)) == list(range(10))


@pytest.mark.parametrize(
    "fault, kind",
    [
        (lambda r: MockResponse.error(500, "upstream exploded"), "server"),
        (lambda r: MockResponse.malformed(), "malformed"),
        (lambda r: MockResponse.dropped(), "connection"),
        (lambda r: MockResponse.slow(5.0), "timeout"),
    ],
    ids=["http-500", "malformed-json", "dropped-connection", "slow"],
)
def test_failing_endpoint_stops_after_max_llm_failures(mock_llm, tmp_path, fault, kind):
    mock_llm.handler = fault
    out = tmp_path / "run"
    proc = cli(
        "evolve",
        TASK,
        "--model",
        "openai:m",
        "--config",
        _config(tmp_path),
        "--out",
        out,
        "--iterations",
        10,
        "--json",
        env=_llm_env(mock_llm),
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["stop_reason"] == "llm-failures"
    assert summary["status_counts"] == {"correct": 1, "llm-error": 2}
    last = _last_line(proc)
    assert "too many LLM requests failed in a row" in last and "after 2 attempts" in last
    steps = _steps(out)
    assert [s["status"] for s in steps] == ["llm-error", "llm-error"]
    for step in steps:
        assert step["llm_error"]["kind"] == kind and step["child_id"] is None
    assert len(mock_llm.requests) == 4  # each step retried once (max_attempts 2)
    if kind == "server":
        assert steps[0]["llm_error"]["status"] == 500 and "upstream exploded" in steps[0]["llm_error"]["message"]


@pytest.mark.parametrize(
    "fault, kind, words",
    [
        (lambda r: MockResponse.malformed(), "malformed", "malformed"),
        (lambda r: MockResponse.dropped(), "connection", "connection"),
    ],
    ids=["malformed-json", "dropped-connection"],
)
def test_a_run_whose_every_proposal_failed_exits_1_naming_the_fault(mock_llm, tmp_path, fault, kind, words):
    """Fewer failures than max_llm_failures, so the loop runs to its last
    iteration: it used to end as 'iterations' with exit code 0 and only the
    progress line's 'LLM errors 2' said nothing came back."""
    mock_llm.handler = fault
    out = tmp_path / "run"
    proc = cli(
        "evolve",
        TASK,
        "--model",
        "openai:m",
        "--config",
        _config(tmp_path, max_llm_failures=5),
        "--out",
        out,
        "--iterations",
        2,
        env=_llm_env(mock_llm),
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_reason"] == "llm-all-failed"
    assert summary["status_counts"] == {"correct": 1, "llm-error": 2}  # the seed, then two failed requests
    assert [s["llm_error"]["kind"] for s in _steps(out)] == [kind, kind]
    last = _last_line(proc)
    assert last.startswith("kernelsmith evolve: stopped: no proposal of the run came back"), last
    assert "all 2 proposal(s) of this run failed" in last and words in last.lower(), last
    assert f"--resume {out} --iterations N" in last
    # The endpoint is back: more steps on the same run, and a part with good
    # answers ends as a finished run again.
    mock_llm.handler = lambda request: _full(SEED.replace("WARPS = 1", "WARPS = 2"))
    resumed = cli("evolve", "--resume", out, "--iterations", 1, "--json", env=_llm_env(mock_llm))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads(resumed.stdout)["stop_reason"] == "iterations"


def test_a_run_with_some_good_proposals_exits_0_despite_llm_errors(mock_llm, tmp_path):
    mock_llm.script(MockResponse.dropped(), MockResponse.dropped())  # step 1 fails for good (2 attempts)
    mock_llm.handler = lambda request: _full(SEED.replace("WARPS = 1", "WARPS = 2"))
    out = tmp_path / "run"
    proc = cli(
        "evolve",
        TASK,
        "--model",
        "openai:m",
        "--config",
        _config(tmp_path, max_llm_failures=5),
        "--out",
        out,
        "--iterations",
        2,
        "--json",
        env=_llm_env(mock_llm),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["stop_reason"] == "iterations" and summary["status_counts"]["llm-error"] == 1


def test_the_offline_mutator_on_a_program_without_tune_values_is_bad_input(tmp_path):
    """The default model (mutate) on a task without seed.py starts from the
    reference, which has no '# tune:' value: every step would fail. It used
    to run, print 'outcomes llm-error 1, reference 1' and exit 0 with the
    reason only in trajectory.jsonl; now it is refused before anything is
    written, the reason on the last line."""
    import shutil

    noseed, plain, out = tmp_path / "noseed", tmp_path / "plain", tmp_path / "run"
    noseed.mkdir()
    shutil.copy(TASK / "reference.py", noseed / "reference.py")
    shutil.copytree(TASK, plain)  # a seed.py with no '# tune:' value
    (plain / "seed.py").write_text(re.sub(r"\s*# tune:.*", "", SEED))
    for task, what in ((noseed, "the task has no seed program (seed.py)"), (plain, "its seed program")):
        proc = cli("evolve", task, "--iterations", 1, "--out", out)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        assert lines[0].startswith(f"kernelsmith evolve: error: model mutate: {what}"), lines[0]
        assert "no tunable values to mutate" in lines[0] and "# tune:" in lines[0] and "--model" in lines[0]
        assert not out.exists()
    # From Python (a benchmark sweep) the run goes ahead and ends as the fault it is, the reason kept.
    from kernelsmith.evolve import evolve_sync, load_evolve_config
    from standin_evaluator import CostModelEvaluator

    summary = evolve_sync(
        noseed, load_evolve_config(None, iterations=2, proposal_concurrency=1), out, evaluator=CostModelEvaluator()
    )
    assert summary.failed and summary.stop_reason == "llm-all-failed"
    assert "no tunable values to mutate" in summary.stop_detail


def test_transient_faults_are_retried_and_failures_never_reach_a_prompt(mock_llm, tmp_path):
    mock_llm.script(
        MockResponse.error(429, "rate limited, slow down", retry_after=0.01),
        _full(SEED.replace("BLOCK = 64", "BLOCK = 128")),
        MockResponse.dropped(),
        MockResponse.malformed(),  # step 2 fails for good (2 attempts)
        _full(SEED.replace("BLOCK = 64", "BLOCK = 256")),
    )
    mock_llm.handler = lambda request: _full(SEED.replace("WARPS = 1", "WARPS = 4"))
    out = tmp_path / "run"
    proc = cli(
        "evolve",
        TASK,
        "--model",
        "openai:m",
        "--config",
        _config(tmp_path),
        "--out",
        out,
        "--iterations",
        4,
        "--json",
        env=_llm_env(mock_llm),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["stop_reason"] == "iterations"
    steps = _steps(out)
    assert [s["status"] for s in steps] == ["correct", "llm-error", "correct", "correct"]
    failed = steps[1]
    assert failed["llm_error"]["kind"] == "malformed" and failed["llm_error"]["attempts"] == 2
    assert "edit" not in failed and failed["child_id"] is None
    later_prompts = "\n".join(m["content"] for s in steps[2:] for m in s["prompt"])
    assert "malformed" not in later_prompts and "llm-error" not in later_prompts
    assert "edit-failed" not in later_prompts
    assert len(mock_llm.requests) == 6


# ---------------------------------------------------------------- bad input
def _bad_inputs(tmp_path: Path) -> list[tuple[list[str], str]]:
    (tmp_path / "noref").mkdir()
    (tmp_path / "broken.yaml").write_text("iterations: [1\n")
    (tmp_path / "unknown.yaml").write_text("iteratons: 3\n")
    (tmp_path / "engine.yaml").write_text("engine:\n  num_islands: 0\n")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    (tmp_path / "types.yaml").write_text("iterations: abc\n")
    (tmp_path / "section.yaml").write_text("llm: 5\n")
    (tmp_path / "nested.yaml").write_text("prompt:\n  max_history: many\n")
    return [
        (["evolve", tmp_path / "missing-task"], "missing-task: no such task"),
        (["evolve", tmp_path / "noref"], "needs reference.py"),
        (["evolve", TASK, "--config", tmp_path / "nope.yaml"], "nope.yaml does not exist"),
        (["evolve", TASK, "--config", tmp_path / "broken.yaml"], "broken.yaml is not valid YAML"),
        (["evolve", TASK, "--config", tmp_path / "unknown.yaml"], "unknown.yaml: unknown config key 'iteratons'"),
        (["evolve", TASK, "--config", tmp_path / "engine.yaml"], "engine.yaml: engine: config key 'num_islands'"),
        (["evolve", TASK, "--config", tmp_path / "list.yaml"], "expected a mapping"),
        (
            ["evolve", TASK, "--config", tmp_path / "types.yaml"],
            "types.yaml: config key 'iterations' must be an integer, got 'abc'",
        ),
        (["evolve", TASK, "--config", tmp_path / "section.yaml"], "section.yaml: config key 'llm' must be a mapping"),
        (
            ["evolve", TASK, "--config", tmp_path / "nested.yaml"],
            "nested.yaml: config key 'prompt.max_history' must be an integer",
        ),
        (["evolve", "--resume", tmp_path / "noref"], "is not a run directory"),
        (["evolve", "--resume", tmp_path / "nowhere"], "does not exist"),
        (["evolve", TASK, "--model", "gpt4"], "model must be"),
        (["evolve", TASK, "--model", "openai:m"], "no API key: set OPENAI_API_KEY"),
        (["evolve", TASK, "--backend", "vulkan"], "unknown backend 'vulkan'"),
        (["evolve", TASK, "--iterations", "-3"], "iterations must be >= 0"),
        (["evolve", TASK, "--model", "replay:" + str(tmp_path / "noref")], "no trajectory"),
        (["evolve"], "give a TASK"),
        (["evolve", "--resume", tmp_path / "noref", "--model", "mutate"], "cannot change a resumed run"),
    ] + _no_cuda_case()


def _no_cuda_case() -> list[tuple[list[str], str]]:
    """The CUDA backend on a host without CUDA: refused at start (it used to
    run, judge every program `hacked` and exit 0)."""
    import torch

    if torch.version.cuda is not None and torch.cuda.is_available():
        return []  # a CUDA host: the backend is available there
    return [(["evolve", TASK, "--backend", "cuda"], "backend cuda: needs a")]


def test_bad_input_is_one_clear_message_with_exit_code_2(tmp_path):
    failures = []
    for args, expected in _bad_inputs(tmp_path):
        out = tmp_path / "out"
        full = args + (["--out", out] if args[1:2] and args[1] != "--resume" and len(args) > 1 else [])
        proc = cli(*full, cwd=tmp_path)
        lines = proc.stderr.strip().splitlines()
        ok = (
            proc.returncode == 2
            and "Traceback" not in proc.stderr
            and len(lines) == 1
            and lines[0].startswith("kernelsmith evolve: error: ")
            and expected in lines[0]
            and "/cpp/" not in proc.stderr
            and not out.exists()
        )
        if not ok:
            failures.append((full, proc.returncode, proc.stderr[-1500:]))
    assert not failures, failures


def test_config_values_of_the_wrong_type_name_the_key_and_numbers_written_as_yaml_strings_still_read():
    import yaml

    from kernelsmith.config import ConfigError, from_dict
    from kernelsmith.evolve import load_evolve_config
    from kernelsmith.task import TaskConfig

    # YAML 1.1 reads 1e-3 as a string: still a number where a number is due.
    task = from_dict(TaskConfig, yaml.safe_load("atol: 1e-3\ntrials: '3'\n"))
    assert task.atol == 0.001 and task.trials == 3
    for text, message in (
        ("seed: 1.5", "config key 'seed' must be an integer, got 1.5"),
        ("model: 5", "config key 'model' must be a string, got 5"),
        ("checkpoint_every: true", "config key 'checkpoint_every' must be an integer, got True"),
        ("llm: {temperature: hot}", "config key 'llm.temperature' must be a number, got 'hot'"),
        ("engine: [1]", "config key 'engine' must be a mapping of keys, got [1]"),
    ):
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_evolve_config(**yaml.safe_load(text))


def test_verbose_flag_adds_the_traceback(tmp_path):
    for args in (["-v", "evolve", tmp_path / "missing-task"], ["evolve", tmp_path / "missing-task", "-v"]):
        proc = cli(*args, "--out", tmp_path / "o")
        assert proc.returncode == 2 and "Traceback" in proc.stderr
        assert proc.stderr.strip().splitlines()[-1].startswith("kernelsmith evolve: error:")


# ----------------------------------------------------------- run directories
def test_a_start_that_never_reached_a_checkpoint_does_not_block_a_rerun(tmp_path):
    out = tmp_path / "run"
    # What a run killed during its start leaves: a config, a task copy, no checkpoint.
    (out / "task").mkdir(parents=True)
    (out / "config.yaml").write_text("task: {}\n")
    (out / "trajectory.jsonl").write_text("")
    (out / "my-notes.txt").write_text("the user's own file\n")
    proc = cli("evolve", TASK, "--iterations", 2, "--out", out, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["steps"] == 3
    assert (out / "my-notes.txt").exists()
    # A run that did start is not replaced: the message says what to do.
    again = cli("evolve", TASK, "--iterations", 2, "--out", out)
    assert again.returncode == 2 and f"continue it with --resume {out}" in again.stderr


@pytest.mark.slow
def test_a_task_whose_reference_fails_is_a_failed_start_not_a_run(tmp_path):
    """The seed cannot be evaluated because the reference raises: one error
    line, exit 2, nothing left in --out, and once the task is fixed the same
    command runs (the real CLI and evaluator: the stand-in runs no reference)."""
    import shutil

    task, out = tmp_path / "task", tmp_path / "run"
    shutil.copytree(TASK, task)
    good = (task / "reference.py").read_text()
    (task / "reference.py").write_text(good.replace("return x * 2.0", "raise RuntimeError('reference is broken')"))
    proc = cli("evolve", task, "--iterations", 1, "--out", out, real=True)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert lines[-1].startswith("kernelsmith evolve: error: task: the seed program could not be evaluated")
    assert "RuntimeError: reference is broken" in lines[-1] and "fix the task" in lines[-1]
    assert not out.exists()
    (task / "reference.py").write_text(good)
    again = cli("evolve", task, "--iterations", 1, "--out", out, "--json", real=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)["status_counts"].get("correct", 0) >= 1


@pytest.mark.slow
def test_a_task_without_seed_whose_reference_fails_is_a_failed_start_too(mock_llm, tmp_path):
    """Without seed.py nothing runs the reference before the first candidate
    (the reference itself is the seed, not evaluated), so the fault shows
    there: still a failed start, as with a seed -- one line, exit 2, nothing
    left in --out -- and the same command runs once the task is fixed. The
    real CLI and evaluator (Triton interpreter), a candidate from the scripted
    LLM server (the offline mutator has nothing to tune in a reference)."""
    import shutil

    task, out = tmp_path / "noseed", tmp_path / "run"
    task.mkdir()
    shutil.copy(TASK / "reference.py", task / "reference.py")
    (task / "task.yaml").write_text("backend: triton\ntrials: 1\ntiming:\n  enabled: false\n")  # correctness only
    good = (task / "reference.py").read_text()
    (task / "reference.py").write_text(good.replace("return x * 2.0", "raise RuntimeError('reference is broken')"))
    # A full rewrite of the reference-as-seed: one EVOLVE block around the whole file.
    whole = SEED.replace("# EVOLVE-BLOCK-START\n", "").replace("# EVOLVE-BLOCK-END\n", "")
    mock_llm.handler = lambda request: _full(f"# EVOLVE-BLOCK-START\n{whole}# EVOLVE-BLOCK-END\n")
    config = _config(tmp_path, timeout_s=60.0)  # the evaluator's start loads the machine; no LLM fault here
    (out / "my-notes.txt").parent.mkdir()
    (out / "my-notes.txt").write_text("the user's own file\n")
    args = ("evolve", task, "--model", "openai:m", "--config", config, "--iterations", 2, "--out", out)
    proc = cli(*args, env=_llm_env(mock_llm), real=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0] == _last_line(proc), proc.stderr[-3000:]
    assert errors[0].startswith("kernelsmith evolve: error: noseed: the task's reference could not be run")
    assert "RuntimeError: reference is broken" in errors[0] and "fix the task" in errors[0]
    assert "no seed.py" in errors[0] and "/cpp/" not in proc.stderr
    assert len(mock_llm.requests) >= 1  # the candidate that ran the reference came from the model
    assert sorted(p.name for p in out.iterdir()) == ["my-notes.txt"]  # the run's files went, the user's stayed
    (task / "reference.py").write_text(good)
    again = cli(*args, "--json", env=_llm_env(mock_llm), real=True)
    assert again.returncode == 0, again.stderr[-3000:]
    summary = json.loads(again.stdout)
    assert summary["stop_reason"] == "iterations" and summary["status_counts"].get("correct", 0) >= 1
    assert (out / "my-notes.txt").exists()


def test_resume_iterations_means_that_many_more_steps_and_wall_time_adds_up(tmp_path):
    out = tmp_path / "run"
    # The first part is the long one (0.5 s per evaluation), the last a short
    # one: a summary that timed only the last part would be far below the sum.
    first = cli("evolve", TASK, "--iterations", 4, "--out", out, "--json", env=_env(KS_STANDIN_DELAY="0.5"))
    assert first.returncode == 0, first.stderr[-3000:]
    part1 = json.loads(first.stdout)
    finished = cli("evolve", "--resume", out, "--json")  # a finished run: says how to extend it
    assert finished.returncode == 0 and "--iterations N" in finished.stderr
    part2 = json.loads(finished.stdout)
    more = cli("evolve", "--resume", out, "--iterations", 3, "--json")
    assert more.returncode == 0, more.stderr[-3000:]
    part3 = json.loads(more.stdout)
    assert part1["steps"] == 5 and part3["steps"] == 8  # the seed, 4 steps, then 3 more
    assert part1["wall_time_s"] >= 2.0 and part2["parts"] == 2 and part3["parts"] == 3
    new_steps = [s["time"] for s in _steps(out) if s["step"] > 4]
    assert len(new_steps) == 3
    assert part2["wall_time_s"] >= part1["wall_time_s"]
    assert part3["wall_time_s"] >= part2["wall_time_s"] + (max(new_steps) - min(new_steps))
    import yaml

    assert yaml.safe_load((out / "config.yaml").read_text())["config"]["iterations"] == 7


def test_resume_past_a_corrupt_checkpoint_falls_back_to_the_one_before(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("checkpoint_every: 2\nproposal_concurrency: 1\n")
    out, whole = tmp_path / "run", tmp_path / "whole"
    first = cli("evolve", TASK, "--config", config, "--iterations", 6, "--out", out, "--json")
    assert first.returncode == 0, first.stderr[-3000:]
    latest = (out / "checkpoint" / "LATEST").read_text().strip()
    for file in (out / "checkpoint" / latest / "engine").rglob("*"):
        if file.is_file():
            file.write_bytes(file.read_bytes()[: len(file.read_bytes()) // 2])  # a torn write
    more = cli("evolve", "--resume", out, "--iterations", 2, "--json")
    assert more.returncode == 0, more.stderr[-3000:]
    assert "Traceback" not in more.stderr and ".cpp" not in more.stderr
    assert f"checkpoint {latest} is unreadable" in more.stderr and "trying an older one" in more.stderr
    reference = cli("evolve", TASK, "--config", config, "--iterations", 8, "--out", whole, "--json")
    assert reference.returncode == 0, reference.stderr[-3000:]
    # The steps after the older checkpoint came back from the trajectory: the
    # run ends as one that was never interrupted, each request recorded once.
    summary, expected = json.loads(more.stdout), json.loads(reference.stdout)
    for key in ("steps", "status_counts", "best_speedup", "best_program_id", "archive"):
        assert summary[key] == expected[key], key
    assert [s["request_id"] for s in _steps(out)] == list(range(8))
    assert [s["child_source"] for s in _steps(out) if "child_source" in s] == [
        s["child_source"] for s in _steps(whole) if "child_source" in s
    ]


def test_core_errors_carry_no_cpp_source_path(tmp_path):
    from kernelsmith import CorruptStateError
    from kernelsmith.engine import Engine, EngineConfig

    with pytest.raises(ValueError) as info:
        EngineConfig(num_islands=0)
    assert str(info.value) == "config key 'num_islands' must be >= 1, got 0"
    assert "engine_config.cpp:" in info.value.cpp_location  # kept for debugging, off the message
    checkpoint = Engine().save(tmp_path)
    checkpoint.write_bytes(checkpoint.read_bytes()[:10])
    with pytest.raises(CorruptStateError) as info:
        Engine.load(checkpoint)
    assert "is corrupt or truncated" in str(info.value) and ".cpp" not in str(info.value)
    assert "engine_checkpoint.cpp:" in info.value.cpp_location


def test_other_commands_report_bad_input_the_same_way(tmp_path):
    missing = tmp_path / "missing"
    cases = [
        (["eval", missing, "candidate.py"], "no such task"),
        (["eval", TASK, missing / "candidate.py"], "no such candidate file"),
        (["report", missing], "not a run directory"),
        (["export", "sft", missing, "-o", tmp_path / "sft"], "not a run directory"),
        (["bench", missing], "is not a directory"),
        (["curate", missing, tmp_path / "tasks"], "is not a directory"),
        (["demo", "--iterations", "0"], "must be >= 1"),
        (["serve", "--task", missing, "--port", "0"], "no such task"),
        (["serve", "--host", "0.0.0.0", "--port", "0"], "without a token"),
    ]
    failures = []
    for args, expected in cases:
        proc = cli(*args, cwd=tmp_path)
        lines = proc.stderr.strip().splitlines()
        if not (
            proc.returncode == 2
            and len(lines) == 1
            and lines[0].startswith(f"kernelsmith {args[0]}: error: ")
            and expected in lines[0]
            and not missing.exists()
        ):
            failures.append((args, proc.returncode, proc.stderr[-800:]))
    assert not failures, failures

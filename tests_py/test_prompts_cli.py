"""Repair mode and prompt assembly through ``kernelsmith evolve`` as a user
runs it: the real CLI, the real sandboxed evaluator (Triton on the
interpreter, a small task with timing off so each evaluation takes a second or
two) and the real OpenAI client, against the scripted LLM server of
mock_llm_server.py. Every assertion is on what the server received.

test_evolve.py and test_prompts.py check the same points in-process (through
evolve_sync and the PromptBuilder); this checks that the CLI path wires them up
the same way (the task, backend and device it detects, the config it reads).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernelsmith.trajectory import EvalStore

HERE = Path(__file__).parent
SCALE = HERE / "fixtures_evolve" / "scale"
SEED = (SCALE / "seed.py").read_text()
SOFTMAX_OPENCL = HERE.parent / "examples" / "opencl" / "softmax"
KEY = "sk-test-prompts-0123456789"

# A program that fails with a long one-line error of numbered words: its
# history line must be cut between two words, never inside one (the words'
# lengths vary, so no fixed-width cut lands on a boundary by chance).
WORD_LIST = [f"tok{i:04d}" + "z" * (i % 3) for i in range(120)]
WORDS = " ".join(WORD_LIST)
LONG_ERROR = SEED.replace(
    "        y = torch.empty_like(x)\n", f"        raise RuntimeError({WORDS!r})\n        y = torch.empty_like(x)\n"
)


def _env(mock_llm) -> dict[str, str]:
    import kernelsmith

    package_root = str(Path(kernelsmith.__file__).resolve().parent.parent)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")]),
        TRITON_INTERPRET="1",
        OPENAI_BASE_URL=mock_llm.openai_base_url,
        OPENAI_API_KEY=KEY,
    )
    env.pop("OPENAI_API_BASE", None)
    return env


def _evolve(mock_llm, *args: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kernelsmith", "evolve", *map(str, args)],
        env=_env(mock_llm),
        capture_output=True,
        text=True,
        timeout=600,
    )


def _fast_task(tmp_path: Path, source: Path = SCALE) -> Path:
    """A copy of the task with one trial and no timing: correctness is what
    these runs need, and a timed evaluation on the interpreter takes ~7 s."""
    task = tmp_path / source.name
    shutil.copytree(source, task)
    config = (task / "task.yaml").read_text() if (task / "task.yaml").exists() else ""
    config = re.sub(r"(?m)^trials:.*\n", "", config)
    (task / "task.yaml").write_text(config + "trials: 1\ntiming:\n  enabled: false\n")
    return task


def _config(tmp_path: Path, **engine: object) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(
        json.dumps(
            {  # JSON is YAML
                "proposal_concurrency": 1,
                "finalists": 0,
                "checkpoint_every": 4,
                "llm": {"timeout_s": 60.0, "retry": {"max_attempts": 2, "backoff_base_s": 0.01}},
                "engine": {"num_islands": 1, **engine},
            }
        )
    )
    return path


def _steps(run: Path) -> list[dict]:
    records = [json.loads(line) for line in (run / "trajectory.jsonl").read_text().splitlines()]
    return [r for r in records if r["kind"] == "step"]


def _section(user: str, title: str, end: str) -> str:
    start = user.index(title)
    return user[start : user.index(end, start)]


def _current_program(user: str) -> str:
    return _section(user, "## Current program", "### Evaluation of the current program")


def _programs_shown(user: str) -> list[str]:
    """Every program in a user prompt but the reference: the fenced blocks
    after the reference section."""
    after_reference = user[user.index("```", user.index("## Reference module")) :]
    after_reference = after_reference[after_reference.index("```", 3) + 3 :]
    return re.findall(r"```python\n(.*?)```", after_reference, flags=re.S)


def _normalized(source: str) -> str:
    lines = (line.split("#", 1)[0].rstrip() for line in source.splitlines())
    return "\n".join(line for line in lines if line)


def _full(source: str) -> str:
    return f"Here is the program:\n```python\n{source}```\n"


@pytest.mark.slow
def test_repair_and_prompt_assembly_through_the_cli(mock_llm, tmp_path):
    outside = SEED.replace("import triton\n", "import triton  # changed outside the EVOLVE block\n")
    no_markers = SEED.replace("# EVOLVE-BLOCK-START\n", "").replace("# EVOLVE-BLOCK-END\n", "")
    broken = SEED.replace("BLOCK = 64", "BLOCK = (64")
    mock_llm.script(
        _full(outside),  # 1: edit-failed (a change outside the EVOLVE block)
        _full(no_markers),  # 2: a repair of 1 that drops the markers: rejected as well
        _full(broken),  # 3: a repair of 2 with a syntax error: its text is what 4 repairs
        "fixed, as a diff:\n<<<<<<< SEARCH\nBLOCK = (64  # tune: [32, 64, 128, 256, 512]\n=======\n"
        "BLOCK = 128  # tune: [32, 64, 128, 256, 512]\n>>>>>>> REPLACE\n",  # 4: repairs 3
        _full(LONG_ERROR),  # 5: a runtime error with a long message
        _full(SEED.replace("WARPS = 1", "WARPS = 2")),  # 6..8: more correct programs, so later
        _full(SEED.replace("BLOCK = 64", "BLOCK = 256")),  # prompts have top programs and
        _full(SEED.replace("BLOCK = 64", "BLOCK = 512")),  # inspirations to show
    )
    mock_llm.handler = lambda request: _full(SEED.replace("WARPS = 1", "WARPS = 8"))
    task, out = _fast_task(tmp_path), tmp_path / "run"
    proc = _evolve(
        mock_llm,
        task,
        "--model",
        "openai:m",
        "--iterations",
        10,
        "--out",
        out,
        "--config",
        _config(tmp_path, repair_ratio=1.0),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = _steps(out)
    requests = mock_llm.requests
    # one request per step, in step order (one proposal in flight at a time)
    assert len(requests) == len(steps) == 10
    assert [r.messages for r in requests] == [s["prompt"] for s in steps]
    users = [r.last_user for r in requests]

    # -- repair mode: the failed program's actual text, the EVOLVE-block rules kept
    assert [s["status"] for s in steps[:5]] == ["edit-failed", "edit-failed", "edit-failed", "correct", "incorrect"]
    assert EvalStore.load(out).raw(steps[4]["eval_key"])["category"] == "runtime"
    assert [s["mode"] for s in steps[1:4]] == ["repair"] * 3
    assert steps[0]["edit"]["error_kind"] == "evolve_blocks"
    assert steps[1]["edit"]["error_kind"] == "evolve_blocks"  # a repair's edit is held to the blocks too
    assert steps[2]["edit"]["error_kind"] == "syntax"
    # repair of 1: the program it started from (a rule-breaking text is never kept), not an empty one
    current = _current_program(users[1])
    assert "def scale_kernel" in current and "BLOCK = 64" in current and "changed outside" not in current
    assert "EVOLVE-BLOCK" in users[1][users[1].index("### Evaluation of the current program") :]
    # repair of 2: the markers are still there to keep
    assert "# EVOLVE-BLOCK-START" in _current_program(users[2])
    # repair of 3: the broken program's own text and its error
    assert "BLOCK = (64" in _current_program(users[3]) and "SyntaxError" in users[3]
    assert "BLOCK = 128" in steps[3]["child_source"]
    assert "Repair:" in users[3] and "Repair:" not in users[0]
    # the failure after 5 is repaired from 5's own text
    runtime_repairs = [
        u for s, u in zip(steps, users) if s["mode"] == "repair" and WORD_LIST[-1] in _current_program(u)
    ]
    assert runtime_repairs, [s["mode"] for s in steps]

    # -- no program twice in one prompt (top programs, inspirations, current)
    shown_counts = []
    for user in users:
        programs = [_normalized(p) for p in _programs_shown(user)]
        assert len(programs) == len(set(programs)), user
        shown_counts.append(len(programs))
    assert max(shown_counts) >= 3, shown_counts  # some prompts had programs besides the current one

    # -- history: one line per attempt, cut between words, the cut marked
    for user in users:
        if "## Previous attempts" not in user:
            continue
        history = _section(user, "## Previous attempts", "\n\n")
        for line in history.splitlines()[2:]:
            assert line.startswith("- id ") or re.fullmatch(r"\(\d+ older or weaker attempts omitted.*\)", line), line
    long_lines = [
        line
        for user in users
        if "## Previous attempts" in user
        for line in _section(user, "## Previous attempts", "\n\n").splitlines()
        if "tok0" in line
    ]
    assert long_lines, "the runtime error's attempt never reached a history"
    for line in long_lines:
        assert WORD_LIST[-1] in line and "tok0000" not in line  # the error's tail kept
        outcome = line.split(" -- runtime: ", 1)[1]
        assert outcome.startswith("... tok"), line  # the cut marked, and made before a word
        assert set(outcome.split()[1:]) <= set(WORD_LIST), line

    # -- tips for the backend and device in use: Triton on the interpreter
    for request in requests:
        system = request.system
        assert "Triton interpreter" in system and "@triton.jit" in system
        assert "PoCL" not in system and "OpenCL" not in system and "work-group" not in system
        assert "compute capability" not in system  # no GPU target on the interpreter
    assert all(s["prompt_meta"]["hardware_family"] == "triton_interpreter" for s in steps)


@pytest.mark.slow
def test_opencl_run_on_pocl_gets_the_opencl_and_cpu_device_tips(mock_llm, tmp_path):
    """The other side of the tips check: an OpenCL task on PoCL gets the
    OpenCL tips and the CPU device's notes, and none of Triton's."""
    from kernelsmith.backends import get_backend

    missing = get_backend("opencl").unavailable_reason()
    if missing:
        pytest.skip(f"no OpenCL device: {missing}")
    mock_llm.handler = lambda request: "no program in this answer"
    task, out = _fast_task(tmp_path, SOFTMAX_OPENCL), tmp_path / "run"
    proc = _evolve(
        mock_llm, task, "--model", "openai:m", "--iterations", 1, "--out", out, "--config", _config(tmp_path), "--json"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(mock_llm.requests) == 1
    system = mock_llm.requests[0].system
    assert "OpenCL" in system and "work-group" in system
    assert "Triton" not in system and "@triton.jit" not in system
    assert _steps(out)[0]["prompt_meta"]["hardware_family"] == "cpu"


@pytest.mark.slow
def test_no_program_twice_with_islands_and_migrants_through_the_cli(mock_llm, tmp_path):
    """Several islands that migrate often: every island holds a copy of the
    seed, and migrants are copies of programs under new ids, so the engine's
    top programs and inspirations often name the same code twice. Each prompt
    the server received shows it once."""
    variants = [
        SEED.replace("BLOCK = 64", f"BLOCK = {b}").replace("WARPS = 1", f"WARPS = {w}")
        for b in (64, 128, 256, 512)
        for w in (1, 2, 4, 8)
    ][1:]
    mock_llm.script(*(_full(v) for v in variants))
    mock_llm.handler = lambda request: "no program in this answer"
    task, out = _fast_task(tmp_path), tmp_path / "run"
    config = tmp_path / "islands.yaml"
    config.write_text(
        json.dumps(
            {
                "proposal_concurrency": 1,
                "finalists": 0,
                "engine": {"num_islands": 2, "migration_interval": 2, "migration_rate": 1.0, "repair_ratio": 0.0},
            }
        )
    )
    proc = _evolve(
        mock_llm, task, "--model", "openai:m", "--iterations", 12, "--out", out, "--config", config, "--json"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(mock_llm.requests) == 12
    shown = []
    for request in mock_llm.requests:
        programs = [_normalized(p) for p in _programs_shown(request.last_user)]
        assert len(programs) == len(set(programs)), request.last_user
        shown.append(len(programs))
    assert max(shown) >= 3, shown

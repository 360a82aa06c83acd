"""Phases said and bounded: the phase an evaluation is in, shown while a
command waits (evaluator/phases.py), each printed with its time, and a limit
reached names the phase it ended in. Through the real CLI, the real
sandboxed evaluator and (for ``task init``) the real in-place evaluator."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelsmith.cli import main
from kernelsmith.evaluator import phases
from kernelsmith.evaluator.phases import PhaseLine

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples" / "triton"
CAND = HERE / "fixtures" / "candidates"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_phase_line_shows_the_phase_going_on_and_each_with_its_time():
    live, printed = _Terminal(), io.StringIO()
    with PhaseLine("checking", stream=live, lines=True, lines_stream=printed, every_s=0.05) as line:
        phases.report("import")
        time.sleep(0.3)
        with phases.step("comparison float32"):
            phases.report("load reference")
            time.sleep(0.2)
    names = [name for name, _ in line.durations]
    assert names == ["import", "comparison float32", "comparison float32: load reference"]
    assert line.durations[0][1] >= 0.25 and line.durations[2][1] >= 0.15
    # one line per phase as it ended, with its time
    assert printed.getvalue().splitlines()[0].startswith("  import: 0.")
    assert printed.getvalue().splitlines()[2].startswith("  comparison float32: load reference: 0.")
    # the live line was redrawn in place while the phase went on, and cleared at the end
    drawn = live.getvalue()
    assert "\rchecking: import 0." in drawn and "(total " in drawn
    assert drawn.endswith("\r")
    phases.report("after")  # nobody listens any more: nothing recorded
    assert len(line.durations) == 3


def test_phase_line_is_quiet_off_a_terminal_without_lines():
    log = io.StringIO()
    with PhaseLine("evaluating", stream=log) as line:
        phases.report("import")
    assert log.getvalue() == "" and [n for n, _ in line.durations] == ["import"]


def test_eval_verbose_prints_each_phase_and_a_timeout_names_the_phase(capsys, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    rc = main(
        ["eval", str(EXAMPLES / "relu"), str(CAND / "hang.py"), "--trials", "1", "--no-timing", "--timeout", "10", "-v"]
    )
    captured = capsys.readouterr()
    assert rc == 1
    # each phase with its time on stderr (-v), the last the one the limit ended
    shown = [line for line in captured.err.splitlines() if line.startswith("  ")]
    assert any(line.startswith("  load reference: ") for line in shown), captured.err[-2000:]
    first_call = (
        "input set 'get_inputs', trial 0, before the reference: the program's first call (compiles its kernels)"
    )
    assert shown[-1].startswith(f"  {first_call}: ") and shown[-1].endswith(" s"), shown
    assert float(shown[-1].rsplit(": ", 1)[1].split()[0]) >= 5  # most of the 10 s went there
    # the verdict names it too
    assert "wall-clock limit of 10 s exceeded (worker killed) during: " + first_call in captured.out


@pytest.mark.slow
def test_evolve_shows_the_seed_evaluations_phases(tmp_path):
    """``evolve -v``: the seed's evaluation (before any step) prints its
    phases with their times on stderr; the real CLI and evaluator."""
    import kernelsmith

    env = dict(
        os.environ,
        TRITON_INTERPRET="1",
        PYTHONPATH=os.pathsep.join(
            [str(Path(kernelsmith.__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")]
        ),
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kernelsmith",
            "evolve",
            str(HERE / "fixtures_evolve" / "scale"),
            "--iterations",
            "0",
            "--out",
            str(tmp_path / "run"),
            "-v",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # each of the seed's stages with its time, under the run's own start lines
    # ("evaluating the seed: <stage>: <seconds> s")
    shown = [
        line.strip().removeprefix("evaluating the seed: ") for line in proc.stderr.splitlines() if line.startswith("  ")
    ]
    assert any(line.startswith("load reference: ") for line in shown), proc.stderr[-3000:]
    assert any(re.fullmatch(r"timing: [\d.]+ s", line) for line in shown), proc.stderr[-3000:]


def test_routed_listeners_hear_only_their_own_evaluations_stages():
    """The daemon serves several clients at once: each request's listener
    (phases.routed) hears the stages reported from the threads its work was
    handed to in a copy of its context (Evaluator.submit), not another's."""
    import concurrent.futures
    import contextvars
    import threading

    from kernelsmith.evaluator import phases

    pool = concurrent.futures.ThreadPoolExecutor(2)
    both = threading.Barrier(2)

    def work(name: str) -> None:  # an evaluation reporting its stages from a pool thread
        both.wait(timeout=10)  # the two run at the same time
        for i in range(3):
            phases.report(f"{name} stage {i}")

    def request(name: str) -> list[str]:
        heard: list[str] = []
        with phases.routed(heard.append):
            pool.submit(contextvars.copy_context().run, work, name).result(timeout=10)
        return heard

    outer = concurrent.futures.ThreadPoolExecutor(2)  # the daemon's connection threads
    a, b = outer.submit(request, "a"), outer.submit(request, "b")
    assert a.result(timeout=10) == ["a stage 0", "a stage 1", "a stage 2"]
    assert b.result(timeout=10) == ["b stage 0", "b stage 1", "b stage 2"]
    everyone: list[str] = []
    with phases.listening(everyone.append):  # a process-wide listener still hears all
        phases.report("x")
    assert everyone == ["x"]

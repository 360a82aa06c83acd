"""``kernelsmith evolve``'s progress as a user sees it (issue 31): on a
terminal a live bar with the rate in steps/min and an ETA from
--iterations; in a pipe or a log the plain lines scripts parse, without
escape codes or carriage returns. Run through standin_cli.py (the real CLI
with the deterministic stand-in evaluator), each step slowed to 0.3 s so the
rate and the ETA have time to appear."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
TASK = HERE / "fixtures_evolve" / "scale"
ITERATIONS = 8
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
PLAIN = re.compile(
    r"\[[#-]{24}\] step \d+/%d( \(the seed\))?( \(\d+ running\))? \| best per-step \S+( unreliable)? "
    r"\| correct \d+( \| LLM errors \d+)? \| tokens \d+ \| \d+s( \| ETA \d+s)?" % ITERATIONS
)


def _env(**extra: str) -> dict[str, str]:
    import kernelsmith

    package_root = str(Path(kernelsmith.__file__).resolve().parent.parent)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")]),
        TRITON_INTERPRET="1",
        KERNELSMITH_DAEMON="0",
        KS_STANDIN_DELAY="0.3",
    )
    for name in ("OPENAI_BASE_URL", "OPENAI_API_BASE", "OPENAI_API_KEY", "KS_STANDIN_CONFIRM", "NO_COLOR"):
        env.pop(name, None)
    env.update(extra)
    return env


def _command(out: Path) -> list[str]:
    return [
        sys.executable,
        str(HERE / "standin_cli.py"),
        "evolve",
        str(TASK),
        "-o",
        str(out),
        "--iterations",
        str(ITERATIONS),
    ]


def test_a_terminal_gets_a_live_bar_with_rate_and_eta(tmp_path):
    import pty
    import select

    reader, writer = pty.openpty()
    child = subprocess.Popen(
        _command(tmp_path / "run"),
        env=_env(TERM="xterm-256color", COLUMNS="200"),
        stdout=subprocess.PIPE,
        stderr=writer,
        text=True,
    )
    os.close(writer)
    raw = b""
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            if not select.select([reader], [], [], 1.0)[0]:
                if child.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(reader, 65536)
            except OSError:  # the child closed its end of the pty
                break
            if not chunk:
                break
            raw += chunk
        stdout, _ = child.communicate(timeout=60)
    finally:
        os.close(reader)
    assert child.returncode == 0, raw.decode(errors="replace")[-3000:]
    text = ANSI.sub("", raw.decode(errors="replace"))
    assert re.search(r"\d+\.\d steps/min", text), text[-2000:]
    assert re.search(r"ETA \d+:\d\d", text), text[-2000:]  # from --iterations and the rate
    assert f"step {ITERATIONS}/{ITERATIONS} |" in text and "best per-step " in text
    # the bar, not the plain lines
    assert not re.search(r"^\[[#-]{24}\] ", text, re.MULTILINE)
    assert "steps" in stdout and "best speedup" in stdout  # the summary table still goes to stdout


def test_a_pipe_gets_plain_lines(tmp_path):
    # a stand-in evaluator that re-times finalists (KS_STANDIN_CONFIRM: the winner's speedup and CI)
    proc = subprocess.run(
        _command(tmp_path / "run"),
        env=_env(TERM="xterm-256color", KS_STANDIN_CONFIRM="1.2,1.1,1.3"),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "\x1b" not in proc.stderr and "\r" not in proc.stderr and "steps/min" not in proc.stderr
    progress = [line for line in proc.stderr.splitlines() if line.startswith("[")]
    assert progress, proc.stderr[-3000:]
    assert all(PLAIN.fullmatch(line) for line in progress), progress
    assert progress[-1].split("] ")[1].startswith(f"step {ITERATIONS}/{ITERATIONS} |")
    # after the last step, the finalists' re-timing is said before it starts, not left silent
    lines = proc.stderr.splitlines()
    retiming = [
        i
        for i, line in enumerate(lines)
        if re.match(r"kernelsmith evolve: re-timing the \d+ fastest correct program\(s\) head to head", line)
    ]
    assert len(retiming) == 1 and retiming[0] > lines.index(progress[-1]), proc.stderr[-3000:]

"""The helpers that several layers share (kernelsmith._process,
kernelsmith._astutil): one copy each, doing what the copies it replaced did."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import time

from kernelsmith._astutil import dotted
from kernelsmith._process import kill_group, kill_process


def _expr(text: str) -> ast.AST:
    return ast.parse(text, mode="eval").body


def test_dotted_reads_name_and_attribute_chains_only():
    assert dotted(_expr("torch")) == "torch"
    assert dotted(_expr("torch.nn.functional.relu")) == "torch.nn.functional.relu"
    for text in ("f().x", "a[0].b", "Generic[T]", "'s'.join", "1"):
        assert dotted(_expr(text)) is None, text


def test_dotted_through_subscripts_reads_base_classes_as_curation_does():
    assert dotted(_expr("Generic[T]"), through_subscripts=True) == "Generic"
    assert dotted(_expr("typing.Generic[T][U]"), through_subscripts=True) == "typing.Generic"
    assert dotted(_expr("a[0].b"), through_subscripts=True) == "a.b"
    assert dotted(_expr("nn.Module"), through_subscripts=True) == "nn.Module"
    assert dotted(_expr("make()[0]"), through_subscripts=True) is None
    assert dotted(_expr("make().Base"), through_subscripts=True) is None


def test_the_static_checks_and_the_backends_share_one_dotted():
    from kernelsmith.backends import opencl
    from kernelsmith.backends.triton import backend as triton
    from kernelsmith.curate import extract
    from kernelsmith.evaluator import static

    assert static.dotted is dotted and triton.dotted is dotted and opencl.dotted is dotted
    assert extract.dotted is dotted


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _group_with_grandchild() -> tuple[subprocess.Popen, int]:
    """A child in a session of its own that forked a grandchild; returns the
    child and the grandchild's pid."""
    code = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None
    grandchild = int(proc.stdout.readline())
    return proc, grandchild


def _gone(pid: int, timeout: float = 10.0) -> bool:
    # the grandchild is reparented when its parent dies; its reaper (init or
    # a subreaper) may take a moment
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ", 1)[1].startswith("Z"):
                    return True  # killed, not reaped yet by whoever adopted it
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_kill_process_ends_the_child_and_what_it_forked():
    proc, grandchild = _group_with_grandchild()
    kill_process(proc)
    assert proc.returncode == -9  # reaped by kill_process
    assert _gone(grandchild)
    kill_process(proc)  # again, on a reaped child: nothing left, no error
    kill_group(proc.pid)


def test_kill_process_without_wait_leaves_the_reaping_to_the_caller():
    proc, grandchild = _group_with_grandchild()
    kill_process(proc, wait=False)
    assert proc.wait(timeout=10) == -9
    assert _gone(grandchild)


def test_kill_group_signals_the_group_and_tolerates_a_gone_one():
    proc, grandchild = _group_with_grandchild()
    kill_group(proc.pid, 15)
    assert proc.wait(timeout=10) == -15
    assert _gone(grandchild)
    kill_group(proc.pid)  # the group is gone: ProcessLookupError is swallowed

"""Integrity v3, forged verdicts through the channel (issue 29): a program
that takes over the worker's channel to the evaluator (a relay dup2'd over
it, a socket of its own reopened on its number, the zygote's control socket
a pool child used to inherit) is rejected as hacked with a reason that names
what it did; the descriptors a candidate can see are stdio and its own
channel only; the worker's system-call filter (C++, kernelsmith._core) lets
subprocesses and threads work; a result line the program writes itself
(the direct forge) is caught by the parent, whose figures no timing
reported; lines a child the program forked writes (the fork forges) are
refused by the parent, which reads the writer's pid of every message
(SO_PASSCRED) and knows the worker's from its first line. The fixtures are in fixtures/hacks_v3 (docs/evaluator.md,
"Integrity v3")."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelsmith import _core
from kernelsmith.evaluator import Evaluator
from kernelsmith.evaluator.sandbox import FILTER_PREFIX
from kernelsmith.task import Task

HERE = Path(__file__).parent
HACKS = HERE / "fixtures" / "hacks_v3"
EXAMPLES = HERE.parent / "examples" / "triton"
PYTHONPATH = str(Path(__import__("kernelsmith").__file__).resolve().parent.parent)

needs_interpreter = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
    reason="CPU evaluator tests run the Triton interpreter (set TRITON_INTERPRET=1)",
)

#: fixture -> what its reason must say
REASONS = {
    "channel_relay": r"^the program tried to replace the evaluator's channel \(dup2 onto fd \d+\)$",
    "channel_close_reopen": r"^the program tried to close the evaluator's channel \(close of fd \d+\)$",
    # the control socket is gone from the child: the program falls back to a
    # relay in front of its own channel, which is refused
    "channel_zygote_control": r"^the program tried to replace the evaluator's channel \(dup2 onto fd \d+\)$",
    # nothing stops its writes (code in the worker's process can write what
    # the harness writes); the parent finds a speedup no timing reported to
    # it (trusted/timing_reports.py)
    "channel_direct_forge": r"^the result's timing figures are not the ones measured \(no timing reported any "
    r"figures to the parent\)",
    # the timing's side of the protocol reproduced from the worker's own
    # process (the slot, a timing-done report, evidence, a result, all with
    # the same figures): the parent ran no audit round of its own
    # (trusted/audit_check.py, docs/evaluator.md "Audit rounds")
    "channel_forge_report": r"^the timing reported a speedup but no audit round ran under the parent's clock",
    # a child forked in forward speaks for the worker (evidence, timing-done,
    # result with the figures it reported): the parent knows the writer of
    # every read (SO_PASSCRED) and the worker's pid from its first line
    "channel_fork_forge": r"^a process other than the worker wrote on the evaluator's channel \(pid \d+; the worker "
    r"is pid \d+\): a process the program started forged protocol messages$",
    # the same, the evidence the worker's own and true, the timing-done and
    # result the child's, at the first timed call (timing on: TIMED below)
    "channel_fork_forge_timed": r"^a process other than the worker wrote on the evaluator's channel \(pid \d+; the "
    r"worker is pid \d+\): a process the program started forged protocol messages$",
}

#: the fixtures that act only while timed: evaluated with timing on
TIMED = {"channel_fork_forge_timed", "channel_forge_report", "channel_direct_forge"}


def _show(r) -> str:
    return f"{r.category}: {r.error[:600]} {r.hack_reasons}\n{r.log_tail[-1500:]}"


def test_the_channel_fixtures_pass_the_static_checks():
    from kernelsmith.backends.base import get_backend

    backend = get_backend("triton")
    names = sorted(p.stem for p in HACKS.glob("channel_*.py"))
    assert names == sorted(REASONS), names
    for p in HACKS.glob("channel_*.py"):
        report = backend.static_check(p.read_text())
        assert not report.hacks and not report.errors and not report.warnings, (p.name, report)
        assert p.read_text().startswith("# category: channel"), p.name


def test_the_log_prefix_is_the_filters():
    assert _core.SYSCALL_FILTER_LOG_PREFIX == FILTER_PREFIX


# ---------------------------------------------------------------- descriptors


def _descriptors(r) -> list[dict]:
    m = re.search(r"FDS=(\[.*?\])=FDS", r.error)
    assert r.category == "compile" and m, _show(r)
    return json.loads(m.group(1))


@needs_interpreter
@pytest.mark.parametrize("mode", ["pool", "fresh"])
def test_a_candidate_sees_stdio_and_its_own_channel_only(mode):
    """What fixtures/fd_probe.py lists (and fstat's) at import: stdin on
    /dev/null, stdout and stderr on the worker's log, the job channel (pool:
    the one job socket; fresh: its one socket, as stdin and stdout), the
    system-call filter's listener and its descriptor on the log
    (protocol.Channel.guard). Nothing
    of the pool: not the zygote's control socket, not its wake pipe, not
    another child's job socket."""
    with Evaluator(backend="triton", mode=mode, workers=1, timeout_s=150, timing=False) as ev:
        r = ev.evaluate(Task.load(EXAMPLES / "relu"), (HERE / "fixtures" / "fd_probe.py").read_text())
    seen = {d["fd"]: d for d in _descriptors(r)}
    assert seen[0]["kind"] == "chr" and seen[0]["target"] == "/dev/null", seen
    assert seen[1]["kind"] == "file" and seen[1]["target"].endswith("worker.log"), seen
    assert seen[2]["target"] == seen[1]["target"], seen
    # the system-call filter's listener, which its supervisor thread reads,
    # and its own descriptor on the log for the line that ends a worker
    filtered = _core.syscall_filter_supported()
    listener = [d for d in seen.values() if d["target"] == "anon_inode:seccomp notify"]
    listener += [d for fd, d in seen.items() if fd > 2 and d["target"] == seen[2]["target"]]
    assert len(listener) == (2 if filtered else 0), seen
    channel = sorted(d["kind"] for fd, d in seen.items() if fd > 2 and d not in listener)
    # pool: the one job socket; fresh: the same kind, the worker's stdin and
    # stdout moved to descriptors of their own
    assert channel == (["socket"] if mode == "pool" else ["socket", "socket"]), seen


# ------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def verdicts():
    relu = Task.load(EXAMPLES / "relu")
    names = sorted(set(REASONS) - TIMED)
    items = [(relu, (HACKS / f"{n}.py").read_text()) for n in names]
    # the open forgery in a job that asked for no timing at all, and the seed
    items.append((relu, (HACKS / "channel_forge_report.py").read_text()))
    items.append((relu, (EXAMPLES / "relu" / "seed.py").read_text()))
    with Evaluator(backend="triton", workers=2, timeout_s=150, timing=False) as ev:
        out = ev.evaluate_many(items)
    timed = sorted(TIMED)
    with Evaluator(backend="triton", workers=1, timeout_s=150, timing=True) as ev:
        out += ev.evaluate_many([(relu, (HACKS / f"{n}.py").read_text()) for n in timed])
    return dict(zip(names + ["channel_forge_report@untimed", "seed_relu"] + timed, out))


@needs_interpreter
@pytest.mark.parametrize("name", sorted(REASONS))
def test_a_program_that_takes_the_channel_is_rejected_naming_it(verdicts, name):
    r = verdicts[name]
    assert r.category == "hacked" and r.hacked and not r.correct and r.speedup is None, _show(r)
    assert len(r.hack_reasons) == 1 and re.search(REASONS[name], r.hack_reasons[0]), r.hack_reasons
    if not name.startswith(
        ("channel_direct_forge", "channel_fork_forge", "channel_forge_report")
    ):  # the filter's refusals: the worker's own last word
        assert FILTER_PREFIX + r.hack_reasons[0] in r.log_tail


@needs_interpreter
def test_a_forged_report_is_refused_where_the_job_asked_for_no_timing(verdicts):
    """The same forgery in a job sent with timing off: the parent knows no
    timing of the harness ran, so a speedup is the program's own."""
    r = verdicts["channel_forge_report@untimed"]
    assert r.category == "hacked" and r.speedup is None, _show(r)
    assert r.hack_reasons == [
        "the result has a speedup (4.0) but no timing was asked for (the job was sent with timing off): the "
        "verdict was not the program's to write"
    ]


@needs_interpreter
@pytest.mark.parametrize("name", ["channel_fork_forge"])
def test_fresh_mode_refuses_a_forked_writer_too(name):
    """Fresh mode's channel is a socket with credentials, as the pool's: a
    child the program forks cannot write the worker's result (it was a pair
    of pipes, whose reads name no writer)."""
    with Evaluator(backend="triton", mode="fresh", workers=1, timeout_s=150, timing=False) as ev:
        r = ev.evaluate(Task.load(EXAMPLES / "relu"), (HACKS / f"{name}.py").read_text())
    assert r.category == "hacked" and r.hacked and not r.correct and r.speedup is None, _show(r)
    assert len(r.hack_reasons) == 1 and re.search(REASONS[name], r.hack_reasons[0]), r.hack_reasons


@needs_interpreter
def test_the_seed_next_to_them_is_accepted(verdicts):
    r = verdicts["seed_relu"]
    assert r.category == "ok" and not r.hacked, _show(r)
    assert r.census["referee"] == "agreed", r.census


# ------------------------------------------------------- the filter on its own


def _run(script: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.mark.skipif(not _core.syscall_filter_supported(), reason="no seccomp user notifications here")
def test_subprocess_and_threads_keep_working_under_the_filter():
    """What an honest program may do (Triton runs ptxas through subprocess on
    a GPU): subprocess with close_fds, a Python that runs its own subprocess
    (its children close and reuse the channel's numbers after exec), threads;
    then a dup2 onto the channel still ends the process naming it."""
    p = _run("""
        import os, socket, subprocess, sys, threading
        from kernelsmith import _core
        ours, other = socket.socketpair()
        _core.syscall_filter_install([ours.fileno()])
        n = ours.fileno()  # the exec'd shell opens and closes the channel's own number
        subprocess.run(["/bin/sh", "-c", f"exec {n}</dev/null; exec {n}<&-"], check=True)
        nested = "import subprocess; subprocess.run(['/bin/true'], check=True, close_fds=True); print('nested ok')"
        print(subprocess.run([sys.executable, "-c", nested], check=True, capture_output=True, text=True).stdout.strip())
        done = []
        t = threading.Thread(target=lambda: done.append(sum(range(1000))))
        t.start(); t.join()
        ours.sendall(b"still ours"); print(other.recv(64).decode(), done[0], _core.syscall_filter_attempts(), flush=True)
        os.dup2(other.fileno(), ours.fileno())
        print("not reached", flush=True)
    """)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stdout, p.stderr)
    assert p.stdout.split("\n")[:2] == ["nested ok", "still ours 499500 0"], p.stdout
    assert "not reached" not in p.stdout
    assert re.search(
        re.escape(FILTER_PREFIX) + r"the program tried to replace the evaluator's channel "
        r"\(dup2 onto fd \d+\)\n",
        p.stderr,
    ), p.stderr


@pytest.mark.skipif(not _core.syscall_filter_supported(), reason="no seccomp user notifications here")
def test_honest_native_code_keeps_working_under_the_code_rules():
    """What the filter's code rules must let through (docs/evaluator.md,
    "Forged verdicts through the channel" (4)), with PyTorch loaded before the
    filter as in a worker: a CPU convolution (oneDNN's JIT mprotects anonymous
    memory read-write-execute), a ctypes callback (a libffi closure, mapped
    read-write-execute), an extension module loaded after the filter (ld.so
    maps its code from the file where the kernel chooses), realloc's mremap of
    a growing buffer; then anonymous memory mapped executable over libc's
    code ends the process naming it."""
    p = _run("""
        import ctypes, socket, sys
        import torch
        from kernelsmith import _core
        ours, _ = socket.socketpair()
        _core.syscall_filter_install([ours.fileno()])
        y = torch.nn.functional.conv2d(torch.randn(1, 3, 64, 64), torch.randn(8, 3, 3, 3))
        twice = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(lambda v: 2 * v)
        assert "_codecs_jp" not in sys.modules
        import _codecs_jp
        grown = bytearray(1 << 20)
        for _ in range(6):
            grown.extend(bytes(len(grown)))
        print(tuple(y.shape), twice(21), _codecs_jp.__file__.endswith(".so"), len(grown) >> 20,
              _core.syscall_filter_attempts(), flush=True)
        libc = ctypes.CDLL(None)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        page = ctypes.cast(libc.clock_gettime, ctypes.c_void_p).value & ~0xFFF
        libc.mmap(page, 4096, 7, 0x32, -1, 0)  # RWX, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED
        print("not reached", flush=True)
    """)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stdout, p.stderr)
    assert p.stdout.split("\n")[0] == "(1, 8, 62, 62) 42 True 64 0", p.stdout
    assert "not reached" not in p.stdout
    assert re.search(
        re.escape(FILTER_PREFIX) + r"the program tried to map memory over the code of libc\.so[.\d]* "
        r"\(mmap MAP_FIXED of anonymous memory, executable\)\n",
        p.stderr,
    ), p.stderr


@pytest.mark.skipif(not _core.syscall_filter_supported(), reason="no seccomp user notifications here")
def test_a_started_process_that_reads_the_workers_memory_is_recorded():
    p = _run("""
        import ctypes, os, socket
        from kernelsmith import _core
        ours, _ = socket.socketpair()
        _core.syscall_filter_install([ours.fileno()])
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            libc = ctypes.CDLL(None, use_errno=True)
            buf = ctypes.create_string_buffer(8)
            iov = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), 8)
            got = libc.syscall(310, parent, iov, 1, iov, 1, 0)  # process_vm_readv
            os._exit(0 if got == -1 and ctypes.get_errno() == 1 else 1)  # EPERM
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), _core.syscall_filter_attempts(), _core.syscall_filter_reason(),
              flush=True)
        os._exit(0)  # as the worker ends: no teardown closing the protected socket
    """)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert p.stdout.strip() == (
        "0 1 the program tried to read another process's memory (process_vm_readv) in a process it started"
    ), p.stdout


def test_the_channel_check_catches_a_replaced_channel_without_the_filter():
    """Where the filter cannot be installed (an old kernel) the harness still
    compares its channel with what it was before the program loaded."""
    p = _run("""
        import os, socket
        from kernelsmith import _core
        from kernelsmith.evaluator.worker import Channel
        def unavailable(fds, report_fd=2):
            raise RuntimeError("no seccomp here")
        _core.syscall_filter_install = unavailable
        ours, theirs = socket.socketpair()
        chan = Channel(ours.makefile("r"), ours.makefile("w"))
        print(chan.guard(), flush=True)
        chan.send(type="stage", stage="before")
        print(theirs.recv(100).decode().strip(), flush=True)
        relay, _ = socket.socketpair()
        os.dup2(relay.fileno(), ours.fileno())
        chan.send(type="stage", stage="after")
        print("not reached", flush=True)
    """)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stdout, p.stderr)
    lines = p.stdout.strip().split("\n")
    assert lines == ["system-call filter unavailable: no seccomp here", '{"type": "stage", "stage": "before"}'], lines
    assert re.search(
        re.escape(FILTER_PREFIX) + r"the program replaced or closed the evaluator's channel "
        r"\(fd \d+ is no longer the descriptor it was\)",
        p.stderr,
    ), p.stderr


# ------------------------------------------------------- who wrote a message


def test_the_parent_reads_who_wrote_each_message_and_refuses_a_forked_writer():
    """protocol.read_with_sender: the kernel names the writer of every read
    (SO_PASSCRED asked before the other end writes); a forked child's bytes
    carry its own pid, never glued to the worker's in one read."""
    import socket

    from kernelsmith.evaluator.protocol import foreign_sender, pass_credentials, read_with_sender

    ours, theirs = socket.socketpair()
    assert pass_credentials(ours)
    worker = os.fork()
    if worker == 0:  # the "worker": one line, then a child of its own writes one
        ours.close()
        theirs.sendall(b'{"type": "ready"}\n')
        child = os.fork()
        if child == 0:
            theirs.sendall(b'{"type": "result"}\n')
            os._exit(0)
        os.waitpid(child, 0)
        theirs.sendall(b'{"type": "stage"}\n')
        os._exit(0)
    theirs.close()
    reads = []
    while True:
        data, sender = read_with_sender(ours)
        if not data:
            break
        reads.append((data, sender))
    os.waitpid(worker, 0)
    ours.close()
    senders = [s for _, s in reads]
    assert b"".join(d for d, _ in reads) == b'{"type": "ready"}\n{"type": "result"}\n{"type": "stage"}\n'
    assert senders[0] == worker and senders[-1] == worker, reads
    forged = [(d, s) for d, s in reads if s != worker]
    assert forged and all(d == b'{"type": "result"}\n' for d, _ in forged), reads
    assert foreign_sender(worker, worker) == "" and foreign_sender(None, None) == ""
    assert "pid " in foreign_sender(forged[0][1], worker) and foreign_sender(None, worker)

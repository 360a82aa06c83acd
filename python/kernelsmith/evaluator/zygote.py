"""The pool's zygote: ``python -m kernelsmith.evaluator.zygote``.

One per device. It imports torch, the backend and the evaluator's worker
code once, warms what can be warmed without a device context (the torch-op
guard's dispatch machinery, the backend's imports), and then forks one
child per candidate. It never runs candidate code and never creates a
device context, so every child starts from the same clean, warm image:
nothing a candidate does (monkey-patches, leaked host or device memory, a
poisoned CUDA context, threads) outlives its child.

Control protocol with the pool (JSON lines on the inherited socket whose fd
is in ``KS_ZYGOTE_FD``; the job's socket travels as SCM_RIGHTS ancillary
data with ``spawn``):

  pool -> zygote   {"type": "spawn", "job": id, "workdir": path, "uid": n|null, "netns": bool}
                   {"type": "signal", "job": id, "sig": n}
  zygote -> pool   {"type": "hello", "pid": n, "warm_s": s} once warm
                   {"type": "spawned", "job": id, "pid": n}
                   {"type": "exit", "job": id, "status": returncode (negative: signal)}

The child sets itself up (own session, dies with the zygote, no network
namespace / own uid when the pool asks, private working directory and
caches, log on fd 1 and 2), prepares the backend (device context), says
``ready`` on its job socket and waits there for the job (see worker.py for
the rest of the protocol).
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import socket
import sys
import time
from typing import Any, Optional

from .protocol import EXIT, HELLO, SIGNAL, SPAWN, SPAWNED
from .protocol import READY, Channel

_PR_SET_PDEATHSIG = 1
_CLONE_NEWNET = 0x40000000


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def warm(backend_name: str) -> Any:
    """Everything that is the same for every candidate and creates no device
    context."""
    import torch

    # lazy: the zygote loads these in warm() after torch (the timed warm-up its children inherit)
    from ..backends.base import get_backend

    # lazy: the zygote loads these in warm() after torch (the timed warm-up its children inherit)
    from . import correctness, timing, tracebacks, worker  # noqa: F401 - imported to be inherited

    # lazy: the zygote loads these in warm() after torch (the timed warm-up its children inherit)
    from .guards import TorchOpGuard

    backend = get_backend(backend_name)
    backend.prepare_zygote()
    # The first TorchDispatchMode use builds the dispatch machinery (about
    # 2 s on a slow CPU); doing it once here spares every child.
    with TorchOpGuard(()):
        (torch.ones(4) + 1).sum()
    if torch.cuda.is_initialized():
        raise RuntimeError("the zygote initialised CUDA: forked children could not use the GPU")
    return backend


_PR_SET_KEEPCAPS = 8
_CAP_DAC_READ_SEARCH = 2
_CAP_VERSION_3 = 0x20080522


def _drop_to(libc: Any, uid: int) -> None:
    """Become ``uid`` (no groups) keeping only CAP_DAC_READ_SEARCH: the
    child can read and import what root can (a Python under /root) but write
    nothing outside its own folder, and cannot signal or trace other
    children, the zygote or the pool."""
    libc.prctl(_PR_SET_KEEPCAPS, 1)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    bit = 1 << _CAP_DAC_READ_SEARCH
    data[0], data[1], data[2] = bit, bit, 0  # effective, permitted, inheritable (caps 0-31)
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")
    libc.prctl(_PR_SET_KEEPCAPS, 0)


def _kill_uid(uid: int) -> None:
    """Kill whatever a child left running under its uid (a daemon that left
    the child's process group), so the uid is clean for the next child."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            os.kill(int(entry), signal.SIGKILL)
                        break
        except (OSError, ValueError):
            continue


def _close_all_but(keep: int) -> None:
    """Close every descriptor of this process above stdio except ``keep``."""
    os.closerange(3, keep)
    os.closerange(keep + 1, max(keep + 1, os.sysconf("SC_OPEN_MAX")))


def _child(
    sock: socket.socket,
    msg: dict[str, Any],
    backend_name: str,
    cpu_threads: Optional[int],
    control: socket.socket,
    wake_r: int,
    wake_w: int,
) -> None:
    """In the forked child: isolate, prepare, wait for the job, run it."""
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        # Not one descriptor of the pool may reach the candidate: the control
        # socket (a program could read the pool's messages to the zygote, the
        # next children's job sockets among them, and write its own), the
        # wake pipe (wake_r, wake_w), the job sockets of other spawn lines
        # received with ours (still in main's ``pending``).
        # control.close() is not enough: the reader main() made with
        # makefile() keeps the descriptor open. detach() takes the number
        # from the object (its finalizer can then never close a reused one)
        # and every number but stdio and our job socket is closed.
        control.detach()
        _close_all_but(sock.fileno())
        os.setsid()
        libc = _libc()
        workdir = str(msg["workdir"])
        log = os.open(os.path.join(workdir, "worker.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        if msg.get("netns"):
            if libc.unshare(_CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed")
        uid = msg.get("uid")
        if uid is not None:
            _drop_to(libc, int(uid))
        # after the uid change, which clears it
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() == 1:  # the zygote died before we asked to die with it
            os._exit(1)
        os.chdir(workdir)
        from ..backends.base import get_backend  # lazy: as in warm(), not at the zygote's start

        backend = get_backend(backend_name)
        env = {
            "HOME": workdir,
            "TMPDIR": workdir,
            **backend.worker_env(workdir, cpu_threads),
            **backend.shared_cache_env(str(msg["cache_dir"]), os.path.join(workdir, "cache-requests")),
        }
        os.environ.update(env)
        import tempfile

        tempfile.tempdir = None  # the zygote's cached temporary folder is not ours
        import faulthandler

        faulthandler.enable(file=sys.stderr, all_threads=False)
        from .worker import prepare, serve  # lazy: as in warm(), not at the zygote's start

        chan = Channel(sock.makefile("r", encoding="utf-8"), sock.makefile("w", encoding="utf-8", buffering=1))
        started = time.monotonic()
        backend = prepare(backend_name, cpu_threads, ahead=True)
        chan.send(type=READY, pid=os.getpid(), prepare_s=round(time.monotonic() - started, 4))
        serve(chan, chan.receive(), backend)
    except BaseException:  # noqa: BLE001 - report on the log, never return into the zygote's loop
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
    os._exit(70)


def main() -> None:
    fd = int(os.environ.pop("KS_ZYGOTE_FD"))
    control = socket.socket(fileno=fd)
    reader = control.makefile("r", encoding="utf-8")
    init = json.loads(reader.readline())
    backend_name = str(init["backend"])
    cpu_threads = init.get("cpu_threads")
    started = time.monotonic()
    warm(backend_name)

    def send(**msg: Any) -> None:
        control.sendall((json.dumps(msg) + "\n").encode())

    send(type=HELLO, pid=os.getpid(), warm_s=round(time.monotonic() - started, 3))
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, tuple[str, Optional[int]]] = {}  # pid -> (job id, uid)
    buf = b""
    pending: list[int] = []  # job sockets received, in the order of their spawn lines
    while True:
        ready, _, _ = select.select([control, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            entry = children.pop(pid, None)
            if entry is not None:
                job, uid = entry
                if uid is not None:
                    _kill_uid(uid)
                code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                send(type=EXIT, job=job, status=code)
        if control not in ready:
            continue
        data, fds, _flags, _addr = socket.recv_fds(control, 1 << 16, 4)
        if not data:  # the pool is gone: so are we, and our children with us (PDEATHSIG)
            os._exit(0)
        buf += data
        pending.extend(fds)
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            msg = json.loads(line)
            kind = msg.get("type")
            if kind == SPAWN:
                job_fd = pending.pop(0)
                pid = os.fork()
                if pid == 0:
                    _child(socket.socket(fileno=job_fd), msg, backend_name, cpu_threads, control, wake_r, wake_w)
                os.close(job_fd)
                children[pid] = (str(msg["job"]), msg.get("uid"))
                send(type=SPAWNED, job=msg["job"], pid=pid)
            elif kind == SIGNAL:
                for pid, (job, _uid) in list(children.items()):
                    if job == msg.get("job"):
                        try:
                            os.killpg(pid, int(msg["sig"]))
                        except (ProcessLookupError, PermissionError):
                            try:
                                os.kill(pid, int(msg["sig"]))
                            except ProcessLookupError:
                                pass


if __name__ == "__main__":
    main()
